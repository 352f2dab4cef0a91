"""What a job's record says is what happened (issue 45): the running step in the stored record,
an attempt killed with its runtime recorded as interrupted at its step, a finished job at its
loop's last step; and a successor that relaunches at the checkpoint's pace: at once when the
dead runtime's lease ran out before it started (by the store's clock), and, while it waits,
the job listed with when it comes back and whose runtime went silent. Real servers as two
machines (UTS namespaces of their own) on one local store, the first killed with kill -9."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.userjobs import trust
from tests.servers import server_process
from tests.test_successor import kill_everything
from tests.userjobs.jobfiles import TRAIN, write
from tests.userjobs.test_jobs_api import KEY, ended
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if shutil.which("unshare") is None:
        pytest.fail("`unshare` (util-linux) is needed to run servers as other hosts", pytrace=False)
    monkeypatch.setenv(trust.KEY_ENV, KEY)
    return tmp_path / "store"


def config(store: Path, lease_ttl: float) -> dict[str, Any]:
    return {
        "store_url": str(store),
        "lease_ttl": lease_ttl,
        "sync_debounce": 0.05,
        "job_stop_grace": 2.0,
    }


def stored(store: Path, job_id: str) -> dict[str, Any]:
    return json.loads((store / "test-ws" / ".gpuws" / "jobs" / f"{job_id}.json").read_bytes())


def training_killed_at_a_step(tmp_path: Path, store: Path, lease_ttl: float) -> tuple[str, int]:
    """Machine A runs a slow training job until its stored record carries a step, and is then
    killed with kill -9, job and all: the job's id and the step its record holds."""
    with server_process(
        tmp_path / "a", tmp_path / "runtime-a", config(store, lease_ttl), hostname="machine-a"
    ) as a:
        write(a.root, "train.py", TRAIN)
        until(lambda: a.api("/gpuws/api/sync")["state"] == "idle", 60, "the script in the store")
        job = a.api(
            "/gpuws/api/jobs", "POST", {"command": ["python", "train.py", "100000", "0.02", "50"]}
        )
        # The record, written while the job runs, carries its step (at a bounded rate).
        record = until(
            lambda: (r := stored(store, job["id"]))["step"] is not None and r["step"] > 10 and r,
            90,
            "the running step in the stored record",
        )
        assert record["state"] == "running" and record["attempts"][0]["ended"] is None
        kill_everything(a)
    return job["id"], stored(store, job["id"])["step"]


def test_a_kill_9_leaves_the_attempt_recorded_as_interrupted_at_its_step_and_the_successor_says_when_it_relaunches(
    tmp_path: Path, store: Path
) -> None:
    job_id, step = training_killed_at_a_step(tmp_path, store, lease_ttl=20.0)
    with server_process(
        tmp_path / "b", tmp_path / "runtime-b", config(store, 20.0), hostname="machine-b"
    ) as b:
        # While the dead runtime's lease runs out, the job is listed as coming back here, with
        # the name of the machine that went silent.
        waiting = until(
            lambda: (
                "will be relaunched here"
                in ((j := b.api(f"/gpuws/api/jobs/{job_id}"))["relaunch"] or "")
                and j
            ),
            60,
            "the job listed as relaunched here",
        )
        assert waiting["state"] == "running" and waiting["attempts"][0]["host"] == "machine-a"
        assert "its runtime on machine-a has not renewed its lease for" in waiting["relaunch"]
        relaunched = until(
            lambda: len((j := b.api(f"/gpuws/api/jobs/{job_id}"))["attempts"]) == 2 and j,
            120,
            "the relaunch",
        )
        first, second = relaunched["attempts"]
        # At the step its record held, or its run's newest checkpoint where that is further on.
        assert first["step"] >= step and first["ended"] is not None
        words = f"interrupted at step {first['step']:,}: its runtime ended without stopping it"
        assert first["reason"] == words
        assert second["host"] == "machine-b" and second["ended"] is None
        assert relaunched["reason"] == f"relaunched after: {words}"
        b.api(f"/gpuws/api/jobs/{job_id}", "DELETE")


def test_a_successor_started_after_the_dead_lease_ran_out_relaunches_without_waiting_a_lease_time(
    tmp_path: Path, store: Path
) -> None:
    ttl = 8.0
    job_id, _ = training_killed_at_a_step(tmp_path, store, lease_ttl=ttl)
    lease = store / "test-ws" / ".gpuws" / "lease.json"
    # The passage of time is what is tested: the dead lease runs out by the store's clock (its
    # file's modification time), with a second's room for the store's rounding.
    time.sleep(max(0.0, lease.stat().st_mtime + ttl + 2.0 - time.time()))
    with server_process(
        tmp_path / "b", tmp_path / "runtime-b", config(store, ttl), hostname="machine-b"
    ) as b:
        relaunched = until(
            lambda: len((j := b.api(f"/gpuws/api/jobs/{job_id}"))["attempts"]) == 2 and j,
            120,
            "the relaunch",
        )
        assert relaunched["attempts"][1]["host"] == "machine-b"
        # It never waited for the lease: it was the writer from its first look.
        assert "Another runtime is writing this workspace" not in b.log.read_text()
        b.api(f"/gpuws/api/jobs/{job_id}", "DELETE")


def test_a_finished_jobs_step_is_its_loops_last(tmp_path: Path, store: Path) -> None:
    with server_process(tmp_path / "a", tmp_path / "runtime-a", config(store, 20.0)) as a:
        jobs = []
        for n in (300, 3000):  # two scripts: two runs, whatever names a job's run
            write(a.root, f"train{n}.py", TRAIN)
            # A checkpoint every 100 steps (its last step one, as with every 5), not 600 of them.
            command = ["python", f"train{n}.py", str(n), "0", "100"]
            jobs.append(a.api("/gpuws/api/jobs", "POST", {"command": command}))
        for job, total in zip(jobs, (300, 3000), strict=True):
            done = ended(a, job["id"], 180)
            assert done["state"] == "finished", done
            assert done["step"] == total - 1 and done["attempts"][0]["step"] == total - 1
            # The store's copy follows the answer (written just after): its last, in the end.
            last = until(
                lambda: (r := stored(store, job["id"]))["state"] == "finished" and r,  # noqa: B023
                30,
                "the finished record in the store",
            )
            assert last["step"] == total - 1


def test_a_job_is_not_answered_as_missing_while_the_records_are_read(tmp_path: Path) -> None:
    """Before the store's records are read, asking for a job that may be one of them is a 503
    that says so, never 'No job'."""
    from jupyter_gpu_ws.userjobs.manager import JobManager, JobSettings, JobsNotRead

    class Unread:
        def why_not_writable(self) -> str | None:
            return "the store is not open yet"

        def write(self, job_id: str, record: dict[str, Any]) -> None:
            raise AssertionError("nothing is written")

        def read_all(self) -> list[tuple[str, Any, str | None]]:
            return []

        def delete(self, job_id: str) -> None:
            raise AssertionError("nothing is deleted")

        def writer_gone(self) -> tuple[str, float, float] | None:
            return None

    manager = JobManager(
        JobSettings(workdir=tmp_path, workspace="ws", host="here", runtime_id="r-1"), Unread()
    )
    with pytest.raises(JobsNotRead, match="still being read"):
        manager.get("j-0123456789ab")
    assert "still being read" in manager.list()["error"]  # an empty list is not all there is
    assert manager.load()
    assert manager.list()["error"] is None
    with pytest.raises(LookupError, match="^No job 'j-0123456789ab'$"):
        manager.get("j-0123456789ab")
