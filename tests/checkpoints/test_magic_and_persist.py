"""%gpuws in a real kernel, and Persist now checkpointing a tracked kernel before the sync."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from tests.kernels import Notebook
from tests.waiting import async_until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

SETUP = """
%load_ext jupyter_gpu_ws
import torch, jupyter_gpu_ws as gpuws
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gpuws.track(model=model, optimizer=opt)
for i in range(3):
    opt.zero_grad(); model(torch.randn(2, 16)).sum().backward(); opt.step(); gpuws.step(i)
"""


async def persist_finished(jp_fetch: Any, job: dict[str, Any], timeout: float) -> dict[str, Any]:
    async def finished() -> Any:
        current = json.loads((await jp_fetch("gpuws", "api", "persist", job["id"])).body)
        return current if current["state"] != "running" else None

    return await async_until(finished, timeout=timeout)


async def server_knows_the_run(jp_fetch: Any, run: str) -> None:
    """The server has read the run's steps (its training view lists it), as the status shows."""

    async def listed() -> bool:
        runs = json.loads((await jp_fetch("gpuws", "api", "training")).body)["runs"]
        return any(r["run"] == run and r.get("done_steps") for r in runs)

    await async_until(listed)


async def test_gpuws_magic_checkpoints_resumes_and_reports(jp_fetch: Any, gpuws_app: Any) -> None:
    async with Notebook(jp_fetch, gpuws_app, "magic.ipynb") as nb:
        await nb.run(SETUP)
        out = await nb.run("%gpuws checkpoint")
        assert out.startswith("Checkpoint at step 2:")
        assert re.fullmatch(
            r"gpuws: resumed 'magic\.ipynb' at step 2 from the checkpoint of \d\d:\d\d \(\d+ s ago\); "
            r"the loop goes on from step 3\n",
            await nb.run("%gpuws resume"),
        )
        [gpu] = await nb.display("%gpuws gpu")
        assert "A100-SXM4-40GB" in gpu["text/plain"]  # the test server's simulated GPUs
        [status] = await nb.display("%gpuws status")
        assert "Sync:" in status["text/plain"] and "magic.ipynb" in status["text/plain"]
        assert "model, optimizer" in status["text/plain"]
        assert "usage: %gpuws" in await nb.run("%gpuws nonsense")


async def test_gpuws_status_is_html_tables_in_the_panels_words_with_a_plain_text_twin(
    jp_fetch: Any, gpuws_app: Any
) -> None:
    async with Notebook(jp_fetch, gpuws_app, "a&b <i>.ipynb") as nb:
        await nb.run(SETUP)
        await nb.run("%gpuws checkpoint")
        await server_knows_the_run(jp_fetch, "a&b <i>.ipynb")
        [status] = await nb.display("%gpuws status")
    html, text = status["text/html"], status["text/plain"]
    # HTML tables (GPUs, checkpoints, the tracked run's training) coloured by JupyterLab's theme variables.
    assert html.count("<table") == 3 and "training run" in html
    assert "var(--jp-ui-font-color1" in html and "var(--jp-border-color2" in html
    # The GPUs as the status bar and the panel say them: utilisation in %, memory used of total.
    gpu0 = re.search(r"<tr><td[^>]*>GPU 0</td>(.*?)</tr>", html).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", gpu0)
    # PID 4242 is no process here (the host's, seen from a container): said as the panel says it.
    assert cells == [
        "A100-SXM4-40GB",
        "87 %",
        "12.0/40 GiB",
        "61 °C",
        "1 process not visible from this container",
    ]
    # The checkpoint: a human size, an age, where it is; the notebook's name escaped, never markup.
    row = re.search(r"<tr><td[^>]*>a&amp;b &lt;i&gt;\.ipynb</td>(.*?)</tr>", html)
    assert row is not None and "<i>" not in html
    notebook, tracks, step, size, taken, where = re.findall(
        r"<td[^>]*>(.*?)</td>", "<td>x</td>" + row.group(1)
    )
    assert (tracks, step) == ("model, optimizer", "2")
    assert re.fullmatch(r"\d+\.\d KiB|\d+ B", size) and re.fullmatch(r"\d+ s ago", taken)
    assert where in ("in the store", "not in the store yet")
    assert "no known end: running for" in html
    # The plain text says the same in aligned columns.
    lines = text.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["GPU", "name"])
    first = next(line for line in lines if line.strip().startswith("GPU 0"))
    assert first.index("A100") == header.index("name")
    assert first.index("12.0/40 GiB") + len("12.0/40 GiB") == header.index("memory") + len("memory")
    assert "a&b <i>.ipynb" in text and "Runtime:" in text and "Sync:" in text


async def test_persist_checkpoints_tracked_kernels_then_syncs(
    jp_fetch: Any, gpuws_app: Any, store_dir: Path
) -> None:
    async with Notebook(jp_fetch, gpuws_app, "persist.ipynb") as nb:
        await nb.run(SETUP)
        job = json.loads((await jp_fetch("gpuws", "api", "persist", method="POST", body="")).body)
        done = await persist_finished(jp_fetch, job, timeout=60)
        assert done["state"] == "done", done["errors"]
        assert done["steps"][1] == {
            "name": "checkpoints",
            "state": "done",
            "detail": "1 of 1 kernels checkpointed",
        }
        manifests = list(
            (store_dir / "test-ws" / "files" / ".gpuws" / "checkpoints" / "persist.ipynb").glob(
                "*/manifest.json"
            )
        )
        assert len(manifests) == 1 and json.loads(manifests[0].read_text())["step"] == 2
        # The summary ends with what the store now holds: files, bytes, each run's newest step.
        stored = done["result"]["stored"]
        mirror = [p for p in (store_dir / "test-ws" / "files").rglob("*") if p.is_file()]
        assert stored["files"] == len(mirror) and stored["bytes"] == sum(
            p.stat().st_size for p in mirror
        )
        assert stored["checkpoints"] == [
            {"run": "persist.ipynb", "step": 2, "folder": manifests[0].parent.name}
        ]
        kernels = json.loads((await jp_fetch("gpuws", "api", "checkpoints")).body)["kernels"]
        assert kernels[0]["last"]["synced"] is True


async def test_a_kernel_that_tracks_nothing_yet_is_not_waited_for(
    jp_fetch: Any, gpuws_app: Any
) -> None:
    # The agent is loaded before gpuws.track() (a training cell still importing torch): it has
    # nothing to save and answers no request, so neither a persist nor a request waits on it.
    async with (
        Notebook(jp_fetch, gpuws_app, "loading.ipynb") as idle,
        Notebook(jp_fetch, gpuws_app, "tracked.ipynb") as nb,
    ):
        await idle.run("%load_ext jupyter_gpu_ws")
        await nb.run(SETUP)
        kernels = {
            k["kernel_id"]: k
            for k in json.loads((await jp_fetch("gpuws", "api", "checkpoints")).body)["kernels"]
        }
        assert kernels[idle.kernel_id]["objects"] == {} and kernels[nb.kernel_id]["objects"]
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch(
                "gpuws",
                "api",
                "checkpoints",
                method="POST",
                body=json.dumps({"kernel_id": idle.kernel_id}),
            )
        assert (
            err.value.code == 409
            and "tracks nothing yet" in json.loads(err.value.response.body)["message"]
        )

        job = json.loads((await jp_fetch("gpuws", "api", "persist", method="POST", body="")).body)
        done = await persist_finished(jp_fetch, job, timeout=150)
        assert done["state"] == "done", done["errors"]
        assert done["steps"][1] == {
            "name": "checkpoints",
            "state": "done",
            "detail": "1 of 1 kernels checkpointed",
        }
        assert [r["kernel_id"] for r in done["result"]["checkpoints"]] == [nb.kernel_id]


async def test_magic_persist_runs_the_server_pipeline(jp_fetch: Any, gpuws_app: Any) -> None:
    async with Notebook(jp_fetch, gpuws_app, "magic-persist.ipynb") as nb:
        await nb.run(SETUP)
        out = await nb.run("%gpuws persist", timeout=120)
        # The test store is a folder on this machine's disk: never "All saved" there.
        assert "Copied to this machine's disk only:" in out and "All saved" not in out
        # Saved by the browser pages before anything else; none is connected in this test.
        assert "Open documents: no browser page is connected." in out
        # As a notebook shows it (a carriage return overwrites its line): no progress line is
        # left standing above the outcome.
        shown = [line.rsplit("\r", 1)[-1].strip() for line in out.split("\n")]
        assert shown[0].startswith("Copied to this machine's disk only:"), shown


NOTHING_TRACKED = "gpuws: Nothing is tracked: call gpuws.track(model=..., optimizer=...) first\n"


async def test_a_failed_magic_is_one_line_naming_the_cause_and_what_to_do(
    jp_fetch: Any, gpuws_app: Any, tmp_path: Path
) -> None:
    blocked = (
        tmp_path / "a-file"
    )  # a folder cannot be made inside a file: the checkpoint cannot be written
    blocked.write_text("")
    async with Notebook(jp_fetch, gpuws_app, "fails.ipynb") as nb:
        await nb.run("%load_ext jupyter_gpu_ws")
        assert await nb.run("%gpuws checkpoint") == NOTHING_TRACKED
        assert await nb.run("%gpuws resume") == NOTHING_TRACKED
        await nb.run(
            f"import torch, jupyter_gpu_ws as gpuws\n"
            f"gpuws.track(model=torch.nn.Linear(2, 2), root={str(blocked / 'ckpts')!r})"
        )
        out = await nb.run("%gpuws checkpoint")
    run_path = blocked / "ckpts" / "fails.ipynb"
    assert out == (
        f"gpuws: Checkpoint at step 0 failed: cannot write {run_path} (Not a directory): "
        "choose a folder this kernel can write with gpuws.track(root=...)\n"
    )
    assert blocked.read_text() == ""  # nothing of the user's touched


async def test_track_and_progress_show_the_run_what_it_tracks_and_where_checkpoints_go(
    jp_fetch: Any, gpuws_app: Any
) -> None:
    async with Notebook(jp_fetch, gpuws_app, "repr.ipynb") as nb:
        await nb.run(
            "%load_ext jupyter_gpu_ws\nimport torch, jupyter_gpu_ws as gpuws\nmodel = torch.nn.Linear(2, 2)"
        )
        [tracked] = await nb.display("gpuws.track(model=model, epoch=0)")
        [progress] = await nb.display("gpuws.progress(total=10)")
    expected = (
        "<gpuws run 'repr.ipynb': model, epoch; checkpoints in .gpuws/checkpoints/repr.ipynb>"
    )
    assert tracked["text/plain"] == progress["text/plain"] == expected


NO_SERVER = "gpuws: No Jupyter Server found for this kernel (is it running under Jupyter?)\n"


async def test_the_magic_in_a_kernel_without_a_server_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_client.manager import start_new_async_kernel

    from tests.kernels import run_in_kernel

    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))  # no server's file there
    for name in ("GPUWS_SERVER_PID", "GPUWS_SERVER_ID", "GPUWS_RUNTIME_DIR", "JPY_SESSION_NAME"):
        monkeypatch.delenv(name, raising=False)
    manager, client = await start_new_async_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        await run_in_kernel(client, "%load_ext jupyter_gpu_ws")
        for command in ("persist", "status", "env"):
            said = await run_in_kernel(client, f"%gpuws {command}")
            assert said == NO_SERVER, command
    finally:
        client.stop_channels()
        await manager.shutdown_kernel(now=True)
