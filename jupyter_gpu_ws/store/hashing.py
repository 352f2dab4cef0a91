"""Content hashes: xxh3-128 over mmap (several GB/s), used only where size and time cannot settle
whether a file changed."""

from __future__ import annotations

import mmap
import os

import xxhash


def file_hash(path: str) -> str:
    with open(path, "rb") as f:
        return fd_hash(f.fileno())


def fd_hash(fd: int) -> str:
    """The hash of what an open descriptor reads, from its start."""
    size = os.fstat(fd).st_size
    if size == 0:
        return xxhash.xxh3_128_hexdigest(b"")
    if size < 1 << 20:
        return xxhash.xxh3_128_hexdigest(os.pread(fd, size, 0))
    with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as m:
        return xxhash.xxh3_128_hexdigest(m)
