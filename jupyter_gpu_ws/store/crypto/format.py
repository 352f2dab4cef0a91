"""The byte format of one encrypted object: a header, then AES-256-GCM segments (STREAM).

    header  = magic "GWSE" | version (1) | segment shift (20: 1 MiB) | salt (16) | nonce prefix (7)
    segment = AES-256-GCM(object key, nonce, plaintext segment, associated data = header)
    nonce   = nonce prefix (7) | segment number (4, big-endian) | 1 for the last segment, else 0

Each object gets its own key, HKDF-SHA256(master key, salt, info = FORMAT_INFO + what the object
is): an object moved in from another path derives another key and fails. The segment number in
the nonce catches segments reordered, dropped or repeated; the last-segment flag catches an
object cut at a segment boundary. This is the construction of Tink's AES-GCM-HKDF streaming
AEAD and of the STREAM scheme (Hoang, Reyhanitabar, Rogaway, Vizár 2015), made with pyca/
cryptography's AES-GCM. Plaintext segment i is bytes [i*S, (i+1)*S) of the file, so a range of
the file maps to whole segments and parts of a large file can be fetched and decrypted apart.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ...diskio import pread_into, pwrite_all

MAGIC = b"GWSE"
VERSION = 1
SHIFT = 20  # plaintext segments of 1 MiB: a Tink AES256_GCM_HKDF_1MB-sized segment
SEGMENT = 1 << SHIFT
TAG = 16
SALT = 16
PREFIX = 7
HEADER = len(MAGIC) + 2 + SALT + PREFIX  # 29 bytes
FORMAT_INFO = b"gpuws AES-256-GCM STREAM v1\0"


class FormatError(Exception):
    """The bytes are not an object of this format written with this key and for this path."""


@dataclass(frozen=True)
class Header:
    salt: bytes
    prefix: bytes
    shift: int = SHIFT

    @property
    def segment(self) -> int:
        return 1 << self.shift

    def encode(self) -> bytes:
        return MAGIC + bytes([VERSION, self.shift]) + self.salt + self.prefix

    @classmethod
    def new(cls) -> Header:
        return cls(os.urandom(SALT), os.urandom(PREFIX))

    @classmethod
    def decode(cls, data: bytes) -> Header:
        if len(data) < HEADER or data[:4] != MAGIC:
            raise FormatError("not an encrypted object (no header)")
        if data[4] != VERSION:
            raise FormatError(f"written in format {data[4]}, this version reads format {VERSION}")
        shift = data[5]
        if not 10 <= shift <= 26:
            raise FormatError("the header names an impossible segment size")
        return cls(data[6 : 6 + SALT], data[6 + SALT : HEADER], shift)


def object_key(master: bytes, salt: bytes, binding: bytes) -> AESGCM:
    """The object's own AES-256-GCM key: HKDF-SHA256 of the master key, bound to the object."""
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=FORMAT_INFO + binding).derive(
        master
    )
    return AESGCM(key)


def _nonce(prefix: bytes, number: int, last: bool) -> bytes:
    if number >= 1 << 32:
        raise FormatError("too many segments for one object")
    return prefix + struct.pack(">IB", number, 1 if last else 0)


def encrypted_size(plain: int, segment: int = SEGMENT) -> int:
    """The stored size of a file of `plain` bytes (an empty file is one empty segment)."""
    segments = max(1, -(-plain // segment))
    return HEADER + plain + segments * TAG


def plain_size(stored: int, segment: int = SEGMENT) -> int | None:
    """The file's size from the stored object's size; None where no object has that size (cut
    inside a segment's tag)."""
    body = stored - HEADER
    if body < TAG:
        return None
    full, rest = divmod(body, segment + TAG)
    if rest == 0:
        return body - full * TAG
    if rest < TAG:
        return None
    return body - (full + 1) * TAG


def segment_span(
    offset: int, length: int, plain: int, segment: int = SEGMENT
) -> tuple[int, int, int, int]:
    """For the bytes offset..offset+length-1 of a file of `plain` bytes: the first and past-last
    segment numbers and the stored byte range [start, end) that holds them."""
    last = max(1, -(-plain // segment))  # number of segments
    first = offset // segment
    past = min(last, -(-(offset + length) // segment)) if length else first + 1
    start = HEADER + first * (segment + TAG)
    end = min(encrypted_size(plain, segment), HEADER + past * (segment + TAG))
    return first, past, start, end


class Encryptor:
    """Encrypts one object segment by segment: the header first, then each segment."""

    def __init__(self, master: bytes, binding: bytes, header: Header | None = None) -> None:
        self.header = header or Header.new()
        self._header = self.header.encode()
        self._aead = object_key(master, self.header.salt, binding)
        self._number = 0

    def segment(self, plain: bytes | memoryview, last: bool) -> bytes:
        out = self._aead.encrypt(
            _nonce(self.header.prefix, self._number, last), plain, self._header
        )
        self._number += 1
        return out


class Decryptor:
    """Decrypts segments of one object, any of them, by number."""

    def __init__(self, master: bytes, binding: bytes, header_bytes: bytes) -> None:
        self.header = Header.decode(header_bytes)
        self._header = header_bytes[:HEADER]
        self._aead = object_key(master, self.header.salt, binding)

    def segment(self, number: int, data: bytes, last: bool) -> bytes:
        try:
            return self._aead.decrypt(_nonce(self.header.prefix, number, last), data, self._header)
        except InvalidTag:
            raise FormatError(f"segment {number} does not authenticate") from None


def encrypt_file(
    master: bytes,
    binding: bytes,
    src: int,
    dst: int,
    size: int,
    progress: Callable[[int], None] | None = None,
    written: Callable[[int, int], None] | None = None,
    header: Header | None = None,
) -> int:
    """Encrypt the `size` bytes of the open file `src` into the open file `dst` (both from offset
    0, by positional reads and writes): the stored object, in one pass, one segment in memory.
    The last segment is the one that ends at `size`. Returns how many bytes of `src` were read:
    `size` unless the file became shorter (then it stops there) or longer meanwhile (then one
    more): either way the caller knows the object is not the file. `progress` gets each
    segment's plain size; `written(offset, length)` each stored range as it is written, in
    order from offset 0 (to start it towards the disk)."""
    enc = Encryptor(master, binding, header)
    seg = enc.header.segment
    count = max(1, -(-size // seg))
    view = memoryview(bytearray(min(seg, size)))  # a small file's size, not a whole segment
    at = 0
    done = 0
    for number in range(count):
        want = min(seg, size - done)
        got = pread_into(src, view[:want], done)
        if got < want:
            return done + got
        out = enc.segment(view[:want], number == count - 1)
        if number == 0:
            head = enc.header.encode()
            if count == 1:
                out = head + out  # a small file: one write
            else:
                pwrite_all(dst, head, 0)
                if written is not None:
                    written(0, HEADER)
                at = HEADER
        pwrite_all(dst, out, at)
        if written is not None:
            written(at, len(out))
        at += len(out)
        done += want
        if progress is not None:
            progress(want)
    if os.pread(src, 1, size):
        return size + 1  # longer now than when it was measured
    return done


def encrypt_bytes(
    master: bytes, binding: bytes, data: bytes, header: Header | None = None
) -> bytes:
    """The stored bytes of a small object: the header, then each segment."""
    enc = Encryptor(master, binding, header)
    size = enc.header.segment
    view = memoryview(data)
    count = max(1, -(-len(data) // size))
    return enc.header.encode() + b"".join(
        enc.segment(view[n * size : (n + 1) * size], n == count - 1) for n in range(count)
    )


def decrypt_bytes(master: bytes, binding: bytes, stored: bytes) -> bytes:
    """The whole of a small object, checked to its last segment."""
    dec = Decryptor(master, binding, stored[:HEADER])
    size = dec.header.segment
    plain = plain_size(len(stored), size)
    if plain is None:
        raise FormatError("cut short (its size is no whole number of segments)")
    count = max(1, -(-plain // size))
    out = []
    at = HEADER
    for number in range(count):
        end = min(len(stored), at + size + TAG)
        out.append(dec.segment(number, stored[at:end], number == count - 1))
        at = end
    return b"".join(out)
