"""Disk helpers shared by the store, the restore and the checkpoint writer: positional reads and
writes that finish what they start, and starting writeback while still writing."""

from __future__ import annotations

import ctypes
import os
from typing import Any

_sync_file_range: Any = None


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


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    """Write all of `data` at `offset` (a pwrite may write less than it was given)."""
    view = memoryview(data)
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
