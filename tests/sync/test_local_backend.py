"""LocalBackend.put: the kernel-side copy, its fallback, and progress per chunk."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from jupyter_gpu_ws.store.backend import CHUNK, PART_SUFFIX
from jupyter_gpu_ws.store.errors import StoreUnavailableError
from jupyter_gpu_ws.sync import LocalBackend


def made(folder: Path) -> str:
    """A store's folder, made as its first use makes it (a write never makes it)."""
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder)


def test_put_copies_the_bytes_and_reports_progress_per_chunk(tmp_path: Path) -> None:
    source = tmp_path / "big.bin"
    data = os.urandom(2 * CHUNK + 123)
    source.write_bytes(data)
    backend = LocalBackend(made(tmp_path / "store"))
    seen: list[int] = []
    assert backend.put(str(source), "ws/files/big.bin", seen.append) == len(data)
    assert (tmp_path / "store/ws/files/big.bin").read_bytes() == data
    assert sum(seen) == len(data) and max(seen) <= CHUNK


def test_put_falls_back_to_read_write_where_the_kernel_copy_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object) -> int:
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(os, "copy_file_range", refuse, raising=False)
    source = tmp_path / "a.txt"
    source.write_bytes(b"hello " * 1000)
    backend = LocalBackend(made(tmp_path / "store"))
    assert backend.put(str(source), "ws/files/dir/a.txt") == 6000
    assert (tmp_path / "store/ws/files/dir/a.txt").read_bytes() == b"hello " * 1000
    assert not [p for p in (tmp_path / "store").rglob("*") if PART_SUFFIX in p.name]


def test_put_makes_the_folder_again_if_it_vanished_from_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_gpu_ws.store import local

    monkeypatch.setattr(local, "FOLDER_TRUST_SECONDS", 3600.0)  # the folder is still taken on trust
    source = tmp_path / "a.txt"
    source.write_bytes(b"one")
    backend = LocalBackend(made(tmp_path / "store"))
    backend.put(str(source), "ws/files/sub/a.txt")
    (tmp_path / "store/ws/files/sub/a.txt").unlink()
    (tmp_path / "store/ws/files/sub").rmdir()
    with pytest.raises(StoreUnavailableError):
        backend.put(str(source), "ws/files/sub/a.txt")  # the first try finds the folder gone
    assert backend.put(str(source), "ws/files/sub/a.txt") == 3


def test_flush_fsyncs_a_few_files_and_syncs_the_file_system_after_many(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_gpu_ws.store import local as store

    syncfs_calls: list[str] = []
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(store, "_syncfs", syncfs_calls.append)
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd)))
    source = tmp_path / "a.txt"
    source.write_bytes(b"data")
    backend = LocalBackend(made(tmp_path / "store"))

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


def test_flush_does_nothing_when_not_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_gpu_ws.store import local as store

    calls: list[object] = []
    monkeypatch.setattr(store, "_syncfs", calls.append)
    monkeypatch.setattr(os, "fsync", calls.append)
    source = tmp_path / "a.txt"
    source.write_bytes(b"data")
    backend = LocalBackend(made(tmp_path / "store"), durable=False)
    backend.put(str(source), "ws/files/a.txt")
    backend.flush()
    assert not calls


@pytest.mark.parametrize("flush_soon", [True, False])
def test_a_large_file_heads_for_the_disk_while_copied_only_when_a_flush_follows(
    flush_soon: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_gpu_ws.store import local as store

    started: list[tuple[int, int]] = []
    monkeypatch.setattr(store, "start_writeback", lambda fd, offset, n: started.append((offset, n)))
    monkeypatch.setattr(store, "EARLY_WRITEBACK", CHUNK)
    source = tmp_path / "big.bin"
    data = os.urandom(2 * CHUNK + 5)
    source.write_bytes(data)
    backend = LocalBackend(made(tmp_path / "store"))
    assert backend.put(str(source), "ws/files/big.bin", flush_soon=flush_soon) == len(data)
    assert (tmp_path / "store/ws/files/big.bin").read_bytes() == data
    # Chunk by chunk while copying, or not at all: the flush that comes later writes it then.
    assert started == ([(0, CHUNK), (CHUNK, CHUNK), (2 * CHUNK, 5)] if flush_soon else [])


# -- a store written by someone else: symbolic links and special files -------------------------


def outside_folder(tmp_path: Path) -> Path:
    """A folder beside the store that the store's links point into, holding one file."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.txt").write_text("not the store's")
    return outside


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        p.relative_to(folder).as_posix(): (
            p.read_bytes() if p.is_file() else b"",
            p.lstat().st_mode,
        )
        for p in sorted(folder.rglob("*"))
    }


def test_put_through_a_folder_link_in_the_store_writes_nothing_outside(tmp_path: Path) -> None:
    from jupyter_gpu_ws.sync.errors import UnsafeStoreEntryError

    outside = outside_folder(tmp_path)
    before = snapshot(outside)
    (tmp_path / "store/ws/files").mkdir(parents=True)
    (tmp_path / "store/ws/files/data").symlink_to(outside)
    source = tmp_path / "a.txt"
    source.write_text("mine")
    backend = LocalBackend(made(tmp_path / "store"))
    with pytest.raises(UnsafeStoreEntryError, match="ws/files/data"):
        backend.put(str(source), "ws/files/data/a.txt")
    with pytest.raises(UnsafeStoreEntryError):
        backend.put(str(source), "ws/files/data/new/deeper.txt")  # no folder made through it either
    assert snapshot(outside) == before
    assert "symbolic link" in backend.skipped["ws/files/data"]


def test_versions_moves_and_writes_through_a_folder_link_write_nothing_outside(
    tmp_path: Path,
) -> None:
    from jupyter_gpu_ws.sync.errors import UnsafeStoreEntryError

    outside = outside_folder(tmp_path)
    (outside / "old.txt").write_text("keep me")
    before = snapshot(outside)
    source = tmp_path / "a.txt"
    source.write_text("mine")
    backend = LocalBackend(made(tmp_path / "store"))
    backend.put(str(source), "ws/files/a.txt")
    (tmp_path / "store/ws/.gpuws").mkdir()
    (tmp_path / "store/ws/.gpuws/versions").symlink_to(outside)
    for attempt in (
        lambda: backend.copy("ws/files/a.txt", "ws/.gpuws/versions/a.txt/v1"),
        lambda: backend.move("ws/files/a.txt", "ws/.gpuws/versions/a.txt/v1"),
        lambda: backend.write_bytes("ws/.gpuws/versions/state.json", b"{}"),
        lambda: backend.delete("ws/.gpuws/versions/old.txt"),
        lambda: backend.move("ws/.gpuws/versions/old.txt", "ws/files/stolen.txt"),
    ):
        with pytest.raises(UnsafeStoreEntryError):
            attempt()
    assert snapshot(outside) == before
    assert (tmp_path / "store/ws/files/a.txt").read_text() == "mine"  # nothing moved away either
    assert not (tmp_path / "store/ws/files/stolen.txt").exists()


def test_sweeping_parts_never_reaches_through_a_folder_link(tmp_path: Path) -> None:
    from jupyter_gpu_ws.sync.errors import UnsafeStoreEntryError

    outside = outside_folder(tmp_path)
    part = outside / "files" / f".~x{PART_SUFFIX}-old"
    part.parent.mkdir()
    part.write_text("someone else's")
    os.utime(part, (0, 0))
    (tmp_path / "store").mkdir()
    (tmp_path / "store/ws").symlink_to(outside)  # the workspace's own folder
    backend = LocalBackend(made(tmp_path / "store"))
    with pytest.raises(UnsafeStoreEntryError, match="symbolic link"):
        backend.sweep_parts("ws", older_than=60)
    assert part.exists()


def test_listing_yields_regular_files_only_and_reports_the_rest(tmp_path: Path) -> None:
    outside = outside_folder(tmp_path)
    files = tmp_path / "store/ws/files"
    (files / "sub").mkdir(parents=True)
    (files / "plain.txt").write_text("p")
    (files / "sub/deep.txt").write_text("d")
    (files / "secret").symlink_to(outside / "a.txt")
    (files / "linked").symlink_to(outside)
    os.mkfifo(files / "pipe")
    backend = LocalBackend(made(tmp_path / "store"))
    assert sorted(f.key for f in backend.list("ws/files")) == [
        "ws/files/plain.txt",
        "ws/files/sub/deep.txt",
    ]
    assert set(backend.skipped) == {"ws/files/secret", "ws/files/linked", "ws/files/pipe"}
    assert "symbolic link" in backend.skipped["ws/files/secret"]
    assert "FIFO" in backend.skipped["ws/files/pipe"]
    # Neither the links nor the pipe count as present (reading the pipe: see the next tests).
    assert backend.stat("ws/files/secret") is None and backend.stat("ws/files/pipe") is None
    assert backend.read_bytes("ws/files/secret") is None


def test_a_special_entry_is_warned_about_once_and_forgotten_once_it_is_gone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = tmp_path / "store/ws/files"
    files.mkdir(parents=True)
    os.mkfifo(files / "pipe")
    backend = LocalBackend(made(tmp_path / "store"))
    with caplog.at_level("WARNING", logger="jupyter_gpu_ws.store.local"):
        for _ in range(3):
            list(backend.list("ws/files"))
    assert len([r for r in caplog.records if "ws/files/pipe" in r.getMessage()]) == 1
    (files / "pipe").unlink()
    list(backend.list("ws/files"))
    assert backend.skipped == {}


def test_reading_a_fifo_or_a_link_in_the_store_never_blocks_nor_follows(tmp_path: Path) -> None:
    import threading

    from jupyter_gpu_ws.sync.errors import UnsafeStoreEntryError

    outside = outside_folder(tmp_path)
    files = tmp_path / "store/ws/files"
    files.mkdir(parents=True)
    os.mkfifo(files / "pipe")
    (files / "secret").symlink_to(outside / "a.txt")
    backend = LocalBackend(made(tmp_path / "store"))
    outcome: dict[str, object] = {}

    def read_all() -> None:
        for name in ("pipe", "secret"):
            try:
                outcome[name] = backend.get(f"ws/files/{name}", str(tmp_path / f"got-{name}"))
            except BaseException as err:
                outcome[name] = err
        outcome["read_bytes"] = backend.read_bytes("ws/files/pipe")

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():  # a regression: let the blocked open go, then fail
        os.close(os.open(files / "pipe", os.O_WRONLY | os.O_NONBLOCK))
        reader.join(5)
        pytest.fail("reading a FIFO in the store blocked")
    assert outcome["read_bytes"] is None  # as if absent
    assert isinstance(outcome["pipe"], UnsafeStoreEntryError)
    assert isinstance(outcome["secret"], UnsafeStoreEntryError)
    assert not (tmp_path / "got-secret").exists() and not (tmp_path / "got-pipe").exists()


def test_the_store_root_itself_may_be_a_link(tmp_path: Path) -> None:
    real = tmp_path / "disk/store"
    real.mkdir(parents=True)
    (tmp_path / "store").symlink_to(real)
    source = tmp_path / "a.txt"
    source.write_text("mine")
    backend = LocalBackend(made(tmp_path / "store"))
    backend.put(str(source), "ws/files/dir/a.txt")
    backend.write_bytes("ws/.gpuws/lease.json", b"{}")
    assert (real / "ws/files/dir/a.txt").read_text() == "mine"
    assert [f.key for f in backend.list("ws/files")] == ["ws/files/dir/a.txt"]
    assert backend.read_bytes("ws/.gpuws/lease.json") == b"{}"
    assert backend.skipped == {}


def test_keeping_a_version_of_a_link_copies_nothing_from_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_gpu_ws.sync.errors import UnsafeStoreEntryError

    outside = outside_folder(tmp_path)
    files = tmp_path / "store/ws/files"
    files.mkdir(parents=True)
    (files / "secret").symlink_to(outside / "a.txt")
    backend = LocalBackend(made(tmp_path / "store"))
    monkeypatch.setattr(
        os, "link", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EPERM, "no links"))
    )
    with pytest.raises(UnsafeStoreEntryError, match="symbolic link"):
        backend.copy("ws/files/secret", "ws/.gpuws/versions/secret/v1")
    assert not [p for p in (tmp_path / "store/ws").rglob("*") if p.is_file() and not p.is_symlink()]


def test_a_flush_never_waits_on_a_fifo_put_in_place_of_a_written_file(tmp_path: Path) -> None:
    import threading

    source = tmp_path / "a.txt"
    source.write_text("mine")
    backend = LocalBackend(made(tmp_path / "store"))
    backend.put(str(source), "ws/files/a.txt")
    written = tmp_path / "store/ws/files/a.txt"
    written.unlink()
    os.mkfifo(written)  # someone else's, before the flush came
    flusher = threading.Thread(target=backend.flush, daemon=True)
    flusher.start()
    flusher.join(30)
    if flusher.is_alive():  # a regression: let the blocked open go, then fail
        os.close(os.open(written, os.O_WRONLY | os.O_NONBLOCK))
        flusher.join(5)
        pytest.fail("flush() blocked on a FIFO in the store")
    assert not backend.unflushed()
