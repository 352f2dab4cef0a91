"""A job's run as the Checkpoints view (GET /gpuws/api/checkpoints) lists it, on the runtime that
started the job and on its successor after a kill -9 (issue 45): one plain process, the job's,
named with the job, with the checkpoints its run folder holds, those the successor restored
from the store included. Real servers as two machines (UTS namespaces of their own) on one
local store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws import apischema
from jupyter_gpu_ws.checkpoints.files import complete_checkpoints
from tests.servers import ServerProcess, server_process
from tests.test_successor import kill_everything
from tests.userjobs.jobfiles import TRAIN, write
from tests.userjobs.test_record_truth import store, stored  # noqa: F401 - `store`: a fixture
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

# Slow steps and no periodic checkpoint (every 10⁶ steps): the only checkpoint is the one asked.
COMMAND = ["python", "train.py", "100000", "0.05", "1000000"]
LEASE_TTL = 20.0  # long enough to look at the job's run while the successor waits for it


def job_run(server: ServerProcess, job_id: str) -> dict[str, Any] | None:
    """The job's run as GET /gpuws/api/checkpoints lists it (the answer checked against the API's
    description), or None."""
    answer = server.api("/gpuws/api/checkpoints")
    apischema._validator("#/components/schemas/CheckpointKernels").validate(answer)
    found = [run for run in answer["runs"] if run.get("job") == job_id]
    assert len(found) <= 1, found  # one card per job's run
    return found[0] if found else None


def newest_in_store(folder: Path, run: str) -> dict[str, Any] | None:
    """The manifest of the newest complete checkpoint of `run` that the store `folder` holds."""
    found = complete_checkpoints(folder / "test-ws" / "files" / ".gpuws" / "checkpoints" / run)
    return found[-1][1] if found else None


def test_a_jobs_run_is_listed_as_the_jobs_one_process_with_its_stored_checkpoint_on_the_successor(
    tmp_path: Path,
    store: Path,  # noqa: F811 - the fixture imported above
) -> None:
    config = {"store_url": str(store), "lease_ttl": LEASE_TTL, "sync_debounce": 0.05}
    with server_process(tmp_path / "a", tmp_path / "runtime-a", config, hostname="machine-a") as a:
        write(a.root, "train.py", TRAIN)
        until(lambda: a.api("/gpuws/api/sync")["state"] == "idle", 60, "the script in the store")
        job = a.api("/gpuws/api/jobs", "POST", {"command": COMMAND, "name": "trainer"})
        run = until(
            lambda: (r := job_run(a, job["id"])) and r["live"] and r["objects"] and r,
            90,
            "the job's run registered",
        )
        # One plain process, the job's: no torchrun, rank 0 alone, no checkpoint yet.
        assert run["kind"] == "process" and run["job_name"] == "trainer", run
        assert run["world_size"] == 1 and [r["rank"] for r in run["ranks"]] == [0], run
        assert run["checkpoints"] == [] and run["last"] is None, run
        # The stored record names the run (written with the running step, at a bounded rate):
        # the successor knows the job's run before it relaunches it.
        until(
            lambda: stored(store, job["id"])["run"] == run["run"],
            60,
            "the job's run in its stored record",
        )
        a.api("/gpuws/api/checkpoints", "POST", {"run_id": run["run_id"]})
        saved = until(
            lambda: (
                (r := job_run(a, job["id"]))
                and r["checkpoints"]
                and r["checkpoints"][0]["synced"]
                and r["checkpoints"][0]
            ),
            60,
            "the asked checkpoint listed as in the store",
        )
        in_store = newest_in_store(store, run["run"])
        assert in_store is not None and (in_store["step"], in_store["bytes"]) == (
            saved["step"],
            saved["bytes"],
        )
        assert saved["world_size"] == 1 and saved["bytes_per_rank"] == [saved["bytes"]]
        kill_everything(a)

    with server_process(tmp_path / "b", tmp_path / "runtime-b", config, hostname="machine-b") as b:
        # While the dead runtime's lease runs out: the job's run, not running here, with the
        # checkpoint restored from the store.
        waiting = until(
            lambda: (r := job_run(b, job["id"])) and not r["live"] and r["checkpoints"] and r,
            60,
            "the job's run listed on the successor before its relaunch",
        )
        assert waiting["kind"] == "process", waiting
        assert (waiting["run"], waiting["job_name"]) == (run["run"], "trainer")
        assert waiting["checkpoints"][0]["step"] == saved["step"], waiting
        # Relaunched: the same run, live again, its newest checkpoint the stored one.
        live = until(
            lambda: (r := job_run(b, job["id"])) and r["live"] and r,
            120,
            "the job's run registered on the successor",
        )
        assert live["kind"] == "process" and live["job_name"] == "trainer", live
        assert live["world_size"] == 1 and [r["rank"] for r in live["ranks"]] == [0], live
        newest = live["checkpoints"][0]
        assert (newest["step"], newest["bytes"]) == (saved["step"], saved["bytes"]), live
        assert newest["synced"] is True and Path(newest["path"]).is_relative_to(b.root), newest
        b.api(f"/gpuws/api/jobs/{job['id']}", "DELETE")
