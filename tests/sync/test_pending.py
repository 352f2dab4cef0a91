"""The status is always true: pending files and bytes are what is not in the store, each with
why; files that cannot be synced for a reason of their own are listed and fail nothing else."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.store.local import _raise_os_error
from jupyter_gpu_ws.sync import LocalBackend, Progress, SyncEngine
from jupyter_gpu_ws.sync.service import SyncService
from tests.sync.conftest import tree_files, write
from tests.waiting import until

Make = Callable[..., SyncEngine]


def checkpoint(workdir: Path, run: str, step: int) -> None:
    """A checkpoint written the way the tracker does: a temporary folder, renamed when whole."""
    tmp = workdir / ".gpuws" / "checkpoints" / run / f".tmp-ckpt-{os.getpid()}-{step}"
    tmp.mkdir(parents=True)
    (tmp / "tensors.bin").write_bytes(os.urandom(4096))
    (tmp / "state.pt").write_bytes(b"state")
    (tmp / "manifest.json").write_text(f'{{"step": {step}}}')
    tmp.rename(tmp.parent / f"ckpt-{step:09d}-20261201T000000Z")


def test_checkpoint_rotation_leaves_nothing_pending(workdir: Path, make_engine: Make) -> None:
    engine = make_engine(workdir)
    service = SyncService(engine, debounce=0.02, rescan_interval=3600)
    service.start()
    try:
        for step in range(1, 8):
            checkpoint(workdir, "train", step)
            for old in sorted((workdir / ".gpuws/checkpoints/train").glob("ckpt-*"))[:-3]:
                shutil.rmtree(old)  # retention, as the tracker applies it
            time.sleep(0.05)
        until(lambda: engine.pending() == (0, 0) and engine.state == "idle")
        mirrored = tree_files(Path(engine.backend.root) / "ws" / "files")  # type: ignore[attr-defined]
        assert sorted(
            {p.split("/")[3] for p in mirrored if p.startswith(".gpuws/checkpoints/")}
        ) == [f"ckpt-{s:09d}-20261201T000000Z" for s in (5, 6, 7)]
        assert not [
            p for p in mirrored if ".tmp-ckpt-" in p
        ]  # in-flight folders are never uploaded
        # A retention's deletions leave no versions: only newer checkpoints replaced them.
        assert engine.status()["versions_count"] in (0, None)
        assert not list(
            (Path(engine.backend.root) / "ws" / ".gpuws").glob("versions/.gpuws/**/*.bin")
        )  # type: ignore[attr-defined]
    finally:
        service.stop()


def test_a_file_that_vanishes_before_it_is_synced_is_no_longer_pending(
    workdir: Path, make_engine: Make
) -> None:
    engine = make_engine(workdir)
    write(workdir, "scratch.tmp", "x" * 100)
    engine.mark_dirty(["scratch.tmp"])
    assert engine.pending() == (1, 100)
    (workdir / "scratch.tmp").unlink()
    assert engine.pending() == (0, 0)  # no event needed: a status check finds it gone


class FullAfter(LocalBackend):
    """A store whose disk fills up: every file fails while `full` is set."""

    full = False

    def put(self, local: str, key: str, *args: Any, **kwargs: Any) -> int:
        if self.full and "/files/" in key:
            _raise_os_error(OSError(28, "No space left on device"), key)
        return super().put(local, key, *args, **kwargs)


def test_files_of_a_failed_pass_stay_pending_with_the_reason(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    backend = FullAfter(str(store_dir))
    engine = make_engine(workdir, backend=backend)
    for i in range(103):
        write(workdir, f"data/{i:03d}.csv", "1,2,3\n" * i)
    backend.full = True
    report = engine.sync()
    assert report.stopped and "full" in report.stopped  # the first full write stops the pass
    files, size = engine.pending()
    assert files == 103 and size == sum(len("1,2,3\n") * i for i in range(103))
    listing = engine.pending_list(5)
    assert listing["total"] == 103
    assert listing["files"][0]["state"] == "failing" and "full" in listing["files"][0]["error"]
    assert {f["state"] for f in listing["files"][1:]} <= {"waiting", "failing"}
    assert engine.status()["state"] == "error"
    backend.full = False
    assert engine.sync().ok and engine.pending() == (0, 0)


def test_once_the_full_store_has_room_again_every_pending_file_goes_by_itself(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    # No click, no rescan (an hour away): the service tries the failed pass again by itself.
    backend = FullAfter(str(store_dir))
    backend.full = True
    engine = make_engine(workdir, backend=backend)
    service = SyncService(engine, debounce=0.05, rescan_interval=3600)
    service.start()
    try:
        for i in range(20):
            write(workdir, f"data/{i:02d}.csv", "1,2,3\n" * (i + 1))
        until(lambda: engine.status()["state"] == "error" and engine.pending()[0] == 20, 30)
        assert "full" in (engine.status()["last_error"] or "")
        time.sleep(
            1.0
        )  # every write seen and its pass failed: nothing of the watcher's left to run
        assert engine.pending()[0] == 20
        backend.full = False  # space freed on the store
        until(lambda: engine.pending() == (0, 0) and engine.status()["state"] == "idle", 60)
    finally:
        service.stop()
    assert tree_files(store_dir / "ws" / "files") == tree_files(workdir)


def test_a_persist_that_waits_for_a_running_pass_shows_and_counts_its_work(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    size = 24 * 2**20  # three chunks of the local copy, each counted as it lands
    write(workdir, "big.bin", os.urandom(size))
    engine = make_engine(workdir, bandwidth_limit=8 * 2**20)  # the background pass takes ~2 s
    background = threading.Thread(target=engine.sync)
    background.start()
    until(lambda: engine.status()["progress"] is not None)
    persist = Progress()
    seen: list[dict[str, Any]] = []
    persisting = threading.Thread(
        target=lambda: seen.append({"report": engine.sync(progress=persist)})
    )
    persisting.start()
    until(lambda: persist.snapshot()["speed"])
    during = persist.snapshot()
    assert during["bytes_total"] == size and 0 < during["bytes_done"] < during["bytes_total"]
    assert during["speed"] and during["eta"] is not None  # the upload's own speed and time left
    background.join(30)
    persisting.join(30)
    report = seen[0]["report"]
    assert (
        report.uploaded == ["big.bin"] and report.bytes_uploaded == size
    )  # counted, not "0 files"
    assert persist.snapshot()["bytes_done"] == size


def test_an_unreadable_file_is_listed_and_the_rest_syncs(
    workdir: Path, store_dir: Path, make_engine: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(workdir, "ok.txt", "fine")
    secret = write(workdir, "locked.txt", "unreadable")
    engine = make_engine(workdir)
    real_open = os.open
    opened: list[str] = []
    readable = False

    def guarded(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        opened.append(str(path))
        if str(path) == str(secret) and not readable:  # as chmod 000 would, even for root
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded)
    report = engine.sync()
    assert report.ok and report.uploaded == ["ok.txt"]  # not an error of the store
    assert report.problems == ["locked.txt: cannot be read: Permission denied"]
    status = engine.status()
    assert (
        status["state"] == "idle" and status["problem_files"] == 1 and status["pending_files"] == 0
    )
    [problem] = engine.pending_list()["problems"]
    assert problem["path"] == "locked.txt" and "Permission denied" in problem["reason"]
    opened.clear()
    engine.sync()  # not tried again while it has not changed
    assert str(secret) not in opened
    readable = True
    secret.write_text("readable again, and changed")
    assert engine.sync().uploaded == ["locked.txt"] and engine.status()["problem_files"] == 0


def test_a_name_as_long_as_the_file_system_allows_syncs(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    name = "n" * 250 + ".txt"  # 254 bytes: the temporary name must not be longer
    write(workdir, name, "long name")
    engine = make_engine(workdir)
    report = engine.sync()
    assert report.ok and report.uploaded == [name]
    assert (store_dir / "ws" / "files" / name).read_text() == "long name"


def test_an_unreadable_folder_is_listed(
    workdir: Path, make_engine: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(workdir, "private/a.txt", "a")
    write(workdir, "b.txt", "b")
    real_scandir = os.scandir

    def refuse(path: Any = ".") -> Any:
        if str(path).endswith("private"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", refuse)
    engine = make_engine(workdir)
    report = engine.sync()
    assert report.uploaded == ["b.txt"]
    [problem] = engine.pending_list()["problems"]
    assert problem["path"] == "private/" and "folder cannot be read" in problem["reason"]


def test_a_folder_that_appears_counts_its_files_at_once(workdir: Path, make_engine: Make) -> None:
    engine = make_engine(workdir)
    for i in range(3):
        write(workdir, f"unpacked/part{i}.csv", "x" * 10)
    engine.mark_dirty(["unpacked"])  # the watcher reports a new folder as one path
    assert engine.pending() == (3, 30)


def test_the_files_a_failing_pass_planned_stay_pending(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    backend = FullAfter(str(store_dir))
    engine = make_engine(workdir, backend=backend)
    for i in range(3):
        write(workdir, f"unpacked/part{i}.csv", "x" * 10)
    backend.full = True
    engine.sync(["unpacked"])  # planned from the folder, failed: all three are still to go
    assert engine.pending() == (3, 30)
    states = {f["path"]: f["state"] for f in engine.pending_list()["files"]}
    assert (
        set(states) == {f"unpacked/part{i}.csv" for i in range(3)} and "failing" in states.values()
    )
