"""When the store's writes become durable: at the end of a pass that waits for it (Persist now,
the command line), just after one in the background (the watcher's passes), and what an unclean
stop or a failed flush before then costs: the files are sent again, never lost."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.sync import LocalBackend, StoreUnavailableError, SyncEngine, SyncError
from tests.sync.conftest import write
from tests.waiting import until

Make = Callable[..., SyncEngine]


class GatedBackend(LocalBackend):
    """A local folder whose disk takes its time: a flush that has taken the writes waits at a
    gate before they reach the disk, and may then fail as a disk does."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.gate = threading.Event()
        self.taken = threading.Event()
        self.flushed_in: list[str] = []  # the thread of each flush that had work to do
        self.fail_next = False
        self.flush_soon: list[bool] = []  # each put's: does a flush follow at once?

    def put(self, *args: Any, flush_soon: bool = False, **kwargs: Any) -> int:
        self.flush_soon.append(flush_soon)
        return super().put(*args, flush_soon=flush_soon, **kwargs)

    def _sync_to_disk(self, paths: set[str], many: bool) -> None:
        if not paths and not many:
            return
        self.flushed_in.append(threading.current_thread().name)
        self.taken.set()
        self.gate.wait(30)
        if self.fail_next:  # the writes are taken: a failed fsync leaves nothing to retry
            self.fail_next = False
            raise StoreUnavailableError("Cannot write to the store (flush): Input/output error")
        super()._sync_to_disk(paths, many)


def unflushed(engine: SyncEngine) -> int:
    return len(engine.index.unflushed_paths())


def test_a_durable_pass_returns_only_after_the_flush(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    write(workdir, "a.txt", "a")
    backend = GatedBackend(str(store_dir))
    backend.gate.set()
    engine = make_engine(workdir, backend=backend, settle_interval=0)
    assert engine.sync().uploaded == ["a.txt"]
    assert backend.flushed_in == [threading.current_thread().name]
    assert backend.flush_soon == [True]  # a large file would head for the disk while copied
    assert unflushed(engine) == 0 and not backend.unflushed()


def test_a_pass_that_does_not_wait_is_flushed_in_the_background(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    write(workdir, "a.txt", "aaa")
    write(workdir, "sub/b.txt", "bb")
    backend = GatedBackend(str(store_dir))
    engine = make_engine(workdir, backend=backend, settle_interval=0)
    report = engine.sync(durable=False)  # the flush is held at the gate: the pass does not wait
    assert sorted(report.uploaded) == ["a.txt", "sub/b.txt"]
    assert (store_dir / "ws/files/sub/b.txt").read_text() == "bb"  # whole, in the store already
    assert unflushed(engine) == 2
    assert engine.pending() == (0, 0) and engine.state == "idle"
    assert backend.flush_soon == [
        False,
        False,
    ]  # copied at memory speed; the disk gets it at the flush
    until(lambda: backend.flushed_in)
    assert backend.flushed_in == ["gpuws-flush"]
    backend.gate.set()
    until(lambda: unflushed(engine) == 0)
    assert not backend.unflushed()


CRASH_BEFORE_FLUSH = """
import json, os, signal, sys, threading
from jupyter_gpu_ws.sync import LocalBackend, SyncEngine, SyncSettings
LocalBackend.flush = lambda self: threading.Event().wait()  # the disk never gets there
engine = SyncEngine(SyncSettings(**json.loads(sys.argv[1]), settle_interval=0))
engine.open()
report = engine.sync(durable=False)
print(json.dumps(sorted(report.uploaded)), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_an_unclean_stop_before_the_flush_sends_those_files_again(
    workdir: Path, store_dir: Path, tmp_path: Path, make_engine: Make
) -> None:
    write(workdir, "old.txt", "flushed long ago")
    first = make_engine(workdir, settle_interval=0)
    first.sync()
    first.close()
    write(workdir, "new.txt", "written just before the machine stopped")
    write(workdir, "old.txt", "changed just before the machine stopped")
    settings = {
        "workdir": str(workdir),
        "store_url": str(store_dir),
        "workspace": "ws",
        "state_dir": str(tmp_path / "state"),
    }
    child = subprocess.run(
        [sys.executable, "-c", CRASH_BEFORE_FLUSH, json.dumps(settings)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert json.loads(child.stdout) == [
        "new.txt",
        "old.txt",
    ]  # in the store and recorded, not durable

    second = make_engine(workdir, settle_interval=0)  # takes the lease the dead process left
    assert sorted(f.path for f in second.plan()[0]) == ["new.txt", "old.txt"]
    assert sorted(second.sync().uploaded) == ["new.txt", "old.txt"]
    assert (store_dir / "ws/files/new.txt").read_text() == "written just before the machine stopped"
    assert unflushed(second) == 0 and second.sync().uploaded == []


def test_a_failed_flush_leaves_the_files_pending_and_the_next_pass_sends_them(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    write(workdir, "a.txt", "a")
    write(workdir, "b.txt", "bb")
    backend = GatedBackend(str(store_dir))
    backend.gate.set()
    backend.fail_next = True
    engine = make_engine(workdir, backend=backend, settle_interval=0)
    with pytest.raises(
        SyncError, match=r"Input/output error: the last writes may not be durable, so 2 files"
    ):
        engine.sync()
    assert engine.state == "error" and engine.pending() == (2, 3)
    assert engine.index.get("a.txt") is None  # not recorded as synced
    assert sorted(engine.sync(engine.take_dirty()).uploaded) == ["a.txt", "b.txt"]
    assert engine.state == "idle" and engine.pending() == (0, 0) and unflushed(engine) == 0


def test_a_failed_background_flush_shows_as_an_error_and_keeps_the_files_pending(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    write(workdir, "a.txt", "a")
    backend = GatedBackend(str(store_dir))
    backend.fail_next = True
    engine = make_engine(workdir, backend=backend, settle_interval=0)
    engine.sync(durable=False)
    backend.gate.set()
    until(lambda: engine.state == "error")
    assert "may not be durable, so 1 file will be sent again" in (engine.last_error or "")
    assert engine.pending() == (1, 1) and engine.index.get("a.txt") is None
    assert engine.sync(engine.take_dirty()).uploaded == ["a.txt"]
    assert engine.state == "idle" and unflushed(engine) == 0


def test_close_flushes_what_the_background_has_not_yet(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    write(workdir, "a.txt", "a")
    backend = GatedBackend(str(store_dir))
    engine = make_engine(workdir, backend=backend, settle_interval=0)
    engine.sync(durable=False)
    closed = threading.Thread(target=engine.close)
    closed.start()
    time.sleep(0.2)
    assert closed.is_alive()  # waiting for the flush
    backend.gate.set()
    closed.join(10)
    assert not closed.is_alive() and not backend.unflushed()


def test_writes_a_running_flush_took_before_the_pass_recorded_them_stay_listed(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    backend = GatedBackend(str(store_dir))
    engine = make_engine(workdir, backend=backend, settle_interval=0)
    write(workdir, "b.txt", "b")
    put = backend.put

    def put_then_a_flush_takes_it(*args: Any, **kwargs: Any) -> int:
        size = put(*args, **kwargs)
        threading.Thread(target=backend.flush, daemon=True).start()  # a flush from an earlier pass
        assert backend.taken.wait(10)
        return size

    backend.put = put_then_a_flush_takes_it  # type: ignore[method-assign]
    try:
        engine.sync(durable=False)
        assert not backend.unflushed()  # nothing waits for a flush: the running one has it all
        assert engine.index.unflushed_paths() == ["b.txt"]  # yet it is not on disk: still listed
    finally:
        backend.gate.set()
    until(lambda: engine.index.unflushed_paths() == [])
