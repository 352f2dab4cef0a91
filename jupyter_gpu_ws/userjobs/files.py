"""The files a job request names (its notebook, its program, the script it runs, its folder),
looked at without ever waiting on one. Opening a named pipe waits for a writer that may never
come, and opening a device can do something (a watchdog arms, a tape rewinds): so what is not a
regular file is refused by its kind before anything opens it, and the one file a request reads,
the notebook, is opened without following a link and without waiting, and read only up to a
bound."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..diskio import file_kind
from ..vocabulary import size

# A notebook larger than this is refused, never read: the request reads it whole to check it.
MAX_NOTEBOOK_BYTES = 64 * 2**20
# Never follow the last component, never wait for a FIFO's writer, never take a terminal.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1 << 20


class RefusedFile(Exception):
    """A file a request names is not what it must be; the message names it and says what it is."""


def mode_of(path: Path) -> int | None:
    """The kind of what `path` leads to (links followed, nothing opened, so nothing waits); None
    where nothing is there or it cannot be looked at."""
    try:
        return os.stat(path).st_mode
    except (OSError, ValueError):
        return None


def read_regular(path: Path, label: str, limit: int) -> bytes:
    """All of the regular file at `path`, if it has at most `limit` bytes. `path` is meant to
    hold no link (resolved): one put at its end since is refused, not followed. RefusedFile for
    anything else, named by `label`; FileNotFoundError where nothing is there, OSError where it
    cannot be read."""
    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):  # looked at before it is opened: opening a device can do something
        raise RefusedFile(f"{label} is {file_kind(mode)}, not a file")
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError as err:
        if err.errno == errno.ELOOP:  # replaced by a link since: O_NOFOLLOW refused it
            raise RefusedFile(f"{label} is a symbolic link, not a file") from None
        raise
    try:
        st = os.fstat(fd)  # again once open: it may have been replaced in between
        if not stat.S_ISREG(st.st_mode):
            raise RefusedFile(f"{label} is {file_kind(st.st_mode)}, not a file")
        if st.st_size > limit:
            raise RefusedFile(f"{label} has {size(st.st_size)}, more than {size(limit)}")
        # Back to ordinary reads: some network and FUSE file systems honour the flag on files.
        os.set_blocking(fd, True)
        data = bytearray()
        while chunk := os.read(fd, min(_CHUNK, limit + 1 - len(data))):
            data += chunk
            if len(data) > limit:  # it grew since: still read no more than the bound
                raise RefusedFile(f"{label} has more than {size(limit)}")
        return bytes(data)
    finally:
        os.close(fd)
