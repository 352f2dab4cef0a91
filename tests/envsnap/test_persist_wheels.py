"""Persist now and the environment snapshot's wheels: a package installed from a local folder is
built into a wheel after the files' upload, never before it, and a build that fails is one line
in the persist's result with the cause and what to do."""

from __future__ import annotations

import json
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.test_sync_api import mirror, sync_running
from tests.waiting import async_until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

# A build backend that holds its build until the test lets it go, then fails as a project whose
# backend is not installed does ("No module named 'hatchling'").
BACKEND = """
import time
from pathlib import Path

HERE = Path(__file__).parent


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    (HERE / "started").touch()
    deadline = time.time() + 120
    while not (HERE / "release").exists() and time.time() < deadline:
        time.sleep(0.05)
    (HERE / "ended").touch()
    raise ModuleNotFoundError("No module named 'hatchling'")
"""


def installed_from_folder(python: str, folder: Path) -> None:
    """`slowpkg` 1.0 as pip records a package installed from `folder` (its direct_url.json)."""
    folder.mkdir()
    (folder / "slow_backend.py").write_text(BACKEND)
    (folder / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "slow_backend"\nbackend-path = ["."]\n'
        '[project]\nname = "slowpkg"\nversion = "1.0"\n'
    )
    venv = Path(python).parent.parent
    site = venv / Path(sysconfig.get_path("purelib")).relative_to(sysconfig.get_path("data"))
    dist = site / "slowpkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: slowpkg\nVersion: 1.0\n")
    (dist / "INSTALLER").write_text("pip\n")
    (dist / "RECORD").write_text("")
    (dist / "direct_url.json").write_text(json.dumps({"url": folder.as_uri(), "dir_info": {}}))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return tmp_path / "slowpkg"


@pytest.fixture
def env_python(new_venv: Callable[[str], str], project: Path) -> str:
    python = new_venv("kernel-env")
    installed_from_folder(python, project)
    return python


@pytest.fixture
def gpuws_config(
    gpuws_config: dict[str, Any], env_python: str, jp_environ: Any, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    # pytest-jupyter puts the test environment's site-packages on PYTHONPATH (for kernels); the
    # environment under test would then list them as its own.
    monkeypatch.delenv("PYTHONPATH", raising=False)
    return {**gpuws_config, "env_python": env_python, "env_snapshot_on_persist": True}


async def test_the_files_reach_the_store_before_a_slow_wheel_build_ends_and_its_failure_is_one_line(
    jp_fetch: Any, gpuws_app: Any, store_dir: Path, project: Path
) -> None:
    await sync_running(jp_fetch)
    (Path(gpuws_app.serverapp.root_dir) / "notes.md").write_text("saved before any wheel")
    job = json.loads((await jp_fetch("gpuws", "api", "persist", method="POST", body="")).body)
    seen: list[str] = []

    async def building() -> Any:
        current = json.loads((await jp_fetch("gpuws", "api", "persist", job["id"])).body)
        if current["activity"] and (not seen or seen[-1] != current["activity"]):
            seen.append(current["activity"])
        return current if (project / "started").exists() else None

    during = await async_until(building, timeout=120, interval=0.05)
    # The wheel is being built (and cannot end until released): the files are already in the store.
    assert during["state"] == "running" and not (project / "ended").exists()
    assert during["activity"] == "Snapshotting the environment: building a wheel of slowpkg"
    assert (mirror(store_dir) / "notes.md").read_text() == "saved before any wheel"
    assert [s["state"] for s in during["steps"] if s["name"] == "sync"] == ["done"]
    # The snapshot's own progress, after the upload's step has ended.
    assert seen[-1] == "Snapshotting the environment: building a wheel of slowpkg", seen
    assert not any(
        text.startswith(("Uploading", "Comparing"))
        for text in seen[seen.index(next(t for t in seen if t.startswith("Snapshotting"))) :]
    ), seen

    (project / "release").touch()

    async def finished() -> Any:
        current = json.loads((await jp_fetch("gpuws", "api", "persist", job["id"])).body)
        return current if current["state"] != "running" else None

    done = await async_until(finished, timeout=180)
    # The files are saved: the persist is done, and the snapshot's missing wheel is one line with
    # the cause and what to do, in the result the panel, the magic and the CLI show.
    assert done["state"] == "done", done["errors"]
    line = (
        f"Environment snapshot: could not build a wheel of slowpkg from {project}: No module named "
        "'hatchling' (pip install hatchling in this environment, so the next snapshot can build it; "
        "or install slowpkg from an index or a wheel)"
    )
    assert done["result"]["warnings"] == [line]
    summary = done["result"]["summary"]
    assert summary["level"] == "warning" and summary["warnings"] == [line]
    assert f"{line}." in summary["text"] and f"{line}." in summary["short"]
