"""Disk hints shared by the store and the checkpoint writer: start writeback while still writing."""

from __future__ import annotations

import ctypes
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
