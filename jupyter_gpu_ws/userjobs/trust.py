"""Which job records may run: each is signed with HMAC-SHA256 under a key kept outside the
store, so a record someone else wrote into the store (or changed there) is never run unasked."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from ..diskio import file_kind
from .record import JobRecord

KEY_ENV = "GPUWS_JOB_KEY"
# A key is at least this many bytes (the file holds 64 hex digits: 32 random bytes), at most
# KEY_MAX: a file larger than that is not a key.
KEY_MIN, KEY_MAX = 32, 4096
_MAKE = "python -c 'import secrets; print(secrets.token_hex(32))'"


class JobKeyError(OSError):
    """The job key cannot be read or made: one line that says where, why and how to fix it."""


def key_path() -> Path:
    """Where the key lives when the environment gives none: the user's configuration folder."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "jupyter_gpu_ws" / "job-key"


def job_key() -> bytes:
    """`$GPUWS_JOB_KEY`, else the key file, made on first use (only its owner reads it). A key
    that is not one (empty, short, not a regular file, readable by others) is refused with how
    to fix it, never used: a record anyone could sign would run by itself. Another machine of
    the same user needs the same key to relaunch this one's jobs without asking: set
    GPUWS_JOB_KEY there (docs/jobs.md)."""
    given = os.environ.get(KEY_ENV)
    if given is not None:
        key = given.strip().encode()
        if len(key) < KEY_MIN:
            raise JobKeyError(
                f"{KEY_ENV} is {'empty' if not key else f'{len(key)} characters long'}: a job "
                f"key is at least {KEY_MIN} (make one with {_MAKE})"
            )
        return key
    path = key_path()
    try:
        return _read_key(path)
    except FileNotFoundError:
        return _make_key(path)


def _refused(path: Path, problem: str, fix: str = "") -> JobKeyError:
    fix = fix or f"remove it to have a new one made, or set {KEY_ENV}"
    return JobKeyError(f"The job key {path} {problem}: {fix}")


def _read_key(path: Path) -> bytes:
    """The key in `path`; FileNotFoundError only where nothing at all is there."""
    try:
        linked = stat.S_ISLNK(os.lstat(path).st_mode)
    except FileNotFoundError:  # nothing there: the caller makes the key
        raise
    except OSError as err:
        raise _refused(path, f"cannot be read ({err.strerror or err})") from None
    try:
        # A FIFO or a device must not hold the read: O_NONBLOCK, and its kind is looked at first.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as err:
        if linked and err.errno == errno.ENOENT:
            raise _refused(path, "is a symbolic link to nothing") from None
        if err.errno == errno.ELOOP:
            raise _refused(path, "is a symbolic link that loops") from None
        raise _refused(path, f"cannot be read ({err.strerror or err})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refused(path, f"is {file_kind(info.st_mode)}, not a file")
        if info.st_uid != os.getuid():
            raise _refused(path, "belongs to another user")
        if info.st_mode & 0o077:
            raise _refused(
                path,
                f"can be read by others (mode {stat.S_IMODE(info.st_mode):o})",
                f"chmod 600 {path}",
            )
        data = os.read(fd, KEY_MAX + 1)
    finally:
        os.close(fd)
    if len(data) > KEY_MAX:
        raise _refused(path, f"is larger than {KEY_MAX} bytes, too large to be a key")
    key = data.strip()
    if len(key) < KEY_MIN:
        held = "is empty" if not key else f"holds {len(key)} bytes"
        raise _refused(path, f"{held}; a job key is at least {KEY_MIN}")
    return key


def _make_key(path: Path) -> bytes:
    """A new key, written whole or not at all: a temporary file (0600) written and synced, then
    linked into place, so that no process ever reads a half-written or empty key and a key
    another process made meanwhile is kept, not replaced."""
    text = secrets.token_hex(32).encode() + b"\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(text)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:  # another process made it first: theirs is the key
            return _read_key(path)
        _sync_folder(path.parent)
    except JobKeyError:
        raise
    except OSError as err:
        raise JobKeyError(
            f"Cannot make the job key {path}: {err.strerror or err} (free some space or fix the "
            f"folder, or set {KEY_ENV})"
        ) from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return text.strip()


def _sync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _canonical(record: JobRecord) -> bytes:
    body: dict[str, Any] = record.to_json()
    body.pop("signature", None)
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sign(record: JobRecord, key: bytes) -> None:
    record.signature = hmac.new(key, _canonical(record), hashlib.sha256).hexdigest()


def why_untrusted(record: JobRecord, key: bytes, workspace: str) -> str | None:
    """None when this machine's key signed the record for this workspace; else why it is not
    run without the user's say, in their words."""
    if not record.signature:
        return "not signed"
    expected = hmac.new(key, _canonical(record), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, record.signature):
        return "signed with another key, or changed in the store since"
    if record.workspace != workspace:
        return f"started in another workspace ({record.workspace})"
    return None
