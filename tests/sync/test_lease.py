"""One writer is truly one: the lease is taken by compare-and-swap, kept alive by its own
thread through passes longer than its lifetime, fenced before every write, taken over by itself
once its holder stops renewing, and honest where the store cannot make it exclusive."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import fsspec
import pytest

from jupyter_gpu_ws.store.fsspec_store import FsspecBackend
from jupyter_gpu_ws.store.lease import LEASE_NAME
from jupyter_gpu_ws.sync import LeaseHeldError, LocalBackend, SyncEngine
from jupyter_gpu_ws.sync.errors import LeaseLostError, StoreUnavailableError, SyncError
from tests.sync.conftest import S3_BUCKET, tree_files, write
from tests.waiting import elapsed_until, until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

Make = Callable[..., SyncEngine]


def second_workdir(tmp_path: Path, name: str = "other") -> Path:
    path = tmp_path / name
    path.mkdir()
    return path


def test_a_second_runtime_stays_read_only_while_the_holder_renews(
    workdir: Path, tmp_path: Path, make_engine: Make
) -> None:
    # A holder's renewal late by a loaded machine's second must still be in time.
    first = make_engine(workdir, lease_ttl=2.0)
    second = make_engine(second_workdir(tmp_path), state="state2", lease_ttl=2.0)
    assert second.read_only and "Another runtime is writing this workspace" in (
        second.read_only_reason or ""
    )
    time.sleep(2.5)  # past the lifetime: only the holder's own thread kept it alive
    assert second.read_only and second.status()["state"] == "read-only"
    with pytest.raises(LeaseHeldError):
        second.sync()
    write(workdir, "a.txt", "still the writer")
    assert first.sync().uploaded == ["a.txt"]  # no pass ran meanwhile, and the lease held
    status = second.status()
    assert status["lease"]["holder"] == first.lease.holder and status["takeover_at"] > time.time()


def test_a_successor_takes_over_by_itself_once_the_holder_stops_renewing(
    workdir: Path, tmp_path: Path, make_engine: Make
) -> None:
    ttl = 1.0
    first = make_engine(workdir, lease_ttl=ttl)
    other = second_workdir(tmp_path)
    second = make_engine(other, state="state2", lease_ttl=ttl, host="successor")
    assert second.read_only
    writable: list[float] = []
    second.on_writable = lambda: writable.append(time.monotonic())
    first.keeper.stop()  # the holder is killed: nothing renews its lease any more
    stopped = time.monotonic()
    elapsed_until(lambda: bool(writable), 3 * ttl, "the successor taking over")
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
    workdir: Path, tmp_path: Path, store_dir: Path, make_engine: Make
) -> None:
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
    # Still the holder's (between a lapsed lease and its renewal it is not writable a moment).
    assert first.status()["state"] == "idle" and first.lease.held and not first.read_only


def test_two_runtimes_starting_together_on_a_slow_store_exactly_one_wins(
    tmp_path: Path, store_dir: Path
) -> None:
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
        store.mkdir(parents=True)
        engines: list[SyncEngine] = []
        for name in ("a", "b"):
            folder = tmp_path / f"{round_}-{name}"
            folder.mkdir()
            engines.append(
                SyncEngine(
                    SyncSettings(
                        workdir=str(folder),
                        store_url=str(store),
                        workspace="ws",
                        state_dir=str(tmp_path / f"state-{round_}-{name}"),
                        host=f"host-{name}",
                    ),
                    backend=Slow(str(store)),
                )
            )
        threads = [
            threading.Thread(target=engines[0].open),
            threading.Thread(target=lambda: (time.sleep(0.065), engines[1].open())),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        try:
            assert sorted(engine.read_only for engine in engines) == [False, True], (
                f"round {round_}"
            )
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
            engines.append(
                SyncEngine(
                    SyncSettings(
                        workdir=str(folder),
                        store_url=f"{s3_url}-{round_}",
                        workspace="ws",
                        state_dir=str(tmp_path / f"s-{round_}-{name}"),
                        host=f"host-{name}",
                    )
                )
            )
        start = threading.Barrier(2)
        threads = [threading.Thread(target=lambda e=e: (start.wait(), e.open())) for e in engines]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        try:
            assert sorted(engine.read_only for engine in engines) == [False, True], (
                f"round {round_}"
            )
            assert engines[0].status()["lease_exclusive"] is True
        finally:
            for engine in engines:
                engine.close()


def test_writes_stop_when_the_lease_cannot_be_renewed(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    class LeaseWritesFail(LocalBackend):
        failing = False

        def write_if(self, key: str, data: bytes, tag: str | None) -> str:
            if self.failing:
                raise StoreUnavailableError("the lease cannot be written")
            return super().write_if(key, data, tag)

    backend = LeaseWritesFail(str(store_dir))
    engine = make_engine(workdir, backend=backend, lease_ttl=0.4)
    backend.failing = True
    elapsed_until(lambda: not engine.lease.valid(), 2.0, "the lease running out")
    write(workdir, "a.txt", "not to be written unfenced")
    with pytest.raises(LeaseLostError, match="could not be renewed"):
        engine.sync()
    assert not (store_dir / "ws" / "files" / "a.txt").exists()
    status = engine.status()
    assert status["state"] == "error" and "could not be renewed" in status["last_error"]
    assert "the lease cannot be written" in status["lease_error"]  # the reason, for the panel
    backend.failing = False  # the store answers again, and nobody took the lease meanwhile
    elapsed_until(lambda: engine.lease.valid(), 2.0, "the lease renewed")
    assert engine.sync().uploaded == ["a.txt"]


def test_an_explicit_take_over_of_a_live_holder_writes_only_once_its_time_is_up(
    workdir: Path, tmp_path: Path, make_engine: Make
) -> None:
    ttl = 1.0
    first = make_engine(workdir, lease_ttl=ttl)
    other = second_workdir(tmp_path)
    second = make_engine(other, state="state2", lease_ttl=ttl, host="another-machine")
    second.take_over()
    assert second.lease.held and not second.writable
    assert second.status()["state"] == "taking-over"
    elapsed_until(lambda: first.read_only, 2 * ttl, "the old holder noticing")
    assert "took the workspace lease" in (first.read_only_reason or "")
    elapsed_until(lambda: second.writable, 2 * ttl, "the new holder writing")
    write(other, "c.txt", "mine now")
    assert second.sync().uploaded == ["c.txt"]


def test_an_unreadable_lease_is_an_error_and_take_over_replaces_it(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
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


def test_a_holders_own_lease_made_unreadable_under_it_is_written_anew_by_the_holder(
    workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    engine = make_engine(workdir, lease_ttl=2.0)
    lease = store_dir / "ws" / ".gpuws" / LEASE_NAME
    lease.write_text('{"holder": "x", "host": ')  # truncated under its holder
    engine.keeper.wake()  # its next renewal, now

    def mended() -> bool:
        try:
            return engine.lease.current().holder == engine.lease.holder
        except SyncError:
            return False

    until(mended, 10, "the holder's lease written anew")
    status = engine.status()
    assert status["state"] == "idle" and engine.writable and status["last_error"] is None, status
    write(workdir, "after.txt", "still writing")
    assert engine.sync().uploaded == ["after.txt"]


def test_a_store_without_compare_and_swap_says_its_lease_is_advisory(
    workdir: Path, tmp_path: Path, make_engine: Make
) -> None:
    backend = FsspecBackend(fsspec.filesystem("file"), str(tmp_path / "plain-store"))
    engine = make_engine(workdir, backend=backend)
    status = engine.status()
    assert status["lease_held"] and status["lease_exclusive"] is False
    assert "cannot stop a runtime elsewhere from writing" in status["lease_note"]


def test_the_s3_store_proves_its_conditional_writes(
    workdir: Path, s3_url: str, s3_env: Any, make_engine: Make
) -> None:
    engine = make_engine(workdir, s3_url)
    assert engine.status()["lease_exclusive"] is True and engine.status()["lease_note"] is None
    keys = [o["Key"] for o in s3_env.client().list_objects_v2(Bucket=S3_BUCKET).get("Contents", [])]
    assert keys and not [k for k in keys if "swap-probe" in k]  # the probe is gone


# -- numbers from the store are checked, not trusted --------------------------------------------


def foreign_lease(store_dir: Path, **fields: Any) -> Path:
    """A lease file as another (or a hostile) runtime left it in the store."""
    now = time.time()
    value = {
        "holder": "f" * 32,
        "host": "elsewhere",
        "pid": 4242,
        "user": "someone",
        "acquired": now,
        "heartbeat": now,
        "expires": now + 20,
        "ttl": 20.0,
        **fields,
    }
    path = store_dir / "ws" / ".gpuws" / LEASE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(value)
    )  # allow_nan: Python writes NaN and Infinity as a hostile file may
    return path


@pytest.mark.parametrize(
    "fields",
    [
        {"expires": datetime(2100, 1, 1, tzinfo=timezone.utc).timestamp()},
        {"expires": float("inf")},
        {"heartbeat": float("nan")},
        {"ttl": 2.3e9, "expires": time.time() + 2.3e9},
        {"ttl": -5.0},
        {"pid": "1; rm -rf /"},
    ],
    ids=[
        "expires-2100",
        "expires-infinity",
        "heartbeat-nan",
        "ttl-absurd",
        "ttl-negative",
        "pid-text",
    ],
)
def test_a_lease_with_absurd_numbers_is_corrupt_and_take_over_replaces_it_at_once(
    fields: dict[str, Any], workdir: Path, store_dir: Path, make_engine: Make
) -> None:
    foreign_lease(store_dir, **fields)
    engine = make_engine(workdir)
    status = engine.status()
    assert status["state"] == "error" and status["can_take_over"]
    assert "corrupt" in status["read_only_reason"]
    # Nothing in the answer is a number JSON cannot carry.
    json.dumps(status, allow_nan=False)
    engine.take_over()
    assert engine.writable, "a corrupt lease is replaced at once, not waited for"
    write(workdir, "a.txt", "saved")
    assert engine.sync().uploaded == ["a.txt"]
    assert engine.lease.current().holder == engine.lease.holder


def test_a_corrupt_lease_that_nobody_changes_is_replaced_by_itself(
    workdir: Path, store_dir: Path, make_engine: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_gpu_ws.store import lease as lease_module

    monkeypatch.setattr(lease_module, "MAX_TTL", 2.0)  # instead of an hour
    foreign_lease(store_dir, expires=float("inf"))
    engine = make_engine(workdir, lease_ttl=0.4)
    assert engine.read_only and "corrupt" in (engine.read_only_reason or "")
    elapsed_until(
        lambda: "replaced by itself" in (engine.status()["lease_error"] or ""),
        1.0,
        "the panel saying so",
    )
    elapsed_until(
        lambda: engine.writable, 5.0, "the corrupt lease replaced once unchanged for its bound"
    )
    write(workdir, "b.txt", "after the heal")
    assert engine.sync().uploaded == ["b.txt"]


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_lease_is_judged_on_this_machines_clock_whatever_times_it_states(
    where: str,
    workdir: Path,
    tmp_path: Path,
    store_dir: Path,
    make_engine: Make,
    request: pytest.FixtureRequest,
) -> None:
    """A lease whose stated expiry is long past (its writer's clock runs minutes behind) is not
    free while its record keeps changing; once it stops changing, it is free after its ttl as
    measured here, however far in the future its stated expiry is. On a local folder and on S3."""
    from jupyter_gpu_ws.sync import SyncSettings

    # Long enough that a renewal late by a loaded machine's second is still in time (with 0.8 s
    # the holder could be caught between a lapsed lease and its late renewal: not writable).
    ttl = 2.0
    url = str(store_dir) if where == "local" else request.getfixturevalue("s3_url")
    holder = make_engine(workdir, url, lease_ttl=ttl)
    holder.lease.clock = lambda: time.time() - 120  # its clock runs two minutes behind
    holder.keeper.wake()
    other = second_workdir(tmp_path)
    newcomer = SyncEngine(
        SyncSettings(
            workdir=str(other),
            store_url=url,
            workspace="ws",
            state_dir=str(tmp_path / "state2"),
            lease_ttl=ttl,
            host="fast-clock",
        ),
        clock=lambda: time.time() + 120,
    )  # two minutes ahead
    newcomer.open()
    try:
        time.sleep(4 * ttl)
        assert newcomer.read_only and not newcomer.lease.held, (
            "the newcomer took a live runtime's lease"
        )
        assert holder.lease.held and not holder.read_only  # still the holder's
        assert newcomer.status()["takeover_at"] is not None
        holder.keeper.stop()  # the holder dies: its record stops changing
        holder.lease.clock = lambda: (
            time.time() + 10**6
        )  # a stated expiry far in the future is ignored
        # Free a ttl after its record last changed (a quarter ttl at most before the stop), as
        # measured here: not at once, and long before the stated expiry (the wait's bound).
        taken = elapsed_until(lambda: newcomer.writable, 5 * ttl, "the newcomer taking over")
        assert taken >= 0.5 * ttl
    finally:
        newcomer.close()


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_successor_started_after_a_dead_lease_ran_out_by_the_stores_clock_writes_at_once(
    where: str,
    workdir: Path,
    tmp_path: Path,
    store_dir: Path,
    make_engine: Make,
    request: pytest.FixtureRequest,
) -> None:
    """A runtime killed, and its successor started later than the lease's lifetime: the store
    dates the lease's last write (its modification time against a file written just then), so
    the successor need not watch it for a whole lifetime of its own before writing. A lease still
    renewed is never free by that rule: its last write is always recent."""
    ttl = 2.0
    url = str(store_dir) if where == "local" else request.getfixturevalue("s3_url")
    holder = make_engine(workdir, url, lease_ttl=ttl)
    watcher = make_engine(second_workdir(tmp_path, "watcher"), url, "state3", lease_ttl=ttl)
    assert watcher.read_only  # a live holder's lease is recent by the store's clock too
    watcher.close()  # else it would take over itself, once the holder is gone
    holder.keeper.stop()  # the holder is killed: nothing renews its lease any more
    stopped = time.monotonic()
    # The passage of time is what is tested: the lease runs out by the store's clock (S3 dates
    # to the second, and SLACK more is taken off an age read there).
    time.sleep(ttl + 2 * 1.0 + 0.5)
    started = time.monotonic()
    successor = make_engine(second_workdir(tmp_path), url, "state2", lease_ttl=ttl, host="next")
    assert successor.writable and not successor.read_only, successor.read_only_reason
    assert time.monotonic() - started < ttl  # not a lifetime of its own
    assert started - stopped >= ttl


def test_a_holder_whose_clock_stands_still_still_renews(
    workdir: Path, tmp_path: Path, make_engine: Make
) -> None:
    """Each renewal counts up, so the record changes even when every time it states is the same."""
    ttl = 2.0  # a renewal late by a loaded machine's second is still in time
    holder = make_engine(workdir, lease_ttl=ttl)
    holder.lease.clock = lambda: 1_000_000.0
    second = make_engine(second_workdir(tmp_path), state="state2", lease_ttl=ttl, host="other")
    time.sleep(2.5 * ttl)  # past a lifetime: only the renewals' count kept it alive
    assert second.read_only and holder.lease.held and not holder.read_only


def test_a_released_lease_is_free_at_once(workdir: Path, tmp_path: Path, make_engine: Make) -> None:
    first = make_engine(workdir, lease_ttl=30.0)
    first.close()  # a clean stop gives the lease back
    started = time.monotonic()
    second = make_engine(second_workdir(tmp_path), state="state2", lease_ttl=30.0, host="next")
    assert second.writable and time.monotonic() - started < 5


# -- clocks that disagree, in processes of their own (libfaketime) ------------------------------

CHILD = Path(__file__).with_name("lease_child.py")


def faketime() -> str:
    path = shutil.which("faketime")
    if path is None:
        pytest.fail(
            "faketime is not installed (scripts/test.sh installs Debian's package)", pytrace=False
        )
    return path


@pytest.mark.parametrize("skew", ["+2m", "-2m"])
def test_a_newcomer_whose_clock_is_minutes_off_never_takes_a_live_runtimes_lease(
    skew: str, workdir: Path, tmp_path: Path, store_dir: Path, make_engine: Make
) -> None:
    ttl = 1.0
    holder = make_engine(workdir, lease_ttl=ttl)
    other = second_workdir(tmp_path)
    write(other, "mine.txt", "the newcomer's file")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    fields = {
        "workdir": str(other),
        "store_url": str(store_dir),
        "workspace": "ws",
        "state_dir": str(tmp_path / "state2"),
        "lease_ttl": ttl,
        "host": "skewed",
    }
    child = subprocess.run(
        [faketime(), "-f", skew, sys.executable, str(CHILD), json.dumps(fields), str(5 * ttl)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr
    said = child.stdout.split()
    assert said[0] == "clock-offset" and abs(abs(float(said[1])) - 120) < 5, (
        child.stdout
    )  # faketime took
    assert said[-1] == "read-only", child.stdout
    assert holder.lease.held and not holder.read_only
    assert "mine.txt" not in tree_files(store_dir / "ws" / "files")
    write(workdir, "still.txt", "the live runtime goes on")
    assert holder.sync().uploaded == ["still.txt"]


@pytest.mark.parametrize("skew", ["+2m", "-2m"])
def test_a_dead_runtime_whose_clock_was_minutes_off_is_taken_over_after_its_ttl(
    skew: str, workdir: Path, tmp_path: Path, store_dir: Path
) -> None:
    from jupyter_gpu_ws.sync import SyncSettings

    ttl = 1.0
    other = second_workdir(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    fields = {
        "workdir": str(other),
        "store_url": str(store_dir),
        "workspace": "ws",
        "state_dir": str(tmp_path / "state2"),
        "lease_ttl": ttl,
        "host": "skewed",
    }
    child = subprocess.Popen(
        [faketime(), "-f", skew, sys.executable, str(CHILD), json.dumps(fields), "60"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        # faketime runs the runtime as its child: killing faketime alone would leave the runtime
        # alive (and renewing its lease) for its 60 s. The whole group is killed instead.
        start_new_session=True,
    )

    def kill() -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(10)

    try:
        assert child.stdout is not None
        assert child.stdout.readline().startswith("clock-offset")
        assert child.stdout.readline().strip() == "writable"  # it holds the lease
        engine = SyncEngine(
            SyncSettings(
                workdir=str(workdir),
                store_url=str(store_dir),
                workspace="ws",
                state_dir=str(tmp_path / "state"),
                lease_ttl=ttl,
            )
        )
        engine.open()
        try:
            assert engine.read_only
            kill()
            killed = time.monotonic()
            elapsed_until(lambda: engine.writable, 10 * ttl, "the successor taking over")
            assert time.monotonic() - killed <= ttl + 1.0
        finally:
            engine.close()
    finally:
        kill()


def test_412s_to_this_runtimes_own_lease_writes_say_so_and_never_lose_the_lease(
    workdir: Path, make_engine: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A proxy (or store) that answers 412 to every conditional write, the lease still ours.
    from jupyter_gpu_ws.store.backend import PreconditionFailed

    engine = make_engine(workdir, lease_ttl=30.0)
    assert engine.lease.held
    backend = engine.store.backend

    def refused(key: str, data: bytes, tag: str | None) -> str:
        raise PreconditionFailed(key)

    monkeypatch.setattr(backend, "write_if", refused)
    with pytest.raises(StoreUnavailableError, match="412 Precondition Failed") as caught:
        engine.lease.renew()
    assert "Another runtime" not in str(caught.value)
    assert engine.lease.held  # not taken for lost: the store misbehaves, nobody took it
    monkeypatch.undo()
    engine.lease.renew()  # once the store behaves, the renewals go on
    assert engine.lease.held and not engine.read_only
