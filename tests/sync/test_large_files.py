"""Large and sparse files: holes stay holes in a local store and come back as holes, a store
that keeps every byte says so with both sizes, max_file_size names the file and why, and an
emergency persist never starts a file it cannot finish in its time (nor goes on past it)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_gpu_ws.store.backend import PART_SUFFIX
from jupyter_gpu_ws.sync import SyncEngine
from tests.sync.conftest import write
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

Make = Callable[..., SyncEngine]
GIB = 2**30
MIB = 2**20


def sparse_file(path: Path, size: int, pieces: dict[int, bytes]) -> Path:
    """A file of `size` bytes that holds only `pieces` (offset → bytes): the rest are holes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, data in pieces.items():
            f.seek(offset)
            f.write(data)
    return path


def data_of(path: Path) -> dict[int, bytes]:
    """The data regions of a file (SEEK_DATA to SEEK_HOLE), read without touching its holes."""
    out: dict[int, bytes] = {}
    fd = os.open(path, os.O_RDONLY)
    try:
        size, at = os.fstat(fd).st_size, 0
        while at < size:
            try:
                start = os.lseek(fd, at, os.SEEK_DATA)
            except OSError:
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            out[start] = os.pread(fd, end - start, start)
            at = end
    finally:
        os.close(fd)
    return out


def test_a_10_gb_sparse_file_stays_sparse_in_a_local_store_and_comes_back_so(
    workdir: Path, tmp_path: Path, store_dir: Path, make_engine: Make
) -> None:
    pieces = {0: os.urandom(MIB), 4 * GIB: os.urandom(MIB), 10 * GIB - MIB: os.urandom(MIB)}
    source = sparse_file(workdir / "disk.img", 10 * GIB, pieces)
    engine = make_engine(workdir)
    started = time.monotonic()
    assert engine.sync().uploaded == ["disk.img"]
    took = time.monotonic() - started
    stored = store_dir / "ws" / "files" / "disk.img"
    st = stored.stat()
    assert st.st_size == 10 * GIB and st.st_blocks * 512 < 64 * MIB, (
        "the holes became bytes on disk"
    )
    assert data_of(stored) == data_of(source)
    assert (
        took < 60
    )  # 3 MiB of data, not 10 GiB (a bound far above the real cost, not a timing goal)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    other = make_engine(fresh, state="state-fresh")
    other.restore()
    back = fresh / "disk.img"
    assert back.stat().st_size == 10 * GIB and back.stat().st_blocks * 512 < 64 * MIB
    assert data_of(back) == data_of(source)


def test_a_sparse_file_going_to_an_object_store_is_shown_with_both_sizes(
    workdir: Path, s3_url: str, make_engine: Make
) -> None:
    sparse_file(workdir / "scratch.img", 8 * MIB, {0: b"x" * 4096})
    engine = make_engine(workdir, s3_url, bandwidth_limit=2 * MIB)  # about 4 s to send
    passing = threading.Thread(target=engine.sync)
    passing.start()
    try:

        def uploading() -> dict | None:
            files = engine.pending_list()["files"]
            return files[0] if files and files[0]["state"] == "uploading" else None

        item = until(uploading, 10, "the upload under way")
        assert "sparse file: 8.0 MiB" in item["note"] and "on disk" in item["note"]
    finally:
        passing.join(60)
    assert engine.status()["pending_files"] == 0


def test_a_file_over_max_file_size_is_named_with_the_reason_not_left_waiting(
    workdir: Path, make_engine: Make
) -> None:
    write(workdir, "small.txt", "fits")
    write(workdir, "huge.bin", os.urandom(2 * MIB))
    engine = make_engine(workdir, max_file_size=MIB)
    report = engine.sync()
    assert report.uploaded == ["small.txt"]
    assert any(p.startswith("huge.bin: larger than max_file_size") for p in report.problems)
    for _ in range(2):  # and so it stays, pass after pass: never "waiting" without a reason
        listing = engine.pending_list()
        assert listing["files"] == [] and engine.status()["pending_files"] == 0
        assert [p["path"] for p in listing["problems"]] == ["huge.bin"]
        assert "max_file_size (2.0 MiB > 1.0 MiB)" in listing["problems"][0]["reason"]
        engine.sync()


def test_an_emergency_persist_never_starts_a_file_it_cannot_finish_in_time(
    workdir: Path, make_engine: Make, store_dir: Path
) -> None:
    write(workdir, "notes.md", "small things first")
    sparse_file(
        workdir / "big.img", 50 * GIB, {0: b"y"}
    )  # by its size, far more than 2 s of copying
    engine = make_engine(workdir)
    engine.urgent, engine.urgent_until = True, time.monotonic() + 2.0
    report = engine.sync()
    assert report.uploaded == ["notes.md"]
    assert len(report.left_behind) == 1 and report.left_behind[0].startswith("big.img: left behind")
    assert not (store_dir / "ws" / "files" / "big.img").exists()
    pending = engine.pending_list()["files"]
    assert [(p["path"], p["state"]) for p in pending] == [("big.img", "failing")]


def test_an_emergency_persist_stops_a_file_under_way_when_its_time_is_up(
    workdir: Path, make_engine: Make, store_dir: Path
) -> None:
    write(workdir, "model.bin", os.urandom(8 * MIB))
    engine = make_engine(workdir, bandwidth_limit=MIB)  # 8 s to send; the time left is 1.5 s
    engine.urgent, engine.urgent_until = True, time.monotonic() + 1.5
    started = time.monotonic()
    report = engine.sync()
    assert time.monotonic() - started < 5, "it went on past its time"
    assert report.left_behind and "cut off" in report.left_behind[0]
    folder = store_dir / "ws" / "files"
    assert not (folder / "model.bin").exists()
    assert not [
        p for p in store_dir.rglob("*") if PART_SUFFIX in p.name
    ]  # no part file left behind
