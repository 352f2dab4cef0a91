"""The environment API on a real Jupyter Server: the kernels' environment against the store's
latest snapshot, a change noticed, a snapshot and an offline restore as jobs, and bad input."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

import jupyter_gpu_ws.environment
from jupyter_gpu_ws.store import Store, open_backend
from tests.envsnap.conftest import LOCAL, PINNED, FileServer, serve_wheel_of, versions
from tests.test_sync_api import finished, get, sync_running
from tests.waiting import async_until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)


@pytest.fixture
def env_python(source_venv: Path, copy_venv: Callable[[Path, str], str]) -> str:
    return copy_venv(source_venv, "kernel-env")


@pytest.fixture
def gpuws_config(
    gpuws_config: dict[str, Any], env_python: str, jp_environ: Any, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    # pytest-jupyter puts the test environment's site-packages on PYTHONPATH (for kernels); the
    # environment under test would then list them as its own.
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setattr(jupyter_gpu_ws.environment, "WATCH_EVERY", 0.3)
    return {
        **gpuws_config,
        "env_python": env_python,
        "env_snapshot_on_persist": True,
        "env_keep_all_wheels": True,
    }


def set_environment(gpuws_app: Any, **values: Any) -> None:
    """Settings the server started with, changed before the environment is first looked at."""
    supervisor = gpuws_app.environment
    supervisor.settings = dataclasses.replace(supervisor.settings, **values)


async def env_state(jp_fetch: Any, *states: str) -> dict[str, Any]:
    async def reached() -> Any:
        state = await get(jp_fetch, "env")
        return state if state["state"] in states else None

    return await async_until(reached, timeout=120)


async def snapshot_now(jp_fetch: Any) -> dict[str, Any]:
    response = await jp_fetch("gpuws", "api", "env", "snapshots", method="POST", body="{}")
    assert response.code == 202
    return await finished(jp_fetch, "env/snapshots", json.loads(response.body)["id"])


async def test_a_snapshot_then_a_change_then_an_offline_restore(
    jp_fetch: Any, env_python: str, store_dir: Path, no_index: Callable[[], None]
) -> None:
    await sync_running(jp_fetch)
    state = await env_state(jp_fetch, "no-snapshot")
    assert state["python"] == env_python and state["latest"] is None

    job = await snapshot_now(jp_fetch)
    assert job["state"] == "done", job["errors"]
    snapshot_id = job["result"]["environment"]["id"]
    assert (store_dir / "test-ws" / ".gpuws" / "env" / f"{snapshot_id}.json").exists()
    state = await env_state(jp_fetch, "matches")
    assert state["latest"]["id"] == snapshot_id and [s["id"] for s in state["snapshots"]] == [
        snapshot_id
    ]

    # A `pip uninstall` in a cell: noticed by itself, and the diff says what went.
    subprocess.run([env_python, "-m", "pip", "uninstall", "-y", "-q", "six"], check=True)
    state = await env_state(jp_fetch, "differs")
    assert state["diff"]["removed"] == [{"name": "six", "version": PINNED["six"]}]

    no_index()  # what comes back comes from the store's wheels
    response = await jp_fetch(
        "gpuws", "api", "env", "restore", method="POST", body='{"offline": true}'
    )
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
    # The snapshot comes last: its wheels never hold up the files' upload.
    assert [s["name"] for s in job["steps"]] == ["documents", "checkpoints", "sync", "environment"]
    snapshot_id = job["result"]["environment"]["id"]
    assert (store_dir / "test-ws" / ".gpuws" / "env" / f"{snapshot_id}.json").exists()


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ('{"snapshot": 5}', 400),
        ('{"offline": "yes"}', 400),
        ('{"allow_sources": 1}', 400),
        ('{"other": 1}', 400),
        ("[]", 400),
        ('{"snapshot": "../../x"}', 400),  # not a snapshot id (the description's pattern)
        ('{"snapshot": "20200101T000000.000000Z-0123456789ab"}', 404),
        ("{}", 404),
    ],
)
async def test_restore_refuses_bad_input_and_a_missing_snapshot(
    jp_fetch: Any, body: str, code: int, gpuws_app: Any
) -> None:
    await sync_running(jp_fetch)
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("gpuws", "api", "env", "restore", method="POST", body=body)
    assert err.value.code == code
    assert gpuws_app.jobs.latest("env-restore") is None  # nothing was started


async def test_the_magic_shows_the_difference(
    jp_fetch: Any, gpuws_app: Any, env_python: str
) -> None:
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
    jp_fetch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
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
    assert [s["id"] for s in state["snapshots"]] == [
        job["result"]["environment"]["id"]
    ]  # listed anew
    assert len(calls) == before + 1


async def test_the_first_install_into_an_empty_environment_is_noticed(
    jp_fetch: Any, gpuws_app: Any, tmp_path: Path
) -> None:
    venv = tmp_path / "empty-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    set_environment(gpuws_app, env_python=str(venv / "bin" / "python"))
    await sync_running(jp_fetch)
    state = await env_state(jp_fetch, "no-snapshot")
    assert state["current"]["packages"] == 0
    site = next(venv.glob("lib/python3*/site-packages"))
    # What an installer leaves: a *.dist-info folder with the package's metadata.
    (site / "tinypkg-1.0.dist-info").mkdir()
    (site / "tinypkg-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n"
    )

    async def listed() -> Any:
        state = await get(jp_fetch, "env")
        return state if state["current"]["packages"] == 1 else None

    await async_until(listed, timeout=30)


async def test_the_machine_is_read_where_the_monitor_reads_it(
    jp_fetch: Any, gpuws_app: Any, tmp_path: Path
) -> None:
    # The server reads simulated GPUs (nvml_test_double); the environment's machine is the same one.
    from tests.conftest import gpu_spec, write_spec

    spec = gpu_spec()
    spec["gpus"][0]["compute_capability"] = [9, 0]
    set_environment(gpuws_app, nvml_test_double=str(write_spec(tmp_path / "h100.json", spec)))
    await sync_running(jp_fetch)
    state = await env_state(jp_fetch, "no-snapshot")
    machine = state["current"]["machine"]
    assert machine["driver_version"] == "550.54.15" and machine["cuda_driver_version"] == "12.4"
    assert [g["compute_capability"] for g in machine["gpus"]] == ["9.0", "8.0"]


class TestSnapshotsFromSomeoneElse:
    """The store's latest snapshot was written elsewhere (the session's snapshot of the source
    environment, every wheel kept), then changed as below; the kernels' environment is empty."""

    @pytest.fixture
    def env_python(self, new_venv: Callable[[str], str]) -> str:
        return new_venv("kernel-env")

    @pytest.fixture
    def their_store(self, snapshot_store: tuple[Path, Any], store_dir: Path) -> Store:
        shutil.copytree(
            snapshot_store[0] / "ws" / ".gpuws",
            store_dir / "test-ws" / ".gpuws",
            dirs_exist_ok=True,
        )
        return Store(open_backend(str(store_dir)), "test-ws")

    @staticmethod
    def rewrite_latest(store: Store, change: Callable[[dict[str, Any]], None]) -> None:
        env = Path(store.backend.root) / "test-ws" / ".gpuws" / "env"  # type: ignore[attr-defined]
        path = env / f"{json.loads((env / 'latest.json').read_text())['id']}.json"
        snapshot = json.loads(path.read_text())
        change(snapshot)
        path.write_text(json.dumps(snapshot))

    async def test_sources_to_build_are_listed_and_need_allow_sources(
        self,
        jp_fetch: Any,
        their_store: Store,
        file_server: FileServer,
        env_python: str,
        no_index: Callable[[], None],
    ) -> None:
        no_index()
        origin = serve_wheel_of(their_store, LOCAL[0], file_server)

        def from_a_url(snapshot: dict[str, Any]) -> None:
            for package in snapshot["packages"]:
                if package["name"] == LOCAL[0]:
                    package["origin"] = origin

        self.rewrite_latest(their_store, from_a_url)
        await sync_running(jp_fetch)
        state = await env_state(jp_fetch, "differs")
        source = {
            "name": LOCAL[0],
            "version": LOCAL[1],
            "kind": "archive",
            "source": f"{origin['url']}#{origin['hash']}",
        }
        assert state["sources"] == [source]  # what the restore dialog lists beside its checkbox

        with pytest.raises(HTTPClientError) as err:
            await jp_fetch("gpuws", "api", "env", "restore", method="POST", body="{}")
        message = json.loads(err.value.response.body)["message"]
        assert err.value.code == 409 and LOCAL[0] in message and origin["url"] in message
        assert file_server.requests == [] and LOCAL[0] not in versions(env_python)

        response = await jp_fetch(
            "gpuws", "api", "env", "restore", method="POST", body='{"allow_sources": true}'
        )
        assert json.loads(response.body)["result"]["sources"] == [
            source
        ]  # in the answer, before the install
        job = await finished(jp_fetch, "env/restore", json.loads(response.body)["id"])
        assert job["state"] == "done", job["errors"]
        assert versions(env_python)[LOCAL[0]] == LOCAL[1] and file_server.requests

    async def test_an_injected_option_is_refused_and_shown_not_installed(
        self,
        jp_fetch: Any,
        their_store: Store,
        file_server: FileServer,
        env_python: str,
        gpuws_app: Any,
    ) -> None:
        self.rewrite_latest(
            their_store,
            lambda snapshot: snapshot["packages"].append(
                {"name": f"--index-url={file_server.url}/simple", "version": "1.0"}
            ),
        )
        await sync_running(jp_fetch)

        async def refused() -> Any:
            state = await get(jp_fetch, "env")
            return state if state["error"] else None

        state = await async_until(refused, timeout=120)
        assert (
            "is refused" in state["error"]
            and "--index-url" in state["error"]
            and state["diff"] is None
        )
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch(
                "gpuws", "api", "env", "restore", method="POST", body='{"allow_sources": true}'
            )
        assert (
            err.value.code == 422
            and "--index-url" in json.loads(err.value.response.body)["message"]
        )
        assert gpuws_app.jobs.latest("env-restore") is None
        assert file_server.requests == [] and set(versions(env_python)) <= {
            "pip",
            "setuptools",
            "wheel",
        }
