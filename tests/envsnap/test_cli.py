"""`jupyter gpuws env …` as a user runs it: a real process, real venvs, a local-folder store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.envsnap.conftest import EDITABLE, LOCAL, PINNED, versions

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)


def gpuws_env(*args: str | Path) -> subprocess.CompletedProcess:
    # A checkout used without installing warns on import: not what these tests look at.
    command = [
        sys.executable,
        "-W",
        "ignore::UserWarning",
        "-m",
        "jupyter_gpu_ws.cli",
        "env",
        *map(str, args),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_snapshot_diff_and_offline_restore_end_to_end(
    source_python: str, new_venv: Any, tmp_path: Path, no_index: Callable[[], None]
) -> None:
    where = ["--store", tmp_path / "store", "--workspace", "ws"]
    first = gpuws_env(
        "snapshot", *where, "--python", source_python, "--keep-all-wheels", "--create-store"
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("New snapshot ")
    again = gpuws_env("snapshot", *where, "--python", source_python)
    assert again.returncode == 0 and again.stdout.startswith("No change since snapshot ")

    no_index()
    fresh = new_venv()
    differs = gpuws_env("diff", *where, "--python", fresh, "--json")
    assert differs.returncode == 0, differs.stderr
    removed = {item["name"] for item in json.loads(differs.stdout)["diff"]["removed"]}
    assert removed == {*PINNED, LOCAL[0], EDITABLE[0]}

    restored = gpuws_env("restore", *where, "--python", fresh, "--offline")
    assert restored.returncode == 0, restored.stderr
    assert restored.stdout.startswith("4 packages installed")
    assert versions(fresh) == versions(source_python)
    matches = gpuws_env("diff", *where, "--python", fresh)
    assert matches.stdout.startswith("Matches the snapshot")
    listed = gpuws_env("list", *where)
    assert listed.stdout.splitlines()[1].split()[0] == first.stdout.split()[2].rstrip(":")


def test_restore_from_a_store_folder_that_is_missing_is_one_line_and_exit_1(tmp_path: Path) -> None:
    result = gpuws_env("restore", "--store", tmp_path / "store", "--workspace", "ws")
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"jupyter gpuws: error: No store at {tmp_path / 'store'}: nothing there to read"
        )
    )
    assert not (tmp_path / "store").exists()


def test_restore_from_an_empty_store_is_one_line_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    result = gpuws_env("restore", "--store", tmp_path / "store", "--workspace", "ws")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"store: {tmp_path / 'store'}  workspace: ws",
        f"jupyter gpuws: error: No workspace 'ws' in {tmp_path / 'store'}: the store holds no workspace yet",
    ]


def test_a_missing_interpreter_is_one_line_and_exit_1(tmp_path: Path) -> None:
    result = gpuws_env(
        "snapshot",
        "--store",
        tmp_path / "store",
        "--workspace",
        "ws",
        "--python",
        tmp_path / "nope",
    )
    assert result.returncode == 1
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("store: ")]
    assert len(lines) == 1 and "Python interpreter not found" in lines[0]
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.json"))


def test_a_failed_package_makes_restore_exit_1_naming_it(
    source_python: str, new_venv: Any, tmp_path: Path, no_index: Callable[[], None]
) -> None:
    where = ["--store", tmp_path / "store", "--workspace", "ws"]
    (tmp_path / "store").mkdir()  # a new store, made by hand
    assert (
        gpuws_env("snapshot", *where, "--python", source_python).returncode == 0
    )  # index packages: no wheels
    no_index()
    result = gpuws_env("restore", *where, "--python", new_venv(), "--offline")
    assert result.returncode == 1
    errors = [
        line for line in result.stderr.splitlines() if line.startswith("jupyter gpuws: error: ")
    ]
    assert sorted(line.split()[3].rstrip(":") for line in errors) == sorted(PINNED)


def test_sources_are_built_only_with_allow_sources(
    store_copy: Any, new_venv: Any, file_server: Any, no_index: Callable[[], None]
) -> None:
    """A URL origin with no wheel in the store: refused in one line naming it, then, with
    --allow-sources, announced and installed."""
    from tests.envsnap.conftest import serve_wheel_of

    origin = serve_wheel_of(store_copy, LOCAL[0], file_server)
    env = Path(store_copy.backend.root) / "ws" / ".gpuws" / "env"
    path = env / f"{json.loads((env / 'latest.json').read_text())['id']}.json"
    snapshot = json.loads(path.read_text())
    for package in snapshot["packages"]:
        if package["name"] == LOCAL[0]:
            package["origin"] = origin
    path.write_text(json.dumps(snapshot))
    no_index()
    python = new_venv()
    where = ["--store", store_copy.backend.root, "--workspace", "ws", "--python", python]

    refused = gpuws_env("restore", *where)
    assert refused.returncode == 1 and refused.stdout == ""
    [line] = [x for x in refused.stderr.strip().splitlines() if not x.startswith("store: ")]
    assert line.startswith("jupyter gpuws: error: Restoring would fetch and build 1 package ")
    assert origin["url"] in line and "--allow-sources" in line
    assert file_server.requests == [] and LOCAL[0] not in versions(python)

    allowed = gpuws_env("restore", *where, "--allow-sources")
    assert allowed.returncode == 0, allowed.stderr
    assert f"Fetching and building {LOCAL[0]} {LOCAL[1]} from {origin['url']}" in allowed.stderr
    assert versions(python)[LOCAL[0]] == LOCAL[1]


def add_package(python: str, name: str, version: str) -> None:
    """What `pip install <name>==<version>` leaves behind, written directly (no index here)."""
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    info = Path(site) / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("pip\n")


def test_list_is_a_table_newest_first_with_the_latest_marked(new_venv: Any, tmp_path: Path) -> None:
    python = new_venv()
    where = ["--store", tmp_path / "store", "--workspace", "ws"]
    first = gpuws_env("snapshot", *where, "--python", python, "--create-store")
    assert first.returncode == 0, first.stderr
    assert first.stdout.endswith(" packages, 0 wheels added to the store\n"), first.stdout
    add_package(python, "demo-pkg", "1.0")
    second = gpuws_env("snapshot", *where, "--python", python)
    assert second.returncode == 0, second.stderr
    listed = gpuws_env("list", *where)
    assert listed.returncode == 0, listed.stderr
    header, newest, older = listed.stdout.splitlines()
    assert header.split() == ["snapshot", "taken", "Python", "torch", "packages"]
    version = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    new_id, old_id = (r.stdout.split()[2].rstrip(":") for r in (second, first))
    snapshot, date, clock, python_version, torch, packages, mark = newest.split()
    assert (snapshot, python_version, torch, mark) == (new_id, version, "—", "latest")
    assert older.split()[0] == old_id and older.split()[-1] != "latest"
    assert int(packages) == int(older.split()[5]) + 1
    # The columns line up under their headings.
    assert newest.index(version) == header.index("Python") and older.index(version) == header.index(
        "Python"
    )


def test_list_says_so_when_the_workspace_has_no_snapshot(tmp_path: Path) -> None:
    (tmp_path / "store" / "ws" / "files").mkdir(parents=True)
    (tmp_path / "store" / "ws" / "files" / "a.txt").write_text("a")
    result = gpuws_env("list", "--store", tmp_path / "store", "--workspace", "ws")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"No snapshots in {tmp_path / 'store'}/ws\n"


def test_diff_into_a_closed_pipe_ends_quietly(new_venv: Any, tmp_path: Path) -> None:
    python = new_venv()
    where = ["--store", tmp_path / "store", "--workspace", "ws"]
    assert gpuws_env("snapshot", *where, "--python", python).returncode == 0
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head` that has gone away before the first line
    try:
        command = [
            sys.executable,
            "-W",
            "ignore::UserWarning",
            "-m",
            "jupyter_gpu_ws.cli",
            "env",
            "diff",
            *map(str, where),
            "--python",
            python,
            "--json",
        ]
        result = subprocess.run(
            command, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300
        )
    finally:
        os.close(write_end)
    assert [line for line in result.stderr.splitlines() if not line.startswith("store: ")] == []
    assert result.returncode == 128 + signal.SIGPIPE
