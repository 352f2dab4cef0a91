"""File names between the work directory's bytes, the store's text and what people read.

Linux allows any bytes in a name but `/` and NUL; Python gives the bytes that are not UTF-8 as
surrogate escapes (`b"\\xe9"` reads as `"\\udce9"`), which the os functions take back but no
text encoding does (SQLite, S3 keys, JSON, a terminal). So a path (`rel`, as os gives it) is
turned into key text, valid UTF-8, where it meets those, and back where it comes out:

- a byte that is not UTF-8 becomes `‛XX` (U+201B and two uppercase hex digits, 80 to FF), as
  rclone's "InvalidUtf8" encoding writes it, and so does a control character (01 to 1F, 7F:
  a newline, a tab), which object stores refuse in a key;
- a literal `‛` is doubled only where it would otherwise read as such an escape (followed by
  `‛`, by an escaped byte, or by two hex digits from 80 to FF);
- everything else stays as it is, so names without such sequences (nearly all) are unchanged,
  and stores and records written before this codec read the same.

The codec works on the bytes (os.fsencode / os.fsdecode), so a name comes back byte for byte
whatever the locale. `shown()` is for people: never raises, always encodable.
"""

from __future__ import annotations

import codecs
import errno
import os
import re
import sys

ESCAPE = "\u201b"  # SINGLE HIGH-REVERSED-9 QUOTATION MARK, as rclone uses it
# Where the file system's names are UTF-8 (nearly always), text that encodes strictly is its own
# key text: the common case costs one scan of the string.
_UTF8_NAMES = codecs.lookup(sys.getfilesystemencoding()).name == "utf-8"
# In text decoded with surrogateescape: a byte that is not UTF-8, or a literal escape mark that
# must be doubled because what follows would make it read as an escape.
_ESCAPED = "\x01-\x1f\x7f\udc80-\udcff"
_DIGITS = "[89A-F][0-9A-F]|0[1-9A-F]|1[0-9A-F]|7F"
_TO_KEY = re.compile(f"[{_ESCAPED}]|{ESCAPE}(?={ESCAPE}|[{_ESCAPED}]|{_DIGITS})")
_FROM_KEY = re.compile(f"{ESCAPE}(?:{ESCAPE}|({_DIGITS}))")
# What shown() writes as an escape: control characters (C0, DEL, C1), line and paragraph
# separators, surrogates (bytes that are not UTF-8, or text that never was a name), and the
# marks and overrides that change the direction text is shown in (U+061C, U+200E, U+200F,
# U+202A-U+202E, U+2066-U+2069): a name with one can show as another name, or turn the text
# after it around (a command shown as harmless that is not). src/shown.ts writes the same.
_UNSHOWABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
# Errors of a store's file system that refuse one name, not the store: the file is the problem.
_NAME_ERRNOS = {
    errno.ENAMETOOLONG: "its name is too long for the store",
    errno.EILSEQ: "the store does not take this name (not valid in its character set)",
    errno.EINVAL: "the store does not take this name",
}


def encode(rel: str) -> str:
    """The key text of a path as os gives it: valid UTF-8, and decode() gives `rel` back."""
    if rel.isprintable() and (
        rel.isascii() or (_UTF8_NAMES and ESCAPE not in rel and encodable(rel))
    ):
        return rel
    try:
        raw = os.fsencode(rel)
    except (
        UnicodeEncodeError
    ):  # a surrogate no file name holds (text from elsewhere): kept as its bytes
        raw = rel.encode("utf-8", "surrogatepass")
    return _TO_KEY.sub(_escape, raw.decode("utf-8", "surrogateescape"))


def decode(text: str) -> str:
    """The path (as os gives it) of key text; anything that is not an escape is taken literally."""
    if text.isascii():
        return text
    unescaped = _FROM_KEY.sub(_unescape, text) if ESCAPE in text else text
    if _UTF8_NAMES and encodable(unescaped):
        return unescaped
    try:
        raw = unescaped.encode("utf-8", "surrogateescape")
    except (
        UnicodeEncodeError
    ):  # a surrogate no listing of a file system gives: not a byte of a name
        raw = unescaped.encode("utf-8", "replace")
    return os.fsdecode(raw)


def to_os(text: str) -> str:
    """Key text as a name for the os functions (a local-folder store): its UTF-8 bytes, so that
    the folder holds the same names whatever the locale of the process that wrote it."""
    if _UTF8_NAMES or text.isascii():
        return text
    return os.fsdecode(text.encode("utf-8", "surrogateescape"))


def from_os(name: str) -> str:
    """A name as the os functions give it (a local-folder store's listing) as key text."""
    if _UTF8_NAMES or name.isascii():
        return name
    return os.fsencode(name).decode("utf-8", "surrogateescape")


def shown(rel: str) -> str:
    """`rel` for people (API answers, logs, the command line): a byte that is not UTF-8 as
    `\\xe9`, a control character as `\\n`, `\\t` or `\\x1b`, a direction mark or override as
    `\\u202e`, the rest as it is. Any text from outside (a job's name from the store) too."""
    if rel.isascii() and rel.isprintable():
        return rel
    return _UNSHOWABLE.sub(_show, rel)


def refused_by_store(err: OSError) -> str | None:
    """Why a store's file system refused a name (too long, not in its character set), for the
    file's problem; None where the error is not about a name. EINVAL counts only with a path
    named (a rename, a mkdir), not from a read or write of data."""
    reason = _NAME_ERRNOS.get(err.errno or 0)
    if reason is None or (err.errno == errno.EINVAL and err.filename is None):
        return None
    return f"{reason} ({err.strerror or err})"


def encodable(text: str) -> bool:
    """Whether `text` holds no surrogate: UTF-8 (and so SQLite, S3, JSON, a terminal) takes it."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char == ESCAPE:
        return ESCAPE + ESCAPE
    code = ord(char)
    return f"{ESCAPE}{code - 0xDC00 if code >= 0xDC00 else code:02X}"


def _unescape(match: re.Match[str]) -> str:
    digits = match.group(1)
    if digits is None:
        return ESCAPE
    value = int(digits, 16)
    return chr(0xDC00 + value) if value >= 0x80 else chr(value)


def _show(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
