"""The Runtime section's facts about where the server runs, on a real server: KubeSpawner's grace
left unset is warned of, a grace shorter than the measured persist is warned of, a store
template takes the hub's user name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.servers import free_port
from tests.waiting import async_until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)


@pytest.fixture
def platform_env() -> dict[str, str]:
    """The environment the server starts in; a test overrides it."""
    return {}


@pytest.fixture
def extra_config() -> dict[str, Any]:
    return {}


@pytest.fixture
def gpuws_config(
    gpuws_config: dict[str, Any],
    platform_env: dict[str, str],
    extra_config: dict[str, Any],
    store_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    for name in (
        "KUBERNETES_SERVICE_HOST",
        "GPUWS_GRACE_PERIOD",
        "JUPYTERHUB_USER",
        "JUPYTERHUB_API_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in platform_env.items():
        monkeypatch.setenv(name, value)
    return {
        **gpuws_config,
        "store_url": str(store_dir) + "/{username}",
        "hub_poll_interval": 1.0,
        **extra_config,
    }


async def runtime(jp_fetch: Any) -> dict[str, Any]:
    return json.loads((await jp_fetch("gpuws", "api", "runtime")).body)


UNREACHABLE_HUB = {
    "JUPYTERHUB_USER": "alice",
    "JUPYTERHUB_SERVER_NAME": "",
    "JUPYTERHUB_API_URL": f"http://127.0.0.1:{free_port()}/hub/api",
    "JUPYTERHUB_API_TOKEN": "not-a-real-token",
    "KUBERNETES_SERVICE_HOST": "10.0.0.1",
}


@pytest.mark.parametrize("platform_env", [UNREACHABLE_HUB])
async def test_under_kubespawner_an_unset_grace_is_warned_of(
    jp_fetch: Any, store_dir: Path
) -> None:
    state = await runtime(jp_fetch)
    platform = state["platform"]
    assert platform["kubespawner"] and platform["grace"]["seconds"] is None
    assert "delete_grace_period is 1 s" in platform["grace"]["warning"]
    assert platform["jupyterhub"]["user"] == "alice"
    # The hub cannot be reached: said, not fatal.
    error = await async_until(lambda: _hub_error(jp_fetch), timeout=30)
    assert "cannot reach JupyterHub" in error
    sync = json.loads((await jp_fetch("gpuws", "api", "sync")).body)
    assert sync["store"].rstrip("/").endswith(f"{store_dir.name}/alice")  # the template, filled in


async def _hub_error(jp_fetch: Any) -> str | None:
    return (await runtime(jp_fetch))["platform"]["jupyterhub"]["error"]


@pytest.mark.parametrize("platform_env", [{"GPUWS_GRACE_PERIOD": "1.5"}])
@pytest.mark.parametrize("extra_config", [{"bandwidth_limit": 100_000}])  # ~3 s for the file below
async def test_a_grace_shorter_than_the_measured_persist_is_warned_of(
    jp_fetch: Any, gpuws_app: Any, jp_root_dir: Path
) -> None:
    grace = (await runtime(jp_fetch))["platform"]["grace"]
    assert (grace["seconds"], grace["source"]) == (1.5, "GPUWS_GRACE_PERIOD")
    assert grace["budget"] == 1.0  # the emergency persist stays inside the pod's grace
    assert grace["warning"] is None  # nothing measured yet: nothing to compare

    await async_until(lambda: _sync_idle(jp_fetch), timeout=60)
    (jp_root_dir / "data.bin").write_bytes(b"\1" * 300_000)
    job = json.loads((await jp_fetch("gpuws", "api", "persist", method="POST", body="{}")).body)
    await async_until(lambda: _job_done(jp_fetch, job["id"]), timeout=60)

    grace = (await runtime(jp_fetch))["platform"]["grace"]
    assert grace["emergency_measured_by"] == "the last persist" and grace["emergency_seconds"] > 0.5
    assert "shorter than the emergency persist takes here" in grace["warning"]


async def _sync_idle(jp_fetch: Any) -> bool:
    return json.loads((await jp_fetch("gpuws", "api", "sync")).body)["state"] == "idle"


async def _job_done(jp_fetch: Any, job_id: str) -> bool:
    job = json.loads((await jp_fetch("gpuws", "api", "persist", job_id)).body)
    assert job["state"] in ("running", "done"), job
    return job["state"] == "done"


async def test_without_a_platform_nothing_is_claimed(jp_fetch: Any) -> None:
    platform = (await runtime(jp_fetch))["platform"]
    assert platform["jupyterhub"] is None and not platform["kubernetes"]
    assert platform["grace"]["warning"] is None and not platform["keep_alive"]["enabled"]
