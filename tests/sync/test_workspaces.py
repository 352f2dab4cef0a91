"""A workspace is found on any machine: the default name does not depend on the folder's path,
an earlier version's name keeps working, and a store's workspaces are listed with their size
and last write."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_gpu_ws.defaults import derive_workspace_name, legacy_workspace_name
from jupyter_gpu_ws.store.workspaces import (
    list_workspaces,
    remember_choice,
    remembered_choice,
    require_workspace,
    resolve_workspace,
)
from jupyter_gpu_ws.sync import LocalBackend, SyncEngine
from jupyter_gpu_ws.sync.errors import StoreMissingError, WorkspaceNotFoundError
from tests.sync.conftest import write

Make = Callable[..., SyncEngine]


def test_the_default_name_is_the_same_wherever_the_folder_sits(tmp_path: Path) -> None:
    here, there = tmp_path / "a" / "project", tmp_path / "mnt" / "other" / "project"
    assert derive_workspace_name(str(here)) == derive_workspace_name(str(there))
    assert derive_workspace_name(str(here)).endswith("-project")
    assert legacy_workspace_name(str(here)) != legacy_workspace_name(
        str(there)
    )  # what it used to do


def test_a_workspace_an_earlier_version_named_keeps_being_used(
    tmp_path: Path, store_dir: Path
) -> None:
    workdir = str(tmp_path / "project")
    backend = LocalBackend(str(store_dir))
    legacy = legacy_workspace_name(workdir)
    default = derive_workspace_name(workdir)
    assert resolve_workspace(backend, default, legacy) == (default, None)  # nothing there yet
    write(store_dir / legacy / "files", "train.py", "x")
    name, why = resolve_workspace(backend, default, legacy)
    assert name == legacy and "earlier version" in (why or "")
    write(store_dir / default / "files", "train.py", "x")  # once the new one exists, it wins
    assert resolve_workspace(backend, default, legacy) == (default, None)


def test_the_store_lists_its_workspaces_with_size_and_last_write(
    workdir: Path, tmp_path: Path, store_dir: Path, make_engine: Make
) -> None:
    write(workdir, "a.txt", "x" * 100)
    write(workdir, "b/c.txt", "y" * 50)
    engine = make_engine(workdir, workspace="alice-project")
    engine.sync()
    engine.close()  # the summary is written with the lease's last words at the latest
    summary = json.loads((store_dir / "alice-project" / ".gpuws" / "summary.json").read_text())
    assert summary["files"] == 2 and summary["bytes"] == 150 and summary["folder"] == "work"
    write(store_dir / "older" / "files", "x.bin", b"z" * 10)  # no summary: counted by listing
    (store_dir / "not-a-workspace").mkdir()
    found = {w.name: w for w in list_workspaces(LocalBackend(str(store_dir)))}
    assert set(found) == {"alice-project", "older"}
    assert (found["alice-project"].files, found["alice-project"].bytes) == (2, 150)
    assert found["alice-project"].last_write and found["alice-project"].host
    assert (found["older"].files, found["older"].bytes) == (1, 10) and found["older"].last_write


def test_a_missing_workspace_is_an_error_naming_those_that_exist(store_dir: Path) -> None:
    backend = LocalBackend(str(store_dir))
    with pytest.raises(StoreMissingError, match="store folder .* is missing"):
        require_workspace(backend, "mine")  # no store at all: not an empty one
    store_dir.mkdir()
    with pytest.raises(WorkspaceNotFoundError, match="holds no workspace yet"):
        require_workspace(backend, "mine")
    write(store_dir / "root-project" / "files", "a.txt", "a")
    with pytest.raises(
        WorkspaceNotFoundError, match=r"No workspace 'mine' in .*; it holds: root-project"
    ):
        require_workspace(backend, "mine")
    require_workspace(backend, "root-project")


def test_a_chosen_workspace_is_remembered_for_the_folder(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    assert remembered_choice(state, "/content") is None
    remember_choice(state, "/content", "root-project")
    remember_choice(state, "/other", "x")
    assert (
        remembered_choice(state, "/content") == "root-project"
        and remembered_choice(state, "/other") == "x"
    )
