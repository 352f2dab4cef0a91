"""A `torchrun` started from the server (as from a Jupyter terminal: it inherits the server's
environment) is one run in the API, and a request through the API, or Persist now, reaches
every rank at the same step while it trains (real server, real torchrun on gloo)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_gpu_ws.checkpoints.files import read_manifest
from tests.test_sync_api import finished, get, sync_running
from tests.waiting import async_until

from .torchrun import Run, losses

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)


async def the_run(jp_fetch: Any, live: bool = True) -> dict[str, Any]:
    async def found() -> Any:
        runs = (await get(jp_fetch, "checkpoints"))["runs"]
        matching = [r for r in runs if r["live"] is live and r["run"] == "train.py"]
        return matching[0] if matching and (not live or len(matching[0]["ranks"]) == 2) else None

    return await async_until(found, timeout=120)


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
async def test_a_torchrun_from_the_server_is_one_run_and_checkpoints_when_asked(
    jp_fetch: Any, gpuws_app: Any, tmp_path: Path, parallel: str
) -> None:
    await sync_running(jp_fetch)
    root = Path(gpuws_app.workdir) / ".gpuws" / "checkpoints"
    out = tmp_path / "out"
    with Run(
        2,
        "--parallel",
        parallel,
        "--name",
        "train.py",
        "--steps",
        "100000",
        "--sleep",
        "0.02",
        "--no-resume",
        "--root",
        str(root),
        "--out",
        str(out),
        log=tmp_path / "log",
    ):
        run = await the_run(jp_fetch)
        assert run["world_size"] == 2 and [r["rank"] for r in run["ranks"]] == [0, 1]
        assert run["mesh"]["parallelism"] == ("sharded" if parallel == "fsdp" else "replicated")
        assert set(run["objects"]) == {"model", "optimizer", "scheduler", "progress"}
        assert run["last"] is None and run["checkpoints"] == []

        async def training() -> bool:
            return len(losses(out, 0)) > 3

        await async_until(training, timeout=60)

        response = await jp_fetch(
            "gpuws", "api", "checkpoints", method="POST", body=json.dumps({"run_id": run["run_id"]})
        )
        assert response.code == 202
        [request] = json.loads(response.body)["requests"]
        assert request["run_id"] == run["run_id"] and request["state"] in ("accepted", "done")

        async def saved() -> Any:
            now = await the_run(jp_fetch)
            return now if (now["last"] or {}).get("request_id") == request["request_id"] else None

        run = await saved() or await async_until(saved, timeout=60)
        manifest = read_manifest(Path(run["last"]["path"]))
        assert manifest is not None and manifest["request_id"] == request["request_id"]
        assert manifest["world_size"] == 2 and [r["rank"] for r in manifest["ranks"]] == [0, 1]
        assert [r["step"] for r in manifest["ranks"]] == [
            manifest["step"]
        ] * 2  # the same step on every rank
        newest = run["checkpoints"][0]
        assert newest["step"] == manifest["step"] and len(newest["bytes_per_rank"]) == 2
        assert all(n > 0 for n in newest["bytes_per_rank"])
        # The test server reads two simulated GPUs.
        assert run["resumable"]["message"] == "saved on 2 ranks: loads on the 2 GPUs here"

        # Each rank reports its own end of the save: one may still say "written" the moment
        # rank 0's manifest is in (failed once in CI that way); every rank ends "done".
        async def ranks_done() -> Any:
            now = await the_run(jp_fetch)
            return now if {r["phase"] for r in now["ranks"]} == {"done"} else None

        assert await ranks_done() or await async_until(ranks_done, timeout=30)

        # Persist now asks the run too, and carries its checkpoint to the store.
        job = json.loads(
            (await jp_fetch("gpuws", "api", "persist", method="POST", body=b"{}")).body
        )
        job = await finished(jp_fetch, "persist", job["id"])
        assert job["state"] == "done", job
        steps = {s["name"]: s for s in job["steps"]}
        assert (
            steps["checkpoints"]["detail"] == "0 of 0 kernels checkpointed, 1 of 1 distributed runs"
        )
        run = await the_run(jp_fetch)
        assert (
            run["checkpoints"][0]["step"] > manifest["step"]
            and run["checkpoints"][0]["synced"] is True
        )

    # Killed: its ranks' registrations go, and the run stays listed with its checkpoints.
    stored = await the_run(jp_fetch, live=False)
    assert stored["run_id"] is None and len(stored["checkpoints"]) == 2
    assert not list(Path(gpuws_app.checkpoints.agents_dir).glob("proc-*"))


async def test_asking_an_unknown_run_is_a_404(jp_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(
            "gpuws",
            "api",
            "checkpoints",
            method="POST",
            body=json.dumps({"run_id": "0123456789abcdef"}),
        )
    assert err.value.code == 404
    assert "No distributed run '0123456789abcdef'" in json.loads(err.value.response.body)["message"]
