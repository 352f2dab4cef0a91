"""Persist now as a user meets it, with a real server and real kernels: a checkpoint that fails
ends the persist at once with the kernel's reason and the notebook's name, each step is named
while it runs, and the result is one summary that says "All saved" only for a store that
outlives this machine (the magic's words; the CLI's are in tests/test_cli_persist.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.checkpoints.test_magic_and_persist import SETUP, persist_finished
from tests.kernels import Notebook
from tests.sync.conftest import s3_env, s3_server, s3_url  # noqa: F401 - the SeaweedFS fixtures

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

BROKEN = """
%load_ext jupyter_gpu_ws
import jupyter_gpu_ws as gpuws
class Broken:
    def state_dict(self):
        raise RuntimeError("the optimizer's state is on a device that went away")
    def load_state_dict(self, state):
        pass
gpuws.track(model=Broken())
"""


@pytest.fixture
def store_kind() -> str:
    return "local"


@pytest.fixture
def gpuws_config(
    gpuws_config: dict[str, Any], store_kind: str, request: pytest.FixtureRequest
) -> dict[str, Any]:
    # A checkpoint request that waited for its timeout would outlast every wait below: a
    # persist that ends in time has not waited for it.
    # 2 MiB/s: an upload of a few MiB is seen under way.
    config = {**gpuws_config, "checkpoint_timeout": 600.0, "bandwidth_limit": 2 * 2**20}
    if store_kind == "s3":
        config["store_url"] = request.getfixturevalue("s3_url")
    return config


async def start_persist(jp_fetch: Any) -> dict[str, Any]:
    return json.loads((await jp_fetch("gpuws", "api", "persist", method="POST", body="")).body)


async def test_a_failed_checkpoint_ends_the_persist_at_once_with_the_kernels_reason_and_the_notebook(
    jp_fetch: Any, gpuws_app: Any, store_dir: Path
) -> None:
    async with Notebook(jp_fetch, gpuws_app, "broken.ipynb") as nb:
        await nb.run(BROKEN)
        (Path(gpuws_app.serverapp.root_dir) / "notes.md").write_text(
            "kept whatever the checkpoint does"
        )
        job = await start_persist(jp_fetch)
        # Far less than the request's 600 s timeout: the kernel's failure ends the wait.
        done = await persist_finished(jp_fetch, job, timeout=90)
    reason = "broken.ipynb: Checkpoint at step 0 failed: the optimizer's state is on a device that went away"
    assert done["state"] == "failed" and done["errors"] == [reason]
    assert "no checkpoint within" not in json.dumps(done) and "kernel " not in done["errors"][0]
    [request] = done["result"]["checkpoints"]
    assert request["state"] == "error" and request["kernel_id"] == nb.kernel_id
    # The files still reached the store, and the summary tells one story: files saved, the
    # checkpoint failed and why; not "failed" beside "up to date" as two.
    assert (
        store_dir / "test-ws" / "files" / "notes.md"
    ).read_text() == "kept whatever the checkpoint does"
    summary = done["result"]["summary"]
    assert summary["level"] == "error" and summary["errors"] == [reason]
    assert summary["headline"] == "Files copied to this machine's disk only, not everything"
    assert summary["short"].startswith("Files copied to this machine's disk only, not everything: ")
    assert summary["short"].endswith(f"Failed: {reason}.")
    assert summary["text"].count("Failed:") == 1 and "All saved" not in summary["text"]


async def test_the_persist_names_each_step_while_it_runs_with_its_own_progress(
    jp_fetch: Any, gpuws_app: Any
) -> None:
    root = Path(gpuws_app.serverapp.root_dir)
    async with Notebook(jp_fetch, gpuws_app, "steps.ipynb") as nb:
        await nb.run(SETUP)
        # Enough to upload that the upload is seen under way at the bandwidth cap.
        for i in range(3):
            (root / f"data-{i}.bin").write_bytes(bytes(2 * 2**20))
        job = await start_persist(jp_fetch)
        seen: list[str] = []
        while job["state"] == "running":
            if job["activity"] and (not seen or seen[-1] != job["activity"]):
                seen.append(job["activity"])
            job = json.loads((await jp_fetch("gpuws", "api", "persist", job["id"])).body)
    assert job["state"] == "done", job["errors"]
    assert job["activity"] is None  # nothing runs any more
    # The steps in their order, each in its own words; files counted only once they move.
    kinds = [
        next(
            (
                kind
                for prefix, kind in [
                    ("Saving the open documents", "documents"),
                    ("Checkpointing 1 kernel", "checkpoints"),
                    ("Comparing the files with the store", "sync"),
                    ("Uploading ", "sync"),
                ]
                if text.startswith(prefix)
            ),
            text,
        )
        for text in seen
    ]
    assert "checkpoints" in kinds and "sync" in kinds, seen
    order = ["documents", "checkpoints", "sync"]
    assert [order.index(k) for k in kinds] == sorted(order.index(k) for k in kinds), seen
    uploads = [text for text in seen if text.startswith("Uploading ")]
    assert uploads, seen
    for text in uploads:
        # The watcher may have sent some files before the persist began: then fewer are left,
        # one even, and the words count them right ("of 1 file", "of 3 files").
        done, total, noun = re.fullmatch(r"Uploading (\d+) of (\d+) (files?)", text).groups()
        assert 0 <= int(done) <= int(total) and int(total) > 0, text
        assert noun == ("file" if total == "1" else "files"), text
    assert not any("0 of 0 files" in text for text in seen)


ON_THIS_DISK = (
    "Copied to this machine's disk only: ",
    "Set GPUWS_STORE (or c.GpuWorkspace.store_url) to a store "
    "that outlives it: s3://bucket/prefix, gs://…, or a mounted drive.",
)


@pytest.mark.parametrize(
    ("store_kind", "begins", "ends"),
    [("local", *ON_THIS_DISK), ("s3", "All saved: ", "at step 2.")],
)
async def test_magic_persist_says_all_saved_only_on_a_store_off_this_machine(
    jp_fetch: Any, gpuws_app: Any, store_kind: str, begins: str, ends: str
) -> None:
    # A store folder beside the work directory goes with the machine; SeaweedFS S3 does not.
    async with Notebook(jp_fetch, gpuws_app, f"{store_kind}.ipynb") as nb:
        await nb.run(SETUP)
        out = await nb.run("%gpuws persist", timeout=120)
    [result] = [line for line in out.splitlines() if line.startswith(begins)]
    assert (
        result.endswith(ends)
        and "in the store:" in result
        and f"{store_kind}.ipynb at step 2" in result
    )
    assert out.count("All saved") == (store_kind == "s3") and out.count("this machine's disk") == (
        store_kind == "local"
    )
