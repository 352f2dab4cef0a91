"""LocalBackend.put: the kernel-side copy, its fallback, and progress per chunk."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from jupyter_gpu_ws.sync import LocalBackend
from jupyter_gpu_ws.sync.store import CHUNK, PART_SUFFIX


def test_put_copies_the_bytes_and_reports_progress_per_chunk(tmp_path: Path) -> None:
    source = tmp_path / "big.bin"
    data = os.urandom(2 * CHUNK + 123)
    source.write_bytes(data)
    backend = LocalBackend(str(tmp_path / "store"))
    seen: list[int] = []
    assert backend.put(str(source), "ws/files/big.bin", seen.append) == len(data)
    assert (tmp_path / "store/ws/files/big.bin").read_bytes() == data
    assert sum(seen) == len(data) and max(seen) <= CHUNK


def test_put_falls_back_to_read_write_where_the_kernel_copy_is_refused(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> int:
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(os, "copy_file_range", refuse, raising=False)
    source = tmp_path / "a.txt"
    source.write_bytes(b"hello " * 1000)
    backend = LocalBackend(str(tmp_path / "store"))
    assert backend.put(str(source), "ws/files/dir/a.txt") == 6000
    assert (tmp_path / "store/ws/files/dir/a.txt").read_bytes() == b"hello " * 1000
    assert not [p for p in (tmp_path / "store").rglob("*") if PART_SUFFIX in p.name]


def test_put_makes_the_folder_again_if_it_vanished_from_the_store(tmp_path: Path) -> None:
    source = tmp_path / "a.txt"
    source.write_bytes(b"one")
    backend = LocalBackend(str(tmp_path / "store"))
    backend.put(str(source), "ws/files/sub/a.txt")
    (tmp_path / "store/ws/files/sub/a.txt").unlink()
    (tmp_path / "store/ws/files/sub").rmdir()
    with pytest.raises(Exception):
        backend.put(str(source), "ws/files/sub/a.txt")  # the first try finds the folder gone
    assert backend.put(str(source), "ws/files/sub/a.txt") == 3
