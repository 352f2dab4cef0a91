"""A relaunch and the environment: a successor whose packages differ from the workspace's snapshot
restores the difference before relaunching where c.GpuWorkspace.relaunch_restores_environment
allows it, and otherwise relaunches on what it has and says so (real servers, real venvs, a
local store; two small local packages, so nothing reaches an index)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.envsnap import capture, save_snapshot
from jupyter_gpu_ws.store import Store, open_backend
from jupyter_gpu_ws.userjobs import trust
from tests.envsnap.conftest import base_venv, make_project, python_of, run, versions  # noqa: F401 - a fixture
from tests.servers import server_process
from tests.userjobs.test_jobs_api import KEY, store_with
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

PACKAGES = (("local-pkg", "0.3.1"), ("other-pkg", "2.0"))


@pytest.fixture(scope="module")
def snapshot_venv(base_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    """The environment the snapshot was taken of: the bare venv and two packages of the user's own."""
    folder = tmp_path_factory.mktemp("snapshot-env")
    venv = folder / "venv"
    shutil.copytree(base_venv, venv, symlinks=True)
    projects = [make_project(folder / name, name, version) for name, version in PACKAGES]
    # Built by this Python (it has setuptools and wheel; the bare venv may lack wheel), offline.
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        folder / "wheels",
        *projects,
    )
    run(
        python_of(venv),
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        *sorted((folder / "wheels").glob("*.whl")),
    )
    return venv


@pytest.fixture
def successor(
    base_venv: Path,  # noqa: F811 - the fixture imported above
    snapshot_venv: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[Path, str]]:
    """A store whose workspace has the snapshot (its wheels kept) and one interrupted job that
    imports both packages; and the successor's Python: the bare venv, without them."""
    monkeypatch.setenv(trust.KEY_ENV, KEY)
    shutil.copytree(base_venv, tmp_path / "venv", symlinks=True)
    python = python_of(tmp_path / "venv")
    store = store_with(
        tmp_path, "j-0000000000ee", [python, "-c", "import localpkg, otherpkg; open('ran', 'w')"]
    )
    save_snapshot(
        Store(open_backend(str(store)), "test-ws"),
        capture(python_of(snapshot_venv)),
        keep_all_wheels=True,
    )
    yield store, python


def relaunched(server: Any) -> dict[str, Any]:
    return until(
        lambda: (
            (j := server.api("/gpuws/api/jobs/j-0000000000ee"))["state"] in ("finished", "failed")
            and j
        ),
        300,
        "the relaunched job's end",
    )


def test_where_allowed_the_relaunch_waits_for_the_restore_of_the_snapshots_difference(
    successor: tuple[Path, str], tmp_path: Path
) -> None:
    store, python = successor
    config = {"store_url": str(store), "env_python": python, "relaunch_restores_environment": True}
    with server_process(tmp_path / "a", tmp_path / "runtime", config) as server:
        job = relaunched(server)
        # It imports both packages: run before the restore had ended, it would have failed.
        assert job["state"] == "finished", job["reason"]
        assert (server.root / "ran").exists()
        assert job["relaunch"].startswith(
            "relaunched after restoring the snapshot's difference (2 packages"
        )
        assert {name: versions(python).get(name) for name, _ in PACKAGES} == dict(PACKAGES)
        assert server.api("/gpuws/api/env")["state"] == "matches"


def test_where_not_allowed_the_job_relaunches_on_this_environment_and_says_it_differs(
    successor: tuple[Path, str], tmp_path: Path
) -> None:
    store, python = successor
    config = {"store_url": str(store), "env_python": python}
    with server_process(tmp_path / "a", tmp_path / "runtime", config) as server:
        job = relaunched(server)
        # Relaunched without waiting for the check (it imports torch): its word follows it.
        said = "relaunched on this environment, which differs from the snapshot: 2 packages"
        until(
            lambda: server.api("/gpuws/api/jobs/j-0000000000ee")["relaunch"] == said,
            120,
            "the environment's word on the relaunched job",
        )
        # Relaunched all the same, on the packages there are: the import fails, and says why.
        assert job["state"] == "failed" and "ModuleNotFoundError" in job["reason"]
        assert not set(versions(python)) & {name for name, _ in PACKAGES}
