"""A distributed job relaunched on the GPUs there are: a `torchrun` job asked with 2 GPUs runs 2
ranks on a runtime with 2 (simulated) GPUs, is killed with kill -9, runtime and all, after a
checkpoint reached the store, and the successor, with 1 GPU, relaunches it with 1 process,
which resumes at the saved step from the 2-rank checkpoint (resharded) and finishes. Real
servers as two machines on one local-folder store, real torchrun on CPU (gloo); the GPUs are the
monitor's NVML test double (c.GpuWorkspace.nvml_test_double), which is how a server learns its
GPU count."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.checkpoints.torchrun import SCRIPT
from tests.conftest import gpu_spec, write_spec
from tests.servers import server_process
from tests.test_successor import kill_everything
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

STEPS = 80
LEASE_TTL = 5.0


def stored_checkpoints(store: Path, workspace: str) -> dict[int, Path]:
    """Step → the checkpoint's folder in the store, for those whose manifest is there."""
    folder = store / workspace / "files" / ".gpuws" / "checkpoints" / "dist-run"
    if not folder.is_dir():
        return {}
    return {
        int(p.name.split("-")[1]): p
        for p in sorted(folder.iterdir())
        if p.name.startswith("ckpt-") and (p / "manifest.json").is_file()
    }


def job_of(server: Any, job_id: str) -> dict[str, Any]:
    return server.api(f"/gpuws/api/jobs/{job_id}")


def test_a_torchrun_job_on_two_gpus_relaunches_on_the_one_gpu_the_successor_has_from_its_resharded_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("unshare") is None:
        pytest.fail("`unshare` (util-linux) is needed to run servers as other hosts", pytrace=False)
    monkeypatch.setenv("GPUWS_JOB_KEY", "the-same-user-on-both-machines-0123456789")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    store = tmp_path / "store"
    two = write_spec(tmp_path / "two-gpus.json", gpu_spec())
    one = write_spec(tmp_path / "one-gpu.json", gpu_spec(gpus=gpu_spec()["gpus"][:1]))
    config = {
        "store_url": str(store),
        "workspace": "",
        "sync_debounce": 0.05,
        "lease_ttl": LEASE_TTL,
        "checkpoint_timeout": 10.0,
        "sample_interval": 0.2,
    }
    # Paths relative to the job's folder: the successor's work directory is elsewhere. The local
    # address: the servers' host names (machine-a, machine-b) resolve nowhere, and the rendezvous
    # would wait on them.
    command = [
        "python",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "--monitor-interval=0.2",
        "--local-addr=127.0.0.1",
        "dist_run.py",
        "--parallel",
        "ddp",
        "--steps",
        str(STEPS),
        "--every",
        "5",
        "--sleep",
        "0.25",
        "--root",
        ".gpuws/checkpoints",
        "--out",
        "out",
    ]

    first_root = tmp_path / "machine-a" / "home" / "project"
    with server_process(
        tmp_path / "a",
        tmp_path / "runtime-a",
        {**config, "nvml_test_double": str(two)},
        root=first_root,
        hostname="machine-a",
    ) as a:
        workspace = until(
            lambda: a.api("/gpuws/api/sync").get("workspace"), 60, "the first server's engine"
        )
        until(
            lambda: a.api("/gpuws/api/sync")["state"] not in ("starting",),
            60,
            "the first server's sync",
        )
        until(
            lambda: len(a.api("/gpuws/api/metrics")["gpus"]) == 2, 60, "the first server's 2 GPUs"
        )
        shutil.copy(SCRIPT, first_root / "dist_run.py")
        job = a.api("/gpuws/api/jobs", "POST", {"command": command, "name": "ddp", "gpus": 2})
        until(
            lambda: max(stored_checkpoints(store, workspace), default=0) >= 10,
            180,
            "a checkpoint of the 2 ranks in the store",
        )
        on_two = job_of(a, job["id"])
        assert on_two["state"] == "running" and on_two["attempts"][0]["runs_on"] is None, on_two
        kill_everything(a)
    saved, folder = max(stored_checkpoints(store, workspace).items())
    assert saved < STEPS - 1, "the job finished before the kill: make it slower"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["world_size"] == 2, manifest

    second_root = tmp_path / "machine-b" / "srv" / "work" / "project"
    with server_process(
        tmp_path / "b",
        tmp_path / "runtime-b",
        {**config, "nvml_test_double": str(one)},
        root=second_root,
        hostname="machine-b",
    ) as b:
        relaunched = until(  # the attempt is listed as it starts, then says what it runs on
            lambda: (
                (j := job_of(b, job["id"]))["attempts"][-1]["host"] == "machine-b"
                and j["attempts"][-1]["runs_on"]
                and j
            ),
            180,
            "the job relaunched on the successor",
        )
        assert relaunched["attempts"][-1]["runs_on"] == (
            "relaunched on 1 GPU of the 2 asked: "
            "python -m torch.distributed.run --standalone --nproc-per-node 1"
        ), relaunched
        assert relaunched["command"] == command  # the record keeps what the user asked
        finished = until(
            lambda: (j := job_of(b, job["id"]))["state"] in ("finished", "failed") and j,
            300,
            "the relaunched job's end",
        )
        assert finished["state"] == "finished", finished
        log = b.api(f"/gpuws/api/jobs/{job['id']}/log?lines=2000")["lines"]
        # The log goes on from the first runtime's lines: the relaunch's start is the one process.
        resumed = log.index(f"rank 0 of 1 starts at step {saved + 1}")
        assert any("rank 1 of 2 starts at step 0" in line for line in log[:resumed]), log
        assert not any(" starts at step " in line for line in log[resumed + 1 :]), log
    # The one rank ran every step after the checkpoint to the end.
    steps = [
        json.loads(line)["step"]
        for line in (second_root / "out" / "losses-0.jsonl").read_text().splitlines()
    ]
    assert steps[-(STEPS - saved - 1) :] == list(range(saved + 1, STEPS)), steps[-5:]
    assert (second_root / "out" / "final-0.pt").is_file() and not (
        second_root / "out" / "final-1.pt"
    ).exists()
