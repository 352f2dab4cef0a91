"""The least a Python program spends copying a tree the engine's way: the same system calls per
file, in a plain loop with nothing else (no records, no progress, no pending list, no checks of
the lease). The engine cannot be faster than this in Python; the gap between this row and
`rsync -a` or `cp -r` is what Python itself costs, the gap between the engine and this row is
the engine's own work (docs/benchmarks.md, issue 33)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_TMPFILE = getattr(os, "O_TMPFILE", 0)


def first_pass(src: Path, dst: Path) -> float:
    """As a first pass into a local folder: each folder listed with its files' stat, each file
    opened, copied in the kernel into a temporary name, checked by a stat and renamed over its
    name. Returns the seconds it took."""
    started = time.perf_counter()
    for n, (entry, there) in enumerate(_files(src, dst)):
        size = entry.stat(follow_symlinks=False).st_size
        source = os.open(entry.path, os.O_RDONLY | O_CLOEXEC)
        tmp = f"{there}/.~floor{n}.part"
        try:
            os.fstat(source)
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_CLOEXEC, 0o666)
            try:
                os.copy_file_range(source, out, size)
            finally:
                os.close(out)
        finally:
            os.close(source)
        os.stat(entry.path)  # the check that it did not change while copied
        os.replace(tmp, f"{there}/{entry.name}")
    return time.perf_counter() - started


def restore(src: Path, dst: Path) -> float:
    """As a restore from a local folder: each store folder listed with its files' stat, each
    file opened, copied in the kernel into an unnamed file in its folder, given the stored
    time, looked at (fstat) and linked under its name. Returns the seconds it took."""
    started = time.perf_counter()
    root = os.open("/", os.O_RDONLY | O_CLOEXEC)
    try:
        for entry, there in _files(src, dst):
            st = entry.stat(follow_symlinks=False)
            source = os.open(entry.path, os.O_RDONLY | O_CLOEXEC | os.O_NOFOLLOW)
            try:
                os.fstat(source)
                out = os.open(there, O_TMPFILE | os.O_RDWR | O_CLOEXEC, 0o666)
                try:
                    os.copy_file_range(source, out, st.st_size, 0, 0)
                    os.utime(out, (st.st_mtime, st.st_mtime))
                    os.fstat(out)
                    link = f"{there}/{entry.name}"
                    os.link(f"/proc/self/fd/{out}", link, src_dir_fd=root, follow_symlinks=True)
                finally:
                    os.close(out)
            finally:
                os.close(source)
    finally:
        os.close(root)
    return time.perf_counter() - started


def _files(src: Path, dst: Path) -> Iterator[tuple[os.DirEntry[str], str]]:
    """Each file under `src` and the folder of `dst` it goes to, made before its files come."""
    pending = [(str(src), str(dst))]
    while pending:
        here, there = pending.pop()
        os.makedirs(there, exist_ok=True)
        with os.scandir(here) as entries:
            listed = list(entries)
        for entry in listed:
            if entry.is_dir(follow_symlinks=False):
                pending.append((entry.path, f"{there}/{entry.name}"))
            else:
                yield entry, there
