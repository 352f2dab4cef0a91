"""%gpuws in a real kernel, and Persist now checkpointing a tracked kernel before the sync."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.kernels import Notebook, wait_for

SETUP = """
%load_ext jupyter_gpu_ws
import torch, jupyter_gpu_ws as gpuws
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gpuws.track(model=model, optimizer=opt)
for i in range(3):
    opt.zero_grad(); model(torch.randn(2, 16)).sum().backward(); opt.step(); gpuws.step(i)
"""


async def test_gpuws_magic_checkpoints_resumes_and_reports(jp_fetch: Any, gpuws_app: Any) -> None:
    async with Notebook(jp_fetch, gpuws_app, "magic.ipynb") as nb:
        await nb.run(SETUP)
        out = await nb.run("%gpuws checkpoint")
        assert out.startswith("Checkpoint at step 2:")
        assert (await nb.run("%gpuws resume")).strip() == "Resumed: continue from step 3"
        gpu = await nb.run("%gpuws gpu")
        assert "NVIDIA A100-SXM4-40GB" in gpu  # the test server's simulated GPUs
        status = await nb.run("%gpuws status")
        assert "Sync:" in status and "magic.ipynb" in status and "model, optimizer" in status
        assert "usage: %gpuws" in await nb.run("%gpuws nonsense")


async def test_persist_checkpoints_tracked_kernels_then_syncs(jp_fetch: Any, gpuws_app: Any, store_dir: Path) -> None:
    async with Notebook(jp_fetch, gpuws_app, "persist.ipynb") as nb:
        await nb.run(SETUP)
        job = json.loads((await jp_fetch("gpuws", "api", "persist", method="POST", body="")).body)

        async def finished() -> Any:
            current = json.loads((await jp_fetch("gpuws", "api", "persist", job["id"])).body)
            return current if current["state"] != "running" else None

        done = await wait_for(finished, timeout=60)
        assert done["state"] == "done", done["errors"]
        assert done["steps"][1] == {"name": "checkpoints", "state": "done", "detail": "1 of 1 kernels checkpointed"}
        manifests = list((store_dir / "test-ws" / "files" / ".gpuws" / "checkpoints" / "persist.ipynb").glob("*/manifest.json"))
        assert len(manifests) == 1 and json.loads(manifests[0].read_text())["step"] == 2
        kernels = json.loads((await jp_fetch("gpuws", "api", "checkpoints")).body)["kernels"]
        assert kernels[0]["last"]["synced"] is True


async def test_magic_persist_runs_the_server_pipeline(jp_fetch: Any, gpuws_app: Any) -> None:
    async with Notebook(jp_fetch, gpuws_app, "magic-persist.ipynb") as nb:
        await nb.run(SETUP)
        out = await nb.run("%gpuws persist", timeout=120)
        assert "All saved:" in out
        # Saved by the browser pages before anything else; none is connected in this test.
        assert "Open documents: no browser page is connected." in out
