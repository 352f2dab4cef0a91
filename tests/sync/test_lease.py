"""One writer is truly one: the lease is taken by compare-and-swap, kept alive by its own
thread through passes longer than its lifetime, fenced before every write, taken over by itself
once its holder stops renewing, and honest where the store cannot make it exclusive."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

import fsspec
import pytest

from jupyter_gpu_ws.sync import LeaseHeldError, LocalBackend, SyncEngine
from jupyter_gpu_ws.sync.errors import LeaseLostError, StoreUnavailableError
from jupyter_gpu_ws.sync.lease import LEASE_NAME
from jupyter_gpu_ws.sync.remote import FsspecBackend
from tests.sync.conftest import S3_BUCKET, tree_files, write

Make = Callable[..., SyncEngine]


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"{what}: not within {timeout} s")


def second_workdir(tmp_path: Path, name: str = "other") -> Path:
    path = tmp_path / name
    path.mkdir()
    return path


def test_a_second_runtime_stays_read_only_while_the_holder_renews(workdir: Path, tmp_path: Path,
                                                                   make_engine: Make) -> None:
    first = make_engine(workdir, lease_ttl=0.6)
    second = make_engine(second_workdir(tmp_path), state="state2", lease_ttl=0.6)
    assert second.read_only and "Another runtime is writing this workspace" in (second.read_only_reason or "")
    time.sleep(1.5)  # well past the lifetime: only the holder's own thread kept it alive
    assert second.read_only and second.status()["state"] == "read-only"
    with pytest.raises(LeaseHeldError):
        second.sync()
    write(workdir, "a.txt", "still the writer")
    assert first.sync().uploaded == ["a.txt"]  # no pass ran meanwhile, and the lease held
    status = second.status()
    assert status["lease"]["holder"] == first.lease.holder and status["takeover_at"] > time.time()


def test_a_successor_takes_over_by_itself_once_the_holder_stops_renewing(workdir: Path, tmp_path: Path,
                                                                        make_engine: Make) -> None:
    ttl = 1.0
    first = make_engine(workdir, lease_ttl=ttl)
    other = second_workdir(tmp_path)
    second = make_engine(other, state="state2", lease_ttl=ttl, host="successor")
    assert second.read_only
    writable: list[float] = []
    second.on_writable = lambda: writable.append(time.monotonic())
    first.keeper.stop()  # the holder is killed: nothing renews its lease any more
    stopped = time.monotonic()
    wait_until(lambda: bool(writable), 3 * ttl, "the successor taking over")
    assert writable[0] - stopped <= ttl + 0.5  # within the lease's lifetime of the last renewal
    assert not second.read_only and second.writable
    write(other, "b.txt", "the successor writes")
    assert second.sync().uploaded == ["b.txt"]
    # The old holder, had it only been frozen, would find its writes fenced off.
    write(workdir, "late.txt", "from the old holder")
    with pytest.raises(LeaseLostError):
        first.sync()
    assert "late.txt" not in tree_files(Path(first.backend.root) / "ws" / "files")  # type: ignore[attr-defined]


def test_a_pass_longer_than_the_lease_keeps_it_and_the_other_runtime_never_writes(
        workdir: Path, tmp_path: Path, store_dir: Path, make_engine: Make) -> None:
    ttl = 0.8
    big = b"from the holder " * (2**20 // 16)  # 1 MiB at 300 KiB/s: about three lifetimes
    write(workdir, "shared.bin", big)
    first = make_engine(workdir, lease_ttl=ttl, bandwidth_limit=300 * 2**10)
    passing = threading.Thread(target=first.sync)
    passing.start()
    time.sleep(ttl * 1.5)
    other = second_workdir(tmp_path)
    write(other, "shared.bin", b"from the intruder")
    second = make_engine(other, state="state2", lease_ttl=ttl, host="another-machine")
    assert second.read_only  # the pass is still running, and the lease with it
    with pytest.raises(LeaseHeldError):
        second.sync()
    passing.join(30)
    assert (store_dir / "ws" / "files" / "shared.bin").read_bytes() == big
    assert first.status()["state"] == "idle" and first.writable


def test_two_runtimes_starting_together_on_a_slow_store_exactly_one_wins(tmp_path: Path, store_dir: Path) -> None:
    """Read, write, wait, read back is no lock: with 80 ms per request, two runtimes 65 ms apart
    both used to win. A compare-and-swap lets exactly one, every time."""
    from jupyter_gpu_ws.sync import SyncSettings

    class Slow(LocalBackend):
        """80 ms for every read and write of an object, inside the compare-and-swap too."""

        def read_bytes(self, key: str) -> Any:
            time.sleep(0.08)
            return super().read_bytes(key)

        def write_bytes(self, key: str, data: bytes) -> None:
            time.sleep(0.08)
            super().write_bytes(key, data)

    for round_ in range(20):
        store = store_dir / str(round_)
        engines: list[SyncEngine] = []
        for name in ("a", "b"):
            folder = tmp_path / f"{round_}-{name}"
            folder.mkdir()
            engines.append(SyncEngine(SyncSettings(workdir=str(folder), store_url=str(store), workspace="ws",
                                                   state_dir=str(tmp_path / f"state-{round_}-{name}"),
                                                   host=f"host-{name}"), backend=Slow(str(store))))
        threads = [threading.Thread(target=engines[0].open),
                   threading.Thread(target=lambda: (time.sleep(0.065), engines[1].open()))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        try:
            assert sorted(engine.read_only for engine in engines) == [False, True], f"round {round_}"
        finally:
            for engine in engines:
                engine.close()


def test_two_runtimes_starting_together_on_s3_exactly_one_wins(tmp_path: Path, s3_url: str) -> None:
    from jupyter_gpu_ws.sync import SyncSettings

    for round_ in range(20):
        engines = []
        for name in ("a", "b"):
            folder = tmp_path / f"{round_}-{name}"
            folder.mkdir()
            engines.append(SyncEngine(SyncSettings(workdir=str(folder), store_url=f"{s3_url}-{round_}",
                                                   workspace="ws", state_dir=str(tmp_path / f"s-{round_}-{name}"),
                                                   host=f"host-{name}")))
        start = threading.Barrier(2)
        threads = [threading.Thread(target=lambda e=e: (start.wait(), e.open())) for e in engines]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        try:
            assert sorted(engine.read_only for engine in engines) == [False, True], f"round {round_}"
            assert engines[0].status()["lease_exclusive"] is True
        finally:
            for engine in engines:
                engine.close()


def test_writes_stop_when_the_lease_cannot_be_renewed(workdir: Path, store_dir: Path, make_engine: Make) -> None:
    class LeaseWritesFail(LocalBackend):
        failing = False

        def write_if(self, key: str, data: bytes, tag: str | None) -> str:
            if self.failing:
                raise StoreUnavailableError("the lease cannot be written")
            return super().write_if(key, data, tag)

    backend = LeaseWritesFail(str(store_dir))
    engine = make_engine(workdir, backend=backend, lease_ttl=0.4)
    backend.failing = True
    wait_until(lambda: not engine.lease.valid(), 2.0, "the lease running out")
    write(workdir, "a.txt", "not to be written unfenced")
    with pytest.raises(LeaseLostError, match="could not be renewed"):
        engine.sync()
    assert not (store_dir / "ws" / "files" / "a.txt").exists()
    status = engine.status()
    assert status["state"] == "error" and "could not be renewed" in status["last_error"]
    assert "the lease cannot be written" in status["lease_error"]  # the reason, for the panel
    backend.failing = False  # the store answers again, and nobody took the lease meanwhile
    wait_until(lambda: engine.lease.valid(), 2.0, "the lease renewed")
    assert engine.sync().uploaded == ["a.txt"]


def test_an_explicit_take_over_of_a_live_holder_writes_only_once_its_time_is_up(
        workdir: Path, tmp_path: Path, make_engine: Make) -> None:
    ttl = 1.0
    first = make_engine(workdir, lease_ttl=ttl)
    other = second_workdir(tmp_path)
    second = make_engine(other, state="state2", lease_ttl=ttl, host="another-machine")
    second.take_over()
    assert second.lease.held and not second.writable
    assert second.status()["state"] == "taking-over"
    wait_until(lambda: first.read_only, 2 * ttl, "the old holder noticing")
    assert "took the workspace lease" in (first.read_only_reason or "")
    wait_until(lambda: second.writable, 2 * ttl, "the new holder writing")
    write(other, "c.txt", "mine now")
    assert second.sync().uploaded == ["c.txt"]


def test_an_unreadable_lease_is_an_error_and_take_over_replaces_it(workdir: Path, store_dir: Path,
                                                                   make_engine: Make) -> None:
    lease = store_dir / "ws" / ".gpuws" / LEASE_NAME
    lease.parent.mkdir(parents=True)
    lease.write_text('{"holder": "x", "host": ')  # truncated
    engine = make_engine(workdir)
    status = engine.status()
    assert status["state"] == "error" and status["can_take_over"]
    assert "lease" in status["read_only_reason"] and "unreadable" in status["read_only_reason"]
    engine.take_over()
    assert engine.writable and engine.status()["state"] == "idle"
    assert engine.lease.current().holder == engine.lease.holder


def test_a_store_without_compare_and_swap_says_its_lease_is_advisory(workdir: Path, tmp_path: Path,
                                                                    make_engine: Make) -> None:
    backend = FsspecBackend(fsspec.filesystem("file"), str(tmp_path / "plain-store"))
    engine = make_engine(workdir, backend=backend)
    status = engine.status()
    assert status["lease_held"] and status["lease_exclusive"] is False
    assert "cannot stop a runtime elsewhere from writing" in status["lease_note"]


def test_the_s3_store_proves_its_conditional_writes(workdir: Path, s3_url: str, make_engine: Make) -> None:
    engine = make_engine(workdir, s3_url)
    assert engine.status()["lease_exclusive"] is True and engine.status()["lease_note"] is None
    fs = engine.backend.fs  # type: ignore[attr-defined]
    assert not [p for p in fs.find(f"{S3_BUCKET}/") if "swap-probe" in p]  # the probe is gone
