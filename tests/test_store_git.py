"""A store written by someone else holds a Git repository whose config names commands: a real
server with Git versioning restores it, looks at it every half second and commits at a persist,
and runs none of those commands."""

from __future__ import annotations

import json
import shlex
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

import jupyter_gpu_ws.lifecycle
from tests.test_sync_api import finished, get, sync_running
from tests.waiting import async_until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

HOOKS = (
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "post-index-change",
    "reference-transaction",
    "pre-auto-gc",
)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def ran(tmp_path: Path) -> Path:
    """Where each hostile command, if it ran, would leave a file named after itself."""
    folder = tmp_path / "ran"
    folder.mkdir()
    return folder


@pytest.fixture
def hostile_store(store_dir: Path, tmp_path: Path, ran: Path) -> Path:
    """The store's files/ as someone else left it: a repository with an fsmonitor command, a
    clean filter for data.txt, and executable hooks."""
    scratch = tmp_path / "elsewhere"
    scratch.mkdir()
    _git(scratch, "init", "-q", "-b", "main")
    (scratch / "train.py").write_text("print('train')\n")
    (scratch / "data.txt").write_text("1,2,3\n")
    (scratch / ".gitattributes").write_text("data.txt filter=evil\n")
    _git(scratch, "add", ".")
    _git(
        scratch,
        "-c",
        "user.name=Eve",
        "-c",
        "user.email=eve@example.org",
        "commit",
        "-q",
        "-m",
        "theirs",
    )

    def touch(name: str) -> str:
        return f"touch {shlex.quote(str(ran / name))}"

    with open(scratch / ".git" / "config", "a", encoding="utf-8") as config:
        config.write(
            f"[core]\n\tfsmonitor = {touch('fsmonitor')}\n"
            f'[filter "evil"]\n\tclean = {touch("clean")}; cat\n\tsmudge = {touch("smudge")}; cat\n'
        )
    for name in HOOKS:
        hook = scratch / ".git" / "hooks" / name
        hook.write_text(f"#!/bin/sh\n{touch('hook-' + name)}\n")
        hook.chmod(0o755)
    files = store_dir / "test-ws" / "files"
    shutil.copytree(scratch, files)
    (files / "data.txt").write_text("1,2,3,4\n")  # changed since their commit: git would clean it
    return files


@pytest.fixture
def gpuws_config(
    gpuws_config: dict[str, Any], hostile_store: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    # The sidebar's `git status` every half second: during the restore, and right after it.
    monkeypatch.setattr(jupyter_gpu_ws.lifecycle, "GIT_STATUS_EVERY", 0.5)
    return {**gpuws_config, "git_versioning": True}


async def test_a_restored_repository_runs_nothing_its_store_wrote(
    jp_fetch: Any, jp_root_dir: Path, ran: Path
) -> None:
    await sync_running(jp_fetch)
    assert (jp_root_dir / ".git" / "config").exists() and (jp_root_dir / "data.txt").exists()

    async def looked_at() -> Any:
        git = (await get(jp_fetch, "runtime"))["git"]
        return git if git and git.get("repository") and git.get("last_commit") else None

    status = await async_until(
        looked_at, timeout=60
    )  # the periodic status ran on the restored repository
    assert status["last_commit"]["message"] == "theirs" and status["filtered"] == 1
    hooks = jp_root_dir / ".git" / "hooks"
    for name in HOOKS:
        assert not (hooks / name).stat().st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH), (
            name
        )

    # A user makes them executable (or a store's backend keeps modes): a persist still runs none.
    for name in HOOKS:
        (hooks / name).chmod(0o755)
    (jp_root_dir / "notes.md").write_text("mine\n")
    response = await jp_fetch("gpuws", "api", "persist", method="POST", body="{}")
    job = await finished(jp_fetch, "persist", json.loads(response.body)["id"])
    assert job["state"] == "done", job["errors"]
    assert job["result"]["git"]["files"] == ["notes.md"] and job["result"]["git"]["filtered"] == [
        "data.txt"
    ]
    assert _git(jp_root_dir, "log", "-1", "--format=%s").startswith("gpuws: persist")

    async def looked_again() -> Any:
        git = (await get(jp_fetch, "runtime"))["git"]
        return git if git["last_commit"]["sha"] == job["result"]["git"]["sha"] else None

    await async_until(looked_again, timeout=30)
    assert sorted(p.name for p in ran.iterdir()) == []
