"""The environment API on a real Jupyter Server: the kernels' environment against the store's
latest snapshot, a change noticed, a snapshot and an offline restore as jobs, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from tornado.httpclient import HTTPClientError

import jupyter_gpu_ws.environment
from tests.envsnap.conftest import PINNED
from tests.test_sync_api import finished, get, sync_running, wait_for


@pytest.fixture
def env_python(source_venv: Path, copy_venv: Callable[[Path, str], str]) -> str:
    return copy_venv(source_venv, "kernel-env")


@pytest.fixture
def gpuws_config(gpuws_config: dict[str, Any], env_python: str, jp_environ: Any,
                 monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    # pytest-jupyter puts the test environment's site-packages on PYTHONPATH (for kernels); the
    # environment under test would then list them as its own.
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setattr(jupyter_gpu_ws.environment, "WATCH_EVERY", 0.3)
    return {**gpuws_config, "env_python": env_python, "env_snapshot_on_persist": True, "env_keep_all_wheels": True}


async def env_state(jp_fetch: Any, *states: str) -> dict[str, Any]:
    async def reached() -> Any:
        state = await get(jp_fetch, "env")
        return state if state["state"] in states else None

    return await wait_for(reached, timeout=120)


async def snapshot_now(jp_fetch: Any) -> dict[str, Any]:
    response = await jp_fetch("gpuws", "api", "env", "snapshots", method="POST", body="{}")
    assert response.code == 202
    return await finished(jp_fetch, "env/snapshots", json.loads(response.body)["id"])


async def test_a_snapshot_then_a_change_then_an_offline_restore(jp_fetch: Any, env_python: str, store_dir: Path,
                                                                no_index: Callable[[], None]) -> None:
    await sync_running(jp_fetch)
    state = await env_state(jp_fetch, "no-snapshot")
    assert state["python"] == env_python and state["latest"] is None

    job = await snapshot_now(jp_fetch)
    assert job["state"] == "done", job["errors"]
    snapshot_id = job["result"]["environment"]["id"]
    assert (store_dir / "test-ws" / ".gpuws" / "env" / f"{snapshot_id}.json").exists()
    state = await env_state(jp_fetch, "matches")
    assert state["latest"]["id"] == snapshot_id and [s["id"] for s in state["snapshots"]] == [snapshot_id]

    # A `pip uninstall` in a cell: noticed by itself, and the diff says what went.
    subprocess.run([env_python, "-m", "pip", "uninstall", "-y", "-q", "six"], check=True)
    state = await env_state(jp_fetch, "differs")
    assert state["diff"]["removed"] == [{"name": "six", "version": PINNED["six"]}]

    no_index()  # what comes back comes from the store's wheels
    response = await jp_fetch("gpuws", "api", "env", "restore", method="POST", body='{"offline": true}')
    job = await finished(jp_fetch, "env/restore", json.loads(response.body)["id"])
    assert job["state"] == "done", job["errors"]
    assert job["result"]["restore"]["installed"] == ["six"]
    assert "idna" in job["result"]["restore"]["skipped"]
    assert job["progress"]["files_total"] >= 1 and job["result"]["log"]
    await env_state(jp_fetch, "matches")


async def test_persist_takes_a_snapshot_too(jp_fetch: Any, store_dir: Path) -> None:
    await sync_running(jp_fetch)
    response = await jp_fetch("gpuws", "api", "persist", method="POST", body="{}")
    job = await finished(jp_fetch, "persist", json.loads(response.body)["id"])
    assert job["state"] == "done", job["errors"]
    assert [s["name"] for s in job["steps"]] == ["documents", "checkpoints", "environment", "sync"]
    snapshot_id = job["result"]["environment"]["id"]
    assert (store_dir / "test-ws" / ".gpuws" / "env" / f"{snapshot_id}.json").exists()


@pytest.mark.parametrize(("body", "code"), [('{"snapshot": 5}', 400), ('{"offline": "yes"}', 400),
                                            ('{"other": 1}', 400), ("[]", 400), ('{"snapshot": "../../x"}', 404),
                                            ("{}", 404)])
async def test_restore_refuses_bad_input_and_a_missing_snapshot(jp_fetch: Any, body: str, code: int,
                                                                gpuws_app: Any) -> None:
    await sync_running(jp_fetch)
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("gpuws", "api", "env", "restore", method="POST", body=body)
    assert err.value.code == code
    assert gpuws_app.jobs.latest("env-restore") is None  # nothing was started


async def test_the_magic_shows_the_difference(jp_fetch: Any, gpuws_app: Any, env_python: str) -> None:
    from tests.kernels import Notebook

    await sync_running(jp_fetch)
    assert (await snapshot_now(jp_fetch))["state"] == "done"
    subprocess.run([env_python, "-m", "pip", "uninstall", "-y", "-q", "six"], check=True)
    await env_state(jp_fetch, "differs")
    async with Notebook(jp_fetch, gpuws_app, "env.ipynb") as nb:
        out = await nb.run("%load_ext jupyter_gpu_ws\n%gpuws env")
    assert f"Python: {env_python}" in out
    assert "Differs from the snapshot of" in out and f"  - six {PINNED['six']}" in out


async def test_the_store_is_listed_once_a_minute_and_again_after_a_snapshot(
        jp_fetch: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    listing = jupyter_gpu_ws.environment.list_snapshots

    def counted(store: Any) -> Any:
        calls.append(1)
        return listing(store)

    monkeypatch.setattr(jupyter_gpu_ws.environment, "list_snapshots", counted)
    await sync_running(jp_fetch)
    await env_state(jp_fetch, "no-snapshot")
    before = len(calls)
    for _ in range(5):  # five panels polling
        assert (await get(jp_fetch, "env"))["snapshots"] == []
    assert len(calls) == before  # no store listing per poll

    job = await snapshot_now(jp_fetch)
    state = await get(jp_fetch, "env")
    assert [s["id"] for s in state["snapshots"]] == [job["result"]["environment"]["id"]]  # listed anew
    assert len(calls) == before + 1


async def test_the_first_install_into_an_empty_environment_is_noticed(
        jp_fetch: Any, gpuws_app: Any, tmp_path: Path) -> None:
    venv = tmp_path / "empty-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    gpuws_app.env_python = str(venv / "bin" / "python")
    await sync_running(jp_fetch)
    state = await env_state(jp_fetch, "no-snapshot")
    assert state["current"]["packages"] == 0
    site = next(venv.glob("lib/python3*/site-packages"))
    # What an installer leaves: a *.dist-info folder with the package's metadata.
    (site / "tinypkg-1.0.dist-info").mkdir()
    (site / "tinypkg-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n")

    async def listed() -> Any:
        state = await get(jp_fetch, "env")
        return state if state["current"]["packages"] == 1 else None

    await wait_for(listed, timeout=30)


async def test_the_machine_is_read_where_the_monitor_reads_it(jp_fetch: Any, gpuws_app: Any, tmp_path: Path) -> None:
    # The server reads simulated GPUs (nvml_test_double); the environment's machine is the same one.
    from tests.conftest import gpu_spec, write_spec

    spec = gpu_spec()
    spec["gpus"][0]["compute_capability"] = [9, 0]
    gpuws_app.nvml_test_double = str(write_spec(tmp_path / "h100.json", spec))
    await sync_running(jp_fetch)
    state = await env_state(jp_fetch, "no-snapshot")
    machine = state["current"]["machine"]
    assert machine["driver_version"] == "550.54.15" and machine["cuda_driver_version"] == "12.4"
    assert [g["compute_capability"] for g in machine["gpus"]] == ["9.0", "8.0"]
