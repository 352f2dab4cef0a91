"""restore(): real installs into real virtual environments, from the store's wheels first."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.envsnap import capture, diff, load_snapshot, restore, save_snapshot
from jupyter_gpu_ws.envsnap.capture import packages_by_name
from jupyter_gpu_ws.store import Store
from tests.envsnap.conftest import (
    EDITABLE,
    LOCAL,
    PINNED,
    packages,
    run,
    store_at,
    versions,
)

Block = Callable[[], None]


def current(python: str) -> dict[str, Any]:
    return capture(python, include_torch=False, machine=False)


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_fresh_venv_restored_offline_has_the_same_packages(
    installer: str, store_copy: Store, new_venv: Any, no_index: Block
) -> None:
    no_index()
    snapshot = load_snapshot(store_copy)
    python = new_venv()
    report = restore(snapshot, store_copy, python, offline=True, installer=installer)
    assert report.ok and report.installer == installer
    assert set(report.installed) == {*PINNED, LOCAL[0], EDITABLE[0]}
    assert versions(python) == packages(snapshot)
    # The local projects came back from their wheels, and import.
    out = run(python, "-c", "import localpkg, editpkg; print(localpkg.VALUE, editpkg.VALUE)")
    assert out.split() == [LOCAL[1], EDITABLE[1]]


def test_only_the_difference_is_installed_and_what_matches_is_left_alone(
    store_copy: Store, copy_venv: Callable[..., str], source_venv: Path, no_index: Block
) -> None:
    python = copy_venv(source_venv)
    run(python, "-m", "pip", "uninstall", "-q", "-y", "idna")
    run(python, "-m", "pip", "install", "-q", "six==1.17.0")
    no_index()
    snapshot = load_snapshot(store_copy)
    before = diff(current(python), snapshot)
    assert [item["name"] for item in before.removed] == ["idna"]
    assert [(c.name, c.from_version, c.to_version) for c in before.changed] == [
        ("six", "1.16.0", "1.17.0")
    ]
    kept = packages_by_name(current(python))[LOCAL[0]]["location"]
    mtime = os.stat(kept).st_mtime_ns
    report = restore(snapshot, store_copy, python, offline=True)
    assert sorted(report.installed) == ["idna", "six"]
    assert {LOCAL[0], EDITABLE[0], "pip"} <= set(report.skipped)
    assert os.stat(kept).st_mtime_ns == mtime  # not reinstalled
    assert diff(current(python), snapshot).matches


def test_nothing_is_removed_unless_asked(
    store_copy: Store, copy_venv: Callable[..., str], source_venv: Path, no_index: Block
) -> None:
    no_index()
    python = copy_venv(source_venv)
    snapshot = load_snapshot(store_copy)
    snapshot["packages"] = [p for p in snapshot["packages"] if p["name"] not in ("six", "pip")]
    kept = restore(snapshot, store_copy, python, offline=True)
    assert kept.removed == [] and "six" in versions(python)
    removed = restore(snapshot, store_copy, python, offline=True, uninstall=True)
    assert removed.removed == ["six"]
    assert "six" not in versions(python) and "pip" in versions(
        python
    )  # the installer is never removed


def test_a_failing_package_is_reported_and_the_others_installed(
    store_copy: Store, new_venv: Any
) -> None:
    # A corrupt wheel in the store, and a version no index has.
    wheels = Path(store_copy.backend.root) / "ws" / ".gpuws" / "wheels"  # type: ignore[attr-defined]
    (wheels / "broken_pkg-1.0-py3-none-any.whl").write_bytes(b"not a zip file")
    snapshot = load_snapshot(store_copy)
    snapshot["packages"] += [
        {"name": "broken-pkg", "version": "1.0", "origin": {"kind": "index"}},
        {"name": "six", "version": "99.0.0", "origin": {"kind": "index"}},
    ]
    snapshot["packages"] = [
        p for p in snapshot["packages"] if (p["name"], p["version"]) != ("six", "1.16.0")
    ]
    python = new_venv()
    report = restore(snapshot, store_copy, python, offline=False)
    assert sorted(f["name"] for f in report.failed) == ["broken-pkg", "six"]
    assert all(f["message"] for f in report.failed)
    assert {"idna", LOCAL[0], EDITABLE[0]} <= set(report.installed)
    assert versions(python)["idna"] == PINNED["idna"]


def test_offline_without_kept_wheels_installs_the_local_projects_and_reports_the_rest(
    source_python: str, new_venv: Any, tmp_path: Path, no_index: Block
) -> None:
    store = store_at(tmp_path / "store")
    save_snapshot(store, capture(source_python, machine=False))
    no_index()
    report = restore(load_snapshot(store), store, new_venv(), offline=True)
    assert sorted(report.installed) == sorted([LOCAL[0], EDITABLE[0]])
    assert sorted(f["name"] for f in report.failed) == sorted(PINNED)
    assert all("offline" in f["message"] for f in report.failed)


def test_progress_and_the_installers_log_reach_the_callbacks(
    store_copy: Store, new_venv: Any, no_index: Block
) -> None:
    no_index()
    steps: list[tuple[int, int, str]] = []
    lines: list[str] = []
    report = restore(
        load_snapshot(store_copy),
        store_copy,
        new_venv(),
        offline=True,
        progress=lambda done, total, name: steps.append((done, total, name)),
        log=lines.append,
    )
    total = len(report.installed)
    assert steps[0][:2] == (0, total) and steps[-1][:2] == (total, total)
    assert any("six" in line for line in lines)


def test_a_cancel_before_the_first_install_leaves_everything_pending(
    store_copy: Store, new_venv: Any, no_index: Block
) -> None:
    no_index()
    cancel = threading.Event()
    cancel.set()
    python = new_venv()
    report = restore(load_snapshot(store_copy), store_copy, python, offline=True, cancel=cancel)
    assert report.cancelled and report.installed == []
    assert set(report.pending) == {*PINNED, LOCAL[0], EDITABLE[0]}
    assert "six" not in versions(python)


def test_a_cancel_between_packages_stops_the_one_by_one_install(
    store_copy: Store, new_venv: Any
) -> None:
    # A broken wheel makes the batch fail, so packages go one at a time; cancel after the first.
    wheels = Path(store_copy.backend.root) / "ws" / ".gpuws" / "wheels"  # type: ignore[attr-defined]
    (wheels / "broken_pkg-1.0-py3-none-any.whl").write_bytes(b"not a zip file")
    snapshot = load_snapshot(store_copy)
    snapshot["packages"].insert(
        0, {"name": "broken-pkg", "version": "1.0", "origin": {"kind": "index"}}
    )
    cancel = threading.Event()

    def progress(done: int, total: int, name: str) -> None:
        if done == 1:
            cancel.set()

    report = restore(
        snapshot, store_copy, new_venv(), offline=True, progress=progress, cancel=cancel
    )
    assert report.cancelled and [f["name"] for f in report.failed] == ["broken-pkg"]
    assert report.installed == [] and len(report.pending) == 4
