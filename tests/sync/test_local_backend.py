"""LocalBackend.put: the kernel-side copy, its fallback, and progress per chunk."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from jupyter_gpu_ws.sync import LocalBackend
from jupyter_gpu_ws.sync.backend import CHUNK, PART_SUFFIX


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


def test_flush_fsyncs_a_few_files_and_syncs_the_file_system_after_many(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_gpu_ws.sync import local as store

    syncfs_calls: list[str] = []
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(store, "_syncfs", syncfs_calls.append)
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd)))
    source = tmp_path / "a.txt"
    source.write_bytes(b"data")
    backend = LocalBackend(str(tmp_path / "store"))

    backend.put(str(source), "ws/files/sub/a.txt")
    backend.flush()
    assert not syncfs_calls and len(fsyncs) >= 2  # the file and its folder (and new parents)

    fsyncs.clear()
    backend.flush()
    assert not syncfs_calls and not fsyncs  # nothing written since: nothing to do

    for i in range(store.FSYNC_FILES * 2):
        backend.put(str(source), f"ws/files/many/{i}.txt")
    backend.flush()
    assert syncfs_calls == [backend.root]


def test_flush_does_nothing_when_not_durable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_gpu_ws.sync import local as store

    calls: list[object] = []
    monkeypatch.setattr(store, "_syncfs", calls.append)
    monkeypatch.setattr(os, "fsync", calls.append)
    source = tmp_path / "a.txt"
    source.write_bytes(b"data")
    backend = LocalBackend(str(tmp_path / "store"), durable=False)
    backend.put(str(source), "ws/files/a.txt")
    backend.flush()
    assert not calls


@pytest.mark.parametrize("flush_soon", [True, False])
def test_a_large_file_heads_for_the_disk_while_copied_only_when_a_flush_follows(
        flush_soon: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_gpu_ws.sync import local as store

    started: list[tuple[int, int]] = []
    monkeypatch.setattr(store, "start_writeback", lambda fd, offset, n: started.append((offset, n)))
    monkeypatch.setattr(store, "EARLY_WRITEBACK", CHUNK)
    source = tmp_path / "big.bin"
    data = os.urandom(2 * CHUNK + 5)
    source.write_bytes(data)
    backend = LocalBackend(str(tmp_path / "store"))
    assert backend.put(str(source), "ws/files/big.bin", flush_soon=flush_soon) == len(data)
    assert (tmp_path / "store/ws/files/big.bin").read_bytes() == data
    # Chunk by chunk while copying, or not at all: the flush that comes later writes it then.
    assert started == ([(0, CHUNK), (CHUNK, CHUNK), (2 * CHUNK, 5)] if flush_soon else [])
