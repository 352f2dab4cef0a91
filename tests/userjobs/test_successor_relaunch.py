"""A job outlives its runtime: two real servers on one local-folder store, as two machines
(other host names, other work-directory paths). The first runs `python train.py` as a job and
is killed with kill -9, job and all, after a checkpoint reached the store; the second relaunches
the job by itself, it resumes at the saved step, finishes, and every step's loss equals an
uninterrupted run's, bit for bit. And a SIGTERM stops a job at its checkpoint, recorded
interrupted in the store before the server exits."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.servers import ServerProcess, server_process
from tests.test_emergency import FakeMetadata
from tests.test_successor import kill_everything
from tests.userjobs.jobfiles import TRAIN, losses, write
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

STEPS = 60
LEASE_TTL = 5.0


@pytest.fixture
def shared_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if shutil.which("unshare") is None:
        pytest.fail("`unshare` (util-linux) is needed to run servers as other hosts", pytrace=False)
    monkeypatch.setenv("GPUWS_JOB_KEY", "the-same-user-on-both-machines-0123456789")
    return tmp_path / "store"


def stored_record(store: Path, workspace: str, job_id: str) -> dict[str, Any]:
    path = store / workspace / ".gpuws" / "jobs" / f"{job_id}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def stored_when(store: Path, workspace: str, job_id: str, state: str) -> dict[str, Any]:
    """The job's record in the store once it says `state`: the server answers from its own copy
    first, and writes the store's just after."""
    return until(
        lambda: (r := stored_record(store, workspace, job_id)).get("state") == state and r,
        30,
        f"the store's record of {job_id} {state}",
    )


def stored_checkpoint_steps(store: Path, workspace: str) -> list[int]:
    """The steps of the complete checkpoints in the store of its one run (each test runs one
    job, whose run is named after it)."""
    folder = store / workspace / "files" / ".gpuws" / "checkpoints"
    return sorted(
        int(p.name.split("-")[1])
        for p in folder.glob("*/ckpt-*")
        if not p.parent.name.startswith(".") and (p / "manifest.json").is_file()
    )


def stored_losses(store: Path, workspace: str) -> dict[int, str]:
    path = store / workspace / "files" / "losses.txt"
    try:
        return losses(path)
    except (OSError, ValueError):
        return {}


def uninterrupted(folder: Path) -> dict[int, str]:
    """The same script run start to end, with no server and no job."""
    folder.mkdir()
    write(folder, "train.py", TRAIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUWS_")}
    env["GPUWS_WORKDIR"] = str(folder)
    subprocess.run(
        [sys.executable, "train.py", str(STEPS), "0"],
        cwd=folder,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return losses(folder / "losses.txt")


def job_of(server: ServerProcess, job_id: str) -> dict[str, Any]:
    return server.api(f"/gpuws/api/jobs/{job_id}")


def test_a_job_killed_with_its_runtime_is_relaunched_by_the_successor_and_ends_as_if_uninterrupted(
    tmp_path: Path, shared_store: Path
) -> None:
    config = {
        "store_url": str(shared_store),
        "workspace": "",
        "sync_debounce": 0.05,
        "lease_ttl": LEASE_TTL,
        "checkpoint_timeout": 10.0,
    }
    first_root = tmp_path / "machine-a" / "home" / "project"
    with server_process(
        tmp_path / "a", tmp_path / "runtime-a", config, root=first_root, hostname="machine-a"
    ) as a:
        workspace = until(
            lambda: a.api("/gpuws/api/sync").get("workspace"), 60, "the first server's engine"
        )
        until(
            lambda: a.api("/gpuws/api/sync")["state"] not in ("starting",),
            60,
            "the first server's sync",
        )
        write(first_root, "train.py", TRAIN)
        job = a.api(
            "/gpuws/api/jobs",
            "POST",
            {"command": ["python", "train.py", str(STEPS), "0.25"], "name": "train"},
        )
        assert job["state"] == "running" and job["id"].startswith("j-")

        def checkpoint_and_losses_stored() -> bool:
            steps = stored_checkpoint_steps(shared_store, workspace)
            return (
                bool(steps)
                and steps[-1] >= 10
                and max(stored_losses(shared_store, workspace), default=-1) >= steps[-1]
            )

        until(
            checkpoint_and_losses_stored, 120, "a checkpoint and the losses up to it in the store"
        )
        assert stored_record(shared_store, workspace, job["id"])["state"] == "running"
        kill_everything(a)
    saved = stored_checkpoint_steps(shared_store, workspace)[-1]
    assert saved < STEPS - 1, "the job finished before the kill: make it slower"

    second_root = (
        tmp_path / "machine-b" / "srv" / "work" / "project"
    )  # another path, same folder name
    started = time.time()
    with server_process(
        tmp_path / "b", tmp_path / "runtime-b", config, root=second_root, hostname="machine-b"
    ) as b:
        relaunched = until(
            lambda: (j := job_of(b, job["id"]))["attempts"][-1]["host"] == "machine-b" and j,
            120,
            "the job relaunched on the successor",
        )
        print(
            f"relaunched {relaunched['attempts'][-1]['started'] - started:.1f} s after the successor's start "
            f"(lease_ttl {LEASE_TTL:.0f} s: the dead lease must run out first)"
        )
        assert relaunched["state"] in ("relaunched", "finished"), relaunched
        finished = until(
            lambda: (j := job_of(b, job["id"]))["state"] in ("finished", "failed") and j,
            240,
            "the relaunched job's end",
        )
        assert finished["state"] == "finished", finished
        log = b.api(f"/gpuws/api/jobs/{job['id']}/log?lines=1000")["lines"]
        assert f"resumed {saved + 1}" in log, log
        assert [a["host"] for a in finished["attempts"]] == ["machine-a", "machine-b"]
        stored_when(shared_store, workspace, job["id"], "finished")
        resumed = losses(second_root / "losses.txt")
    assert resumed == uninterrupted(tmp_path / "reference")


def stepping_job(server: Any) -> dict[str, Any]:
    """A long job started on `server` once its sync is up, returned once it has taken 3 steps
    (its run is registered: a checkpoint request reaches it)."""
    until(lambda: server.api("/gpuws/api/sync")["state"] not in ("starting",), 60, "the sync")
    write(server.root, "train.py", TRAIN)
    job = server.api(
        "/gpuws/api/jobs", "POST", {"command": ["python", "train.py", "100000", "0.05", "1000000"]}
    )
    assert job["state"] == "running"
    until(lambda: (job_of(server, job["id"])["step"] or 0) >= 3, 120, "the job stepping")
    return job


def test_sigterm_stops_a_job_at_its_checkpoint_and_records_it_interrupted_in_the_store(
    tmp_path: Path, shared_store: Path
) -> None:
    config = {
        "store_url": str(shared_store),
        "sync_debounce": 0.05,
        "checkpoint_timeout": 10.0,
        "grace_period": 20.0,
    }
    with server_process(tmp_path / "a", tmp_path / "runtime-a", config) as a:
        job = stepping_job(a)  # no checkpoint but the one the SIGTERM's persist asks for
        assert stored_checkpoint_steps(shared_store, "test-ws") == []
        a.proc.send_signal(signal.SIGTERM)
        a.proc.wait(60)
        record = stored_record(shared_store, "test-ws", job["id"])
    assert record["state"] == "interrupted", record
    step = record["step"]
    assert (
        step is not None
        and step >= 3
        and f"stopped for the runtime's end at step {step:,}" in record["reason"]
    )
    [checkpoint] = stored_checkpoint_steps(shared_store, "test-ws")
    assert 3 <= checkpoint <= step and record["reason"].endswith(
        f"resumes from its checkpoint at step {checkpoint:,}"
    )


def test_the_deadlines_persist_stops_a_running_job_at_its_checkpoint_for_the_next_runtime(
    tmp_path: Path, shared_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The deadline comes from a file (GPUWS_DEADLINE_FILE) written once the job steps, so a slow
    # start cannot let the automatic persist come before the job's run is there to be asked.
    deadline_file = tmp_path / "deadline"
    monkeypatch.setenv("GPUWS_DEADLINE_FILE", str(deadline_file))
    config = {
        "store_url": str(shared_store),
        "sync_debounce": 0.05,
        "checkpoint_timeout": 10.0,
        "persist_lead_time": 45.0,
    }
    with server_process(tmp_path / "a", tmp_path / "runtime-a", config) as a:
        job = stepping_job(a)
        deadline_file.write_text(str(time.time() + 50))  # the automatic persist: about 5 s from now
        stopped = until(
            lambda: (j := job_of(a, job["id"]))["state"] == "interrupted" and j,
            90,
            "the job stopped by the deadline's persist",
        )
        assert (
            stopped["relaunch"]
            == "the next runtime on this store relaunches it from its checkpoint"
        )
        assert (
            a.api("/gpuws/api/jobs")["relaunch"]["pending"] == []
        )  # not this runtime's to relaunch
        # The notice follows once every job has stopped (the record says so a moment before).
        until(
            lambda: any(
                "1 job stopped at a checkpoint" in n["message"]
                for n in a.api("/gpuws/api/runtime")["notices"]
            ),
            30,
            "the notice of the stopped job",
        )
        record = stored_record(shared_store, "test-ws", job["id"])
    assert (
        record["state"] == "interrupted"
        and "resumes from its checkpoint at step" in record["reason"]
    )
    assert stored_checkpoint_steps(shared_store, "test-ws")


def test_a_preemption_notice_stops_a_running_job_at_its_checkpoint_for_the_next_runtime(
    tmp_path: Path, shared_store: Path, metadata: str
) -> None:
    config = {
        "store_url": str(shared_store),
        "sync_debounce": 0.05,
        "checkpoint_timeout": 10.0,
        "preemption_clouds": ["gcp"],
        "gcp_metadata_url": metadata,
        "preemption_poll_interval": 0.2,
    }
    with server_process(tmp_path / "a", tmp_path / "runtime-a", config) as a:
        job = stepping_job(a)
        FakeMetadata.preempted = True
        until(
            lambda: job_of(a, job["id"])["state"] == "interrupted",
            60,
            "the job stopped by the notice",
        )
        record = stored_when(shared_store, "test-ws", job["id"], "interrupted")
    assert (
        record["state"] == "interrupted"
        and "resumes from its checkpoint at step" in record["reason"]
    )
    assert stored_checkpoint_steps(shared_store, "test-ws")
