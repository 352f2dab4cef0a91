"""The extension app: configuration traits, the kernel map, and a clean stop."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyter_gpu_ws.app import GpuWorkspace, GpuWorkspaceApp
from jupyter_gpu_ws.defaults import default_store_url, derive_workspace_name
from tests.conftest import gpu_spec, write_spec
from tests.waiting import async_until


def test_store_url_comes_from_gpuws_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUWS_STORE", "s3://bucket/me")
    assert GpuWorkspace().store_url == "s3://bucket/me"


def test_embedded_default_store_is_a_local_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUWS_STORE", raising=False)
    url = default_store_url()
    assert url.startswith("file:///") and url.endswith("/gpuws/store")


def test_app_reads_c_gpuworkspace() -> None:
    config = Config(
        {"GpuWorkspace": {"sample_interval": 0.5, "history_seconds": 60.0, "workdir": "/content"}}
    )
    app = GpuWorkspaceApp(config=config)
    assert (app.sample_interval, app.history_seconds, app.workdir) == (0.5, 60.0, "/content")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("sample_interval", 0),
        ("sample_interval", -1),
        ("history_seconds", 0),
        ("gpu_memory_alert", 1.5),
        ("disk_alert", 0),
    ],
)
def test_out_of_range_settings_are_refused(name: str, value: float) -> None:
    with pytest.raises(TraitError):
        GpuWorkspace(**{name: value})


def test_workspace_name_is_stable_safe_and_the_same_wherever_the_folder_sits() -> None:
    first = derive_workspace_name("/content/my project")
    assert first == derive_workspace_name("/content/my project")
    assert first == derive_workspace_name("/other/my project")  # another machine, another mount
    assert first != derive_workspace_name("/content/other project")
    assert " " not in first and "my-project" in first


async def test_server_defaults_workdir_to_its_root(gpuws_app: Any, jp_root_dir: Path) -> None:
    assert Path(gpuws_app.workdir) == Path(jp_root_dir).resolve() or Path(
        gpuws_app.workdir
    ) == Path(jp_root_dir)
    assert gpuws_app.workspace


async def test_stop_extension_stops_the_sampler(gpuws_app: Any) -> None:
    sampler = gpuws_app.sampler
    assert sampler._thread is not None and sampler._thread.is_alive()
    await gpuws_app.stop_extension()
    assert sampler._thread is None
    ticks = sampler.ticks
    await asyncio.sleep(0.3)
    assert sampler.ticks == ticks


async def run_in_kernel(client: Any, code: str) -> str:
    """Execute `code` in a real kernel and return what it printed."""
    msg_id = client.execute(code)
    out = []
    while True:
        msg = await client.get_iopub_msg(timeout=60)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        if msg["msg_type"] == "error":
            raise AssertionError("\n".join(msg["content"]["traceback"]))
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return "".join(out)


async def test_gpu_process_of_a_kernel_child_is_shown_with_its_notebook(
    jp_fetch: Any, gpuws_app: Any, fake_gpus: Path
) -> None:
    # A real notebook session with a real kernel, as JupyterLab creates it.
    response = await jp_fetch(
        "api",
        "sessions",
        method="POST",
        body=json.dumps(
            {
                "path": "experiments/train.ipynb",
                "type": "notebook",
                "name": "train.ipynb",
                "kernel": {"name": "python3"},
            }
        ),
    )
    kernel_id = json.loads(response.body)["kernel"]["id"]
    kernel = gpuws_app.serverapp.kernel_manager.get_kernel(kernel_id)
    client = kernel.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        # Training usually runs in a child of the kernel (a DataLoader worker, torchrun).
        child_pid = int(
            await run_in_kernel(
                client,
                (
                    "import subprocess, sys\n"
                    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                    "print(child.pid)\n"
                ),
            )
        )
        spec = gpu_spec()
        spec["gpus"][0]["processes"] = [
            {"pid": child_pid, "memory_used": 5 * 2**30},
            {"pid": 1, "memory_used": 2**30},  # init: not a kernel
        ]
        write_spec(fake_gpus, spec)

        async def mapped() -> Any:
            await gpuws_app.refresh_kernel_index()
            data = json.loads((await jp_fetch("gpuws", "api", "metrics")).body)
            procs = {p["pid"]: p for p in data["gpus"][0]["processes"]}
            return procs if procs.get(child_pid, {}).get("kernel_id") else None

        procs = await async_until(mapped)
        assert procs[child_pid]["kernel_id"] == kernel_id
        assert procs[child_pid]["notebook"] == "experiments/train.ipynb"
        assert procs[child_pid]["kernel_name"] == "python3"
        assert procs[1]["kernel_id"] is None
        await run_in_kernel(client, "child.kill()")
    finally:
        client.stop_channels()
        await jp_fetch("api", "sessions", json.loads(response.body)["id"], method="DELETE")


def test_a_jobs_run_named_outside_the_checkpoints_folder_by_its_stored_record_is_not_read(
    tmp_path: Path,
) -> None:
    """A job's run not running is listed from its record, which comes from the store: a run
    named "..", whose folder would be the checkpoints folder's parent, is left out."""
    from jupyter_gpu_ws.app import _idle_job_runs
    from jupyter_gpu_ws.userjobs.record import JobRecord

    root = tmp_path / ".gpuws" / "checkpoints"
    (root / "train").mkdir(parents=True)
    jobs = [
        JobRecord(id=f"j-{n:012x}", name=run, kind="command", command=[], workspace="w", run=run)
        for n, run in enumerate(["..", ".", "train", "train"])
    ]
    listed = _idle_job_runs(jobs, root, [])
    # One card for the run "train", under the newest of its jobs (the first listed).
    assert [(run["run"], run["job"], run["live"]) for run in listed] == [
        ("train", "j-000000000002", False)
    ]
