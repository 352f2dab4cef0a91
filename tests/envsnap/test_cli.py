"""`jupyter gpuws env …` as a user runs it: a real process, real venvs, a local-folder store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from tests.envsnap.conftest import EDITABLE, LOCAL, PINNED, versions


def gpuws_env(*args: str | Path) -> subprocess.CompletedProcess:
    # A checkout used without installing warns on import: not what these tests look at.
    command = [sys.executable, "-W", "ignore::UserWarning", "-m", "jupyter_gpu_ws.cli", "env", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_snapshot_diff_and_offline_restore_end_to_end(source_python: str, new_venv: Any, tmp_path: Path,
                                                      no_index: Callable[[], None]) -> None:
    where = ["--store", tmp_path / "store", "--workspace", "ws"]
    first = gpuws_env("snapshot", *where, "--python", source_python, "--keep-all-wheels")
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
    assert listed.stdout.split() == [first.stdout.split()[2].rstrip(":")]


def test_restore_from_an_empty_store_is_one_line_and_exit_1(tmp_path: Path) -> None:
    result = gpuws_env("restore", "--store", tmp_path / "store", "--workspace", "ws")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"store: {tmp_path / 'store'}  workspace: ws",
        f"jupyter gpuws: error: No workspace 'ws' in {tmp_path / 'store'}: the store holds no workspace yet"]


def test_a_missing_interpreter_is_one_line_and_exit_1(tmp_path: Path) -> None:
    result = gpuws_env("snapshot", "--store", tmp_path / "store", "--workspace", "ws", "--python", tmp_path / "nope")
    assert result.returncode == 1
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("store: ")]
    assert len(lines) == 1 and "Python interpreter not found" in lines[0]
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.json"))


def test_a_failed_package_makes_restore_exit_1_naming_it(source_python: str, new_venv: Any, tmp_path: Path,
                                                         no_index: Callable[[], None]) -> None:
    where = ["--store", tmp_path / "store", "--workspace", "ws"]
    assert gpuws_env("snapshot", *where, "--python", source_python).returncode == 0  # index packages: no wheels
    no_index()
    result = gpuws_env("restore", *where, "--python", new_venv(), "--offline")
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("jupyter gpuws: error: ")]
    assert sorted(line.split()[3].rstrip(":") for line in errors) == sorted(PINNED)


def test_sources_are_built_only_with_allow_sources(store_copy: Any, new_venv: Any, file_server: Any,
                                                   no_index: Callable[[], None]) -> None:
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
    [line] = [l for l in refused.stderr.strip().splitlines() if not l.startswith("store: ")]
    assert line.startswith("jupyter gpuws: error: Restoring would fetch and build 1 package ")
    assert origin["url"] in line and "--allow-sources" in line
    assert file_server.requests == [] and LOCAL[0] not in versions(python)

    allowed = gpuws_env("restore", *where, "--allow-sources")
    assert allowed.returncode == 0, allowed.stderr
    assert f"Fetching and building {LOCAL[0]} {LOCAL[1]} from {origin['url']}" in allowed.stderr
    assert versions(python)[LOCAL[0]] == LOCAL[1]
