"""Content hashes: xxh3-128 over mmap (several GB/s), used only where size and time cannot settle
whether a file changed."""

from __future__ import annotations

import mmap
import os

import xxhash


def file_hash(path: str) -> str:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return xxhash.xxh3_128_hexdigest(b"")
        if size < 1 << 20:
            return xxhash.xxh3_128_hexdigest(f.read())
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return xxhash.xxh3_128_hexdigest(m)
