"""A `torchrun` job: its ranks register as one run, the job shows its step, and a stop asks every
rank for a checkpoint first (real server, real torchrun on gloo, CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checkpoints.torchrun import SCRIPT
from tests.servers import server_process
from tests.userjobs.jobfiles import job_key
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)


def test_a_torchrun_job_is_one_run_with_its_step_and_checkpoints_on_every_rank_before_it_stops(
    tmp_path: Path,
) -> None:
    if not SCRIPT.is_file():
        pytest.fail(f"{SCRIPT} is missing", pytrace=False)
    with (
        job_key("torchrun-test-key-long-enough-0123456789"),
        server_process(tmp_path / "a", tmp_path / "runtime", {}) as server,
    ):
        until(lambda: server.api("/gpuws/api/sync")["state"] not in ("starting",), 60, "the sync")
        root = server.root / ".gpuws" / "checkpoints"
        command = [
            "python",
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            "--monitor-interval=0.2",
            str(SCRIPT),
            "--parallel",
            "ddp",
            "--steps",
            "100000",
            "--sleep",
            "0.1",
            "--root",
            str(root),
            "--out",
            str(tmp_path / "out"),
            "--no-resume",
        ]
        job = server.api("/gpuws/api/jobs", "POST", {"command": command, "name": "ddp"})
        try:
            stepping = until(
                lambda: ((j := server.api(f"/gpuws/api/jobs/{job['id']}"))["step"] or 0) >= 3 and j,
                180,
                "the job's run stepping",
            )
            assert stepping["run"] == "dist-run" and stepping["state"] == "running"
            server.api(f"/gpuws/api/jobs/{job['id']}", "DELETE")
            stopped = server.api(f"/gpuws/api/jobs/{job['id']}")
            assert stopped["state"] == "stopped" and stopped["reason"].startswith(
                "stopped by you at step "
            )
            saved = sorted((root / "dist-run").glob("ckpt-*/manifest.json"))
            assert saved, "no checkpoint taken before the stop"
            # The ranks save again on the SIGTERM that follows (distributed.py): the newest may be later.
            steps = [int(p.parent.name.split("-")[1]) for p in saved]
            assert stopped["step"] >= 3 and any(3 <= step <= stopped["step"] for step in steps), (
                steps,
                stopped,
            )
        finally:  # the job runs in a session of its own: the server's kill at the end would miss it
            if server.api(f"/gpuws/api/jobs/{job['id']}")["state"] == "running":
                server.api(f"/gpuws/api/jobs/{job['id']}", "DELETE")
