"""`jupyter gpuws` as a user runs it: a real process, real files, a local-folder store."""

from __future__ import annotations

import json

import subprocess
import sys
from pathlib import Path

import pytest

from tests.sync.conftest import same_trees, write


def gpuws(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jupyter_gpu_ws.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


@pytest.fixture
def common(tmp_path: Path) -> list[str]:
    return ["--store", str(tmp_path / "store"), "--workspace", "ws", "--state-dir", str(tmp_path / "state")]


def test_jupyter_finds_the_gpuws_subcommand() -> None:
    jupyter = Path(sys.executable).with_name("jupyter")
    result = subprocess.run([str(jupyter), "gpuws", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "restore" in result.stdout


def test_sync_once_then_restore_on_a_fresh_machine(tmp_path: Path, common: list[str]) -> None:
    work = tmp_path / "work"
    for i in range(50):
        write(work, f"src/m{i}.py", f"x = {i}\n")
    write(work, "weights.bin", b"\0" * 300_000)
    result = gpuws("sync", "--workdir", str(work), "--once", *common)
    assert result.returncode == 0, result.stderr
    assert "51 files uploaded" in result.stdout

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    common_fresh = [*common[:-1], str(tmp_path / "state-fresh")]
    result = gpuws("restore", "--workdir", str(fresh), *common_fresh)
    assert result.returncode == 0, result.stderr
    assert "51 files restored" in result.stdout
    assert same_trees(work, fresh)


def test_status_shows_what_is_pending(tmp_path: Path, common: list[str]) -> None:
    work = tmp_path / "work"
    write(work, "a.txt", "a")
    gpuws("sync", "--workdir", str(work), "--once", *common)
    write(work, "b.txt", "bb")
    result = gpuws("status", "--workdir", str(work), *common)
    assert result.returncode == 0, result.stderr
    assert "pending:   1 to upload" in result.stdout and "synced:    1 files" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workdir", "{tmp}/missing", "--store", "{tmp}/store"], "does not exist"),
        (["--workdir", "{tmp}/work", "--store", "nosuchproto://b/x"], "Unknown storage protocol"),
        (["--workdir", "{tmp}/work", "--store", "s3://"], "names no bucket"),
        (["--workdir", "{tmp}/work", "--store", "s3://bucket/x", "--storage-option",
          "endpoint_url=http://127.0.0.1:9", "--storage-option", "key=k", "--storage-option", "secret=s"],
         "store"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_a_non_zero_exit(tmp_path: Path, args: list[str], message: str) -> None:
    write(tmp_path / "work", "keep.txt", "mine")
    args = [a.format(tmp=tmp_path) for a in args]
    result = gpuws("sync", "--once", "--state-dir", str(tmp_path / "state"), *args)
    assert result.returncode == 1
    lines = said(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("jupyter gpuws: error: ") and message in lines[0]
    assert (tmp_path / "work" / "keep.txt").read_text() == "mine"  # nothing changed


def test_usage_errors_exit_2() -> None:
    assert gpuws("sync").returncode == 2


def said(stderr: str) -> list[str]:
    """What a command said on stderr besides the store and workspace it resolved (one line)."""
    lines = stderr.strip().splitlines()
    return [line for line in lines if not line.startswith("store: ")]


def test_workspaces_lists_the_store_and_restore_refuses_one_that_does_not_exist(tmp_path: Path) -> None:
    write(tmp_path / "work", "a.txt", "aaa")
    assert gpuws("sync", "--once", "--workdir", str(tmp_path / "work"), "--store", str(tmp_path / "store"),
                 "--workspace", "alice-work", "--state-dir", str(tmp_path / "state")).returncode == 0
    listing = gpuws("workspaces", "--store", str(tmp_path / "store"))
    assert listing.returncode == 0 and listing.stderr.strip() == f"store: {tmp_path / 'store'}"
    header, row = listing.stdout.strip().splitlines()
    assert header.split()[:4] == ["workspace", "files", "size", "last"] and row.split()[:4] == ["alice-work", "1", "3", "B"]
    as_json = json.loads(gpuws("workspaces", "--store", str(tmp_path / "store"), "--json").stdout)
    assert [(w["name"], w["files"], w["bytes"]) for w in as_json] == [("alice-work", 1, 3)]
    # A fresh machine with a defaulted (or mistyped) name: one line naming what the store holds.
    fresh = tmp_path / "elsewhere"
    fresh.mkdir()
    for command in ("restore", "status"):
        result = gpuws(command, "--workdir", str(fresh), "--store", str(tmp_path / "store"),
                       "--state-dir", str(tmp_path / "state2"))
        assert result.returncode == 1, command
        resolved, error = result.stderr.strip().splitlines()
        assert resolved.startswith(f"store: {tmp_path / 'store'}  workspace: ")
        assert error.startswith("jupyter gpuws: error: No workspace") and "it holds: alice-work" in error
    assert list(fresh.iterdir()) == []  # nothing restored, nothing written
