"""The background service: file-system events become passes without anyone asking."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_gpu_ws.sync import SyncEngine, inotify
from jupyter_gpu_ws.sync.service import SyncService
from tests.sync.conftest import tree_files, write
from tests.sync.test_flush import GatedBackend
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)


@pytest.fixture(params=["auto", "watchfiles"])
def service(workdir: Path, make_engine: Callable[..., SyncEngine], request: pytest.FixtureRequest):
    """The service with each watcher: inotify on Linux ("auto"), and the portable watchfiles."""
    write(workdir, "existing.txt", "old")
    svc = SyncService(
        make_engine(workdir), debounce=0.02, rescan_interval=3600, watcher=request.param
    )
    svc.start()
    yield svc
    svc.stop()


def files(store_dir: Path) -> dict[str, bytes]:
    root = store_dir / "ws" / "files"
    return tree_files(root) if root.exists() else {}


def test_start_mirrors_what_is_there(service: SyncService, store_dir: Path) -> None:
    until(lambda: files(store_dir).get("existing.txt") == b"old")


def test_a_written_file_reaches_the_store_by_itself(
    service: SyncService, workdir: Path, store_dir: Path
) -> None:
    until(lambda: "existing.txt" in files(store_dir))
    write(workdir, "notebooks/new.ipynb", "{}")
    until(lambda: files(store_dir).get("notebooks/new.ipynb") == b"{}")
    until(lambda: service.engine.pending() == (0, 0))  # recorded just after


def test_a_renamed_folder_is_followed(service: SyncService, workdir: Path, store_dir: Path) -> None:
    write(workdir, "run1/a.txt", "a")
    write(workdir, "run1/b.txt", "b")
    until(lambda: {"run1/a.txt", "run1/b.txt"} <= set(files(store_dir)))
    (workdir / "run1").rename(workdir / "run2")
    until(lambda: set(files(store_dir)) == {"existing.txt", "run2/a.txt", "run2/b.txt"})
    assert service.engine.versions("run1/a.txt")


@pytest.mark.parametrize("watcher", ["auto", "watchfiles"])
def test_a_folder_no_longer_ignored_is_watched(
    workdir: Path, store_dir: Path, watcher: str, make_engine: Callable[..., SyncEngine]
) -> None:
    write(workdir, ".gpuwsignore", "scratch/\n")
    write(workdir, "scratch/a.txt", "a")
    svc = SyncService(make_engine(workdir), debounce=0.02, rescan_interval=3600, watcher=watcher)
    svc.start()
    try:
        until(lambda: ".gpuwsignore" in files(store_dir))
        assert "scratch/a.txt" not in files(store_dir)
        write(workdir, ".gpuwsignore", "# nothing ignored now\n")
        until(lambda: files(store_dir).get(".gpuwsignore") == b"# nothing ignored now\n")
        write(
            workdir, "scratch/a.txt", "written after"
        )  # seen by the watcher: no rescan for an hour
        until(lambda: files(store_dir).get("scratch/a.txt") == b"written after")
    finally:
        svc.stop()


def test_the_first_pass_waits_for_the_watch_so_no_early_write_is_missed(
    workdir: Path,
    store_dir: Path,
    make_engine: Callable[..., SyncEngine],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    setup = inotify.TreeWatcher.__init__
    setting_up, go_on = threading.Event(), threading.Event()

    def slow_setup(self: inotify.TreeWatcher, *args: object, **kwargs: object) -> None:
        setting_up.set()
        go_on.wait(30)  # a large tree takes a while to watch
        setup(self, *args, **kwargs)

    monkeypatch.setattr(inotify.TreeWatcher, "__init__", slow_setup)
    svc = SyncService(make_engine(workdir), debounce=0.02, rescan_interval=3600)
    svc.start()
    try:
        assert setting_up.wait(30)
        write(workdir, "early.txt", "before the watch was in place")  # and no rescan for an hour
        go_on.set()
        until(lambda: files(store_dir).get("early.txt") == b"before the watch was in place")
    finally:
        go_on.set()
        svc.stop()


@pytest.mark.skipif(not inotify.available(), reason="inotify is Linux only")
def test_a_watch_queue_that_overflowed_brings_a_full_rescan(
    workdir: Path,
    store_dir: Path,
    make_engine: Callable[..., SyncEngine],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.sync.test_inotify import overflowing_file_count

    busy = threading.Event()
    changes = inotify.TreeWatcher.changes

    def late(self: inotify.TreeWatcher, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        busy.wait(30)  # a busy machine: the watcher's thread gets no time while files pour in
        yield from changes(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(inotify.TreeWatcher, "changes", late)
    svc = SyncService(make_engine(workdir), debounce=0.02, rescan_interval=3600)
    svc.start()
    try:
        until(lambda: svc.passes >= 1)
        count = overflowing_file_count()
        for i in range(count):
            (workdir / f"f{i:05d}").touch()
        busy.set()  # the kernel kept only part of the events: the rest needs a full rescan
        until(lambda: len(files(store_dir)) == count, timeout=60)
    finally:
        busy.set()
        svc.stop()


def test_flush_carries_everything_now(service: SyncService, workdir: Path, store_dir: Path) -> None:
    write(workdir, "late.txt", "x")
    report = service.flush()
    assert report.ok and files(store_dir)["late.txt"] == b"x"


def test_the_watchers_passes_flush_in_the_background_and_persist_waits_for_the_flush(
    workdir: Path, store_dir: Path, make_engine: Callable[..., SyncEngine]
) -> None:
    backend = GatedBackend(str(store_dir))
    engine = make_engine(workdir, backend=backend)
    svc = SyncService(engine, debounce=0.02, rescan_interval=3600)
    svc.start()
    try:
        until(lambda: svc.passes >= 1)
        write(workdir, "a.txt", "a")
        # In the store and recorded while the disk has not confirmed it (the flush is held).
        until(lambda: files(store_dir).get("a.txt") == b"a" and engine.pending() == (0, 0))
        until(lambda: backend.flushed_in == ["gpuws-flush"])
        assert engine.index.unflushed_paths() == ["a.txt"]

        write(workdir, "b.txt", "b")
        persisted = threading.Thread(target=svc.flush)  # Persist now
        persisted.start()
        # b.txt is in the store, and the persist waits for the disk to confirm it: it cannot end
        # while the disk holds the writes.
        until(lambda: files(store_dir).get("b.txt") == b"b")
        assert persisted.is_alive()
        backend.gate.set()
        persisted.join(10)
        assert not persisted.is_alive()
        assert engine.index.unflushed_paths() == [] and not backend.unflushed()
    finally:
        backend.gate.set()
        svc.stop()


def test_a_clean_stop_loses_nothing(
    workdir: Path, store_dir: Path, make_engine: Callable[..., SyncEngine]
) -> None:
    svc = SyncService(make_engine(workdir), debounce=0.02, rescan_interval=3600)
    svc.start()
    until(lambda: svc.passes >= 1)
    write(workdir, "last-second.txt", "saved")  # seen by the watcher or not: the stop's pass
    svc.stop()
    assert files(store_dir)["last-second.txt"] == b"saved"


@pytest.fixture
def slow_settle(workdir: Path, make_engine: Callable[..., SyncEngine]):
    """A service whose settle delay is far longer than any test waits."""
    svc = SyncService(make_engine(workdir), debounce=60.0, rescan_interval=3600)
    svc.start(initial_pass=False)
    until(svc._watching.is_set, 30, "the watch in place")
    yield svc
    svc.final_pass = False
    svc.stop()


def test_a_small_change_after_a_quiet_spell_goes_at_once(
    slow_settle: SyncService, workdir: Path, store_dir: Path
) -> None:
    write(workdir, "train.py", "print('edited')")
    until(lambda: files(store_dir).get("train.py") == b"print('edited')", timeout=20)


def test_a_small_file_still_open_when_first_reported_goes_at_once_when_closed(
    slow_settle: SyncService, workdir: Path, store_dir: Path
) -> None:
    # Its write and its close come in two of the watcher's reports (a slow writer, or a loaded
    # machine): the first counts as a change, yet the close after a quiet spell still leads
    # (run 22: it waited for the 60 s settle delay).
    with open(workdir / "train.py", "w") as f:
        f.write("print('edited')")
        f.flush()
        until(lambda: "train.py" in slow_settle.engine.settling._open, 10, "reported open")
    until(lambda: files(store_dir).get("train.py") == b"print('edited')", timeout=10)


def test_a_large_write_waits_for_the_settle_delay(
    slow_settle: SyncService, workdir: Path, store_dir: Path
) -> None:
    # Written elsewhere and moved in, so the watcher's first report already sees 5 MiB (a file
    # reported while still small goes at once; its upload is checked and retried if it grew).
    staged = workdir.parent / "weights.staged"
    staged.write_bytes(b"\0" * (5 * 2**20))
    os.replace(staged, workdir / "weights.bin")
    time.sleep(2.0)  # well past the watcher's report, far inside the 60 s settle delay
    assert "weights.bin" not in files(store_dir)
    assert "weights.bin" in slow_settle.engine.take_dirty()  # noticed, held back


@pytest.mark.skipif(
    not inotify.available(), reason="only inotify tells an open file from a closed one"
)
def test_a_file_still_open_for_writing_waits_for_the_settle_delay(
    slow_settle: SyncService, workdir: Path, store_dir: Path
) -> None:
    with open(workdir / "train.log", "w") as log:
        log.write("epoch 1\n")
        log.flush()  # small, after a quiet spell, but its writer has not closed it
        time.sleep(2.0)
        assert "train.log" not in files(store_dir)
    assert "train.log" in slow_settle.engine.take_dirty()  # noticed, held back


@pytest.mark.skipif(not inotify.available(), reason="inotify's limit on watches")
def test_folders_beyond_the_watch_limit_are_reported_and_left_to_the_rescan(
    workdir: Path,
    store_dir: Path,
    make_engine: Callable[..., SyncEngine],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add = inotify.TreeWatcher._add

    def limited(self: inotify.TreeWatcher, rel: str, path: str) -> bool:
        if rel.startswith("data"):  # as inotify_add_watch answers ENOSPC at the system's limit
            self.limited = True
            return False
        return add(self, rel, path)

    monkeypatch.setattr(inotify.TreeWatcher, "_add", limited)
    write(workdir, "data/shard0/a.bin", "a")
    svc = SyncService(make_engine(workdir), debounce=0.02, rescan_interval=3600)
    svc.start()
    try:
        until(lambda: "data/shard0/a.bin" in files(store_dir))
        status = svc.watch_status()
        assert status["watcher"] == "inotify" and status["limited"] and status["error"] is None
        assert status["folders"] == 1  # the root; data/ and below are beyond the limit
        write(workdir, "data/shard0/a.bin", "changed")
        time.sleep(1.0)
        assert files(store_dir)["data/shard0/a.bin"] == b"a"  # unwatched: waits for a rescan
        assert svc.flush().ok and files(store_dir)["data/shard0/a.bin"] == b"changed"
    finally:
        svc.stop()


def test_a_vanished_work_directory_stops_the_watch_with_its_reason(
    workdir: Path, make_engine: Callable[..., SyncEngine]
) -> None:
    write(workdir, "a.txt", "a")
    svc = SyncService(make_engine(workdir), debounce=0.02, rescan_interval=3600)
    svc.start()
    try:
        until(lambda: svc.passes >= 1)
        assert svc.watch_status()["error"] is None
        moved = workdir.parent / "moved-away"
        workdir.rename(moved)
        until(lambda: "File watching stopped" in (svc.watch_status()["error"] or ""))
    finally:
        svc.final_pass = False
        svc.stop()
