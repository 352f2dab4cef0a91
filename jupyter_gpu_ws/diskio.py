"""Disk helpers shared by the store, the restore, the checkpoint writer and the jobs: positional
reads and writes that finish what they start, starting writeback while still writing, writers
of one file taking turns, and a file's kind in words."""

from __future__ import annotations

import ctypes
import os
import stat
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import IO, Any

_sync_file_range: Any = None

# Files that several threads write at once (the parts of a large file being restored) take
# turns: a file system lets one write into a file at a time, and the kernel's lock for it
# (ext4's inode lock) makes the next writer spin on a CPU while the holder copies. On a small
# machine that spinning took the CPU the copies needed: 4 x 512 MiB restored from a local store
# with 8 parts at once took 1.1 s and 1.8 s of system time, 0.5 s and 0.6 s with turns, as
# `cp -r` does (docs/benchmarks.md). A thread waiting for its turn here sleeps.
_turns: dict[int, threading.Lock] = {}
_NO_TURNS = nullcontext()


# Whole files copied between local disks go one after the other in one thread (the restore's,
# the pass's small files), as `cp -r` does, until they are seen to wait on the disk: a small
# file from the page cache costs a few system calls, each of which lets go of the GIL, and
# threads handing it to each other at every one spent more time waking each other than copying
# (20,000 files of 1-64 KiB restored on tmpfs: 0.97 s in one thread, 1.7 s and 1.1 million
# futex calls with eight, 2.1 s with two; 20,000 of 100 B-4 KiB synced: 1.07 s and 1.67 s).
# A file that waits (a slow disk, a cold cache, a drive not recognised as remote) is worth
# many at once: more than WAIT_PER_FILE per file beyond reading at AT_LEAST bytes a second.
WAIT_PER_FILE = 0.002
AT_LEAST = 200 << 20


def waits_on_disk(elapsed: float, files: int, nbytes: int) -> bool:
    """Whether copying `files` whole files of `nbytes` in all, one after the other, took long
    enough (`elapsed` seconds) that they are better copied many at once."""
    return elapsed > files * WAIT_PER_FILE + nbytes / AT_LEAST


def start_writeback(fd: int, offset: int, length: int) -> None:
    """sync_file_range(SYNC_FILE_RANGE_WRITE): queue the range for disk and return at once, so
    the fsync at the end has little left to wait for. A hint only: where it is missing the
    final fsync does all the work."""
    global _sync_file_range
    if _sync_file_range is None:
        try:
            func = ctypes.CDLL(None, use_errno=True).sync_file_range
            func.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
            _sync_file_range = func
        except (OSError, AttributeError):
            _sync_file_range = False
    if _sync_file_range:
        _sync_file_range(fd, offset, length, 2)  # SYNC_FILE_RANGE_WRITE


def take_turns(fd: int) -> None:
    """From now on, until `stop_turns(fd)` (before the file is closed), the writes to `fd` made
    through `pwrite_all` or under `turn(fd)` go one at a time."""
    _turns[fd] = threading.Lock()


def stop_turns(fd: int) -> None:
    _turns.pop(fd, None)


def turn(fd: int) -> AbstractContextManager[Any]:
    """Hold while writing to `fd`: its lock where its writers take turns, else nothing."""
    return _turns.get(fd) or _NO_TURNS


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    """Write all of `data` at `offset` (a pwrite may write less than it was given), in turn
    with the file's other writers where they take turns."""
    view = memoryview(data)
    with turn(fd):
        while view:
            n = os.pwrite(fd, view, offset)
            view, offset = view[n:], offset + n


def pread_into(fd: int, view: memoryview, offset: int) -> int:
    """Fill `view` from `offset`; fewer bytes only where the file ends first. Returns how many."""
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], offset + got)
        if n == 0:
            break
        got += n
    return got


def replace_whole(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """`path` written whole or not at all: `write` fills a temporary file beside it, which is
    made durable and then renamed over it, so a process killed mid-write leaves the previous
    file, never half of one (nor the temporary file, on any failure this process sees)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def file_kind(mode: int) -> str:
    """What a file of this mode (st_mode) is, in words for a message: "a file", "a folder", "a
    symbolic link", "a named pipe (FIFO)", "a device", "a socket"; else "not a regular file"."""
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"
