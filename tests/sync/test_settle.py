"""A file is stored once it settles: a file written and closed goes at once, one still being
written waits (pending, saying so) until it has not changed for the settle interval, a persist
takes it as it is, and a partial copy is never kept as a version; the service's loop never dies."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.sync import SyncEngine
from jupyter_gpu_ws.sync.service import SyncService
from tests.sync.conftest import tree_files, write
from tests.waiting import until

Make = Callable[..., SyncEngine]


def stored(store_dir: Path) -> dict[str, bytes]:
    root = store_dir / "ws" / "files"
    return tree_files(root) if root.exists() else {}


@pytest.fixture
def running(workdir: Path, make_engine: Make) -> Any:
    services: list[SyncService] = []

    def start(**options: Any) -> SyncService:
        service = SyncService(make_engine(workdir, **options), debounce=0.02, rescan_interval=3600)
        service.start()
        services.append(service)
        until(lambda: service.passes >= 1, 10, "the first pass")
        return service

    yield start
    for service in services:
        service.stop()


def grow(path: Path, chunks: int, every: float, size: int = 256 * 1024) -> threading.Thread:
    """A writer that keeps the file open and appends to it, as a download or a log does."""

    def run() -> None:
        with open(path, "wb") as f:
            for _ in range(chunks):
                f.write(os.urandom(size))
                f.flush()
                time.sleep(every)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_file_being_written_is_stored_once_whole_and_pending_meanwhile(
    running: Any, workdir: Path, store_dir: Path
) -> None:
    service = running(settle_interval=1.0)
    path = workdir / "download.bin"
    writer = grow(path, chunks=20, every=0.15)
    seen: list[tuple[int, bool]] = []
    while writer.is_alive():
        status = service.engine.status()
        seen.append((status["pending_files"], "download.bin" in stored(store_dir)))
        time.sleep(0.05)
    writer.join()
    assert seen and all(pending >= 1 for pending, _ in seen[3:]), (
        seen
    )  # never "saved" while written
    assert not any(there for _, there in seen), "a truncated copy reached the store"
    until(
        lambda: stored(store_dir).get("download.bin") == path.read_bytes(),
        15,
        "the whole file stored",
    )
    assert service.engine.versions("download.bin") == []  # one copy, no truncated versions
    until(lambda: service.engine.status()["pending_files"] == 0, 10, "nothing pending")


def test_the_pending_list_says_a_file_is_still_being_written(running: Any, workdir: Path) -> None:
    service = running(settle_interval=30.0)
    path = workdir / "log.txt"
    with open(path, "w") as f:
        f.write("step 1\n")
        f.flush()

        def listed() -> Any:  # listed at once, "writing" once the watcher's report is in
            files = service.engine.pending_list()["files"]
            return files and files[0]["state"] == "writing" and files[0]

        item = until(listed, 10, "the file listed as being written")
        assert item["path"] == "log.txt"
        assert "still being written" in item["note"]
        f.write("step 2\n")


def test_a_file_written_and_closed_goes_at_once_whatever_the_settle_interval(
    running: Any, workdir: Path, store_dir: Path
) -> None:
    running(settle_interval=3600.0)
    write(workdir, "notebook.ipynb", "{}")
    until(lambda: stored(store_dir).get("notebook.ipynb") == b"{}", 10, "the closed file stored")


def test_a_file_kept_open_but_left_unchanged_goes_after_the_settle_interval(
    running: Any, workdir: Path, store_dir: Path
) -> None:
    running(settle_interval=1.0)
    with open(workdir / "train.log", "w") as f:
        f.write("epoch 1\n")
        f.flush()  # open, and quiet from now on
        until(
            lambda: stored(store_dir).get("train.log") == b"epoch 1\n",
            10,
            "the quiet open file stored",
        )


def test_a_persist_takes_a_file_being_written_and_that_partial_copy_is_never_a_version(
    running: Any, workdir: Path, store_dir: Path
) -> None:
    service = running(settle_interval=1.0)
    path = workdir / "growing.bin"
    with open(path, "wb") as f:
        f.write(b"first half ")
        f.flush()
        until(
            lambda: "growing.bin" in service.engine.settling._open, 5, "the watcher seeing it open"
        )
        service.flush()  # Persist now: everything on disk reaches the store, as it is
        assert stored(store_dir)["growing.bin"] == b"first half "
        f.write(b"second half")
    until(
        lambda: stored(store_dir).get("growing.bin") == b"first half second half",
        10,
        "the whole file",
    )
    assert service.engine.versions("growing.bin") == []


def test_versions_of_a_file_are_kept_at_most_once_per_settle_interval(
    workdir: Path, make_engine: Make
) -> None:
    engine = make_engine(workdir, settle_interval=60.0)
    for n in range(6):
        write(workdir, "config.yaml", f"version {n}\n" * (n + 1))
        assert engine.sync(["config.yaml"]).uploaded == ["config.yaml"]
    assert len(engine.versions("config.yaml")) == 1


def test_the_sync_loop_lives_on_after_an_unforeseen_error(
    running: Any, workdir: Path, store_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service = running()
    engine = service.engine
    real = engine.take_dirty
    failures: list[int] = []

    def broken() -> set[str]:
        if not failures:
            failures.append(1)
            raise RuntimeError("an error nobody foresaw")
        return real()

    engine.take_dirty = broken  # type: ignore[method-assign]
    write(workdir, "first.txt", "1")
    until(lambda: failures, 10, "the failure")
    assert "an error nobody foresaw" in (engine.status()["last_error"] or "")
    assert "Traceback" in caplog.text or any(r.exc_info for r in caplog.records)
    write(workdir, "second.txt", "2")
    until(lambda: {"first.txt", "second.txt"} <= set(stored(store_dir)), 30, "both files stored")


def test_a_log_kept_open_and_appended_to_reaches_the_store_every_so_often_never_as_versions(
    running: Any, workdir: Path, store_dir: Path
) -> None:
    # A training loop's loss log: opened once, a line appended and flushed every 0.1 s. It never
    # settles (settle 30 s here), so it goes as it is every `partial_copy_every` seconds.
    service = running(settle_interval=30.0, partial_copy_every=1.0)
    path = workdir / "loss.log"
    copies: list[bytes] = []
    with open(path, "w") as log:
        for step in range(60):
            log.write(f"step {step} loss {1 / (step + 1):.4f}\n")
            log.flush()
            there = stored(store_dir).get("loss.log")
            if there is not None and (not copies or copies[-1] != there):
                copies.append(there)
            time.sleep(0.1)
        assert len(copies) >= 2, copies  # a copy while open, then a newer one replacing it
        for copy in copies:
            assert path.read_bytes().startswith(copy)  # each a prefix of the log: never torn
        assert len(copies[-1]) > len(copies[0])
    assert service.engine.versions("loss.log") == []  # partial copies are never kept
    until(
        lambda: stored(store_dir).get("loss.log") == path.read_bytes(), 10, "the closed log stored"
    )


def test_by_default_an_open_log_is_at_most_30_seconds_behind_in_the_store() -> None:
    # The interval the test above exercises, as users get it (issue 46: a kill -9 costs at most
    # 30 s of a log kept open).
    from jupyter_gpu_ws.sync.engine import SyncSettings

    assert (
        SyncSettings(workdir="/w", store_url="/s", workspace="w", state_dir="/x").partial_copy_every
        <= 30.0
    )
