"""One workspace rule for every `jupyter gpuws` command (workspace_rule.py), as a user meets it:
real `jupyter-gpuws` processes, real folders, a local-folder store, and a real server.

Each process gets a Jupyter runtime folder and data folder of its own, so that no server or
record of this machine's takes part; the current folder is a temporary one unless a test says.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.servers import server_process
from tests.sync.conftest import S3_ACCESS_KEY, S3_BUCKET, S3_SECRET_KEY, s3_server, write  # noqa: F401
from tests.sync.s3server import S3Server
from tests.waiting import until

GPUWS = Path(sys.executable).with_name("jupyter-gpuws")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """This machine as a user's with no server running and nothing synced yet."""
    environ = {k: v for k, v in os.environ.items() if k not in ("GPUWS_STORE", "JUPYTER_TOKEN")}
    return dict(
        environ,
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTER_DATA_DIR=str(tmp_path / "data"),
    )


def gpuws(env: dict[str, str], cwd: Path, *args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(GPUWS), *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one line an error is, besides the line saying what was resolved."""
    lines = [line for line in result.stderr.splitlines() if not line.startswith("store: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def resolved(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("store: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


@pytest.fixture
def synced(tmp_path: Path, env: dict[str, str]) -> tuple[Path, Path]:
    """A work directory synced once to the workspace `proj-ws` from this machine (the default
    record folder): a work directory this machine knows."""
    work, store = tmp_path / "proj", tmp_path / "store"
    write(work, "src/train.py", "print('hi')\n")
    store.mkdir()
    result = gpuws(
        env,
        tmp_path,
        "sync",
        "--once",
        "--workdir",
        work,
        "--store",
        store,
        "--workspace",
        "proj-ws",
    )
    assert result.returncode == 0, result.stderr
    return work, store


@pytest.fixture
def bare_python(tmp_path: Path) -> str:
    """An interpreter with no packages: a snapshot of it is quick and needs no build."""
    venv.create(tmp_path / "bare", with_pip=False)
    return str(tmp_path / "bare" / "bin" / "python")


def test_status_inside_a_synced_folder_means_its_workspace(
    synced: tuple[Path, Path], env: dict[str, str]
) -> None:
    work, store = synced
    result = gpuws(env, work / "src", "status")  # from a folder inside it, no flags
    assert result.returncode == 0, result.stderr
    assert (
        resolved(result)
        == f"store: {store}  workspace: proj-ws  (as this machine last synced {work})"
    )
    assert "in store:  1 file from here, 12 B" in result.stdout
    assert "pending:   0 files to upload" in result.stdout


def test_env_commands_inside_a_synced_folder_use_its_workspace_and_make_no_other(
    synced: tuple[Path, Path], env: dict[str, str], bare_python: str
) -> None:
    work, store = synced
    taken = gpuws(env, work, "env", "snapshot", "--python", bare_python)
    assert taken.returncode == 0, taken.stderr
    assert resolved(taken).startswith(f"store: {store}  workspace: proj-ws  (")
    assert taken.stdout.startswith("New snapshot ")
    listed = gpuws(env, work / "src", "env", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[0] == taken.stdout.split()[2].rstrip(":")
    assert sorted(p.name for p in store.iterdir()) == [
        "proj-ws"
    ]  # no workspace named after a folder


def test_checkpoint_export_looks_for_a_run_in_the_work_directory_the_folder_is_in(
    synced: tuple[Path, Path], env: dict[str, str], tmp_path: Path
) -> None:
    work, _ = synced
    (work / ".gpuws" / "checkpoints" / "other-run").mkdir(parents=True)
    result = gpuws(
        env, work / "src", "checkpoint", "export", "my-run", "--to", tmp_path / "model.pt"
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"jupyter gpuws: error: No checkpoints of 'my-run' in "
        f"{work / '.gpuws' / 'checkpoints'} (runs there: other-run)"
    ]
    assert not (tmp_path / "model.pt").exists()


def test_a_named_work_directory_takes_the_store_it_synced_to(
    synced: tuple[Path, Path], env: dict[str, str], tmp_path: Path
) -> None:
    work, store = synced
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = gpuws(env, elsewhere, "status", "--workdir", work)
    assert result.returncode == 0, result.stderr
    assert (
        resolved(result)
        == f"store: {store}  workspace: proj-ws  (as this machine last synced {work})"
    )


def test_flags_win_over_the_folder_and_reading_a_missing_workspace_makes_nothing(
    synced: tuple[Path, Path], env: dict[str, str], tmp_path: Path
) -> None:
    work, store = synced
    before = tree(store)
    for command in (
        ["status"],
        ["env", "list"],
        ["env", "diff"],
        ["restore", "--workdir", tmp_path / "new", "--store", store],
    ):
        result = gpuws(env, work, *command, "--workspace", "nope")
        assert result.returncode == 1, (command, result.stderr)
        assert resolved(result).startswith(f"store: {store}  workspace: nope"), command
        assert error_line(result) == (
            f"jupyter gpuws: error: No workspace 'nope' in {store}; it holds: proj-ws "
            "(choose one with --workspace)"
        ), command
    assert tree(store) == before
    assert not (tmp_path / "new").exists()  # a restore that cannot start makes no folder


def test_outside_any_work_directory_a_command_says_what_to_pass_and_makes_nothing(
    tmp_path: Path, env: dict[str, str], bare_python: str
) -> None:
    here = tmp_path / "somewhere"
    here.mkdir()
    env = dict(env, GPUWS_STORE=str(tmp_path / "store"))
    not_here = (
        f"jupyter gpuws: error: {here} is not in a work directory (of a running Jupyter Server with this "
        "extension, or one this machine synced): pass "
    )
    for command, what in [
        (["status"], "--workdir DIR"),
        (["restore"], "--workdir DIR"),
        (["env", "list"], "--workspace NAME (or --workdir DIR)"),
        (["env", "snapshot", "--python", bare_python], "--workspace NAME (or --workdir DIR)"),
    ]:
        result = gpuws(env, here, *command)
        assert result.returncode == 2, (command, result.stderr)
        assert result.stderr.splitlines() == [not_here + what], command
    del env["GPUWS_STORE"]
    result = gpuws(env, here, "workspaces")
    assert result.returncode == 2 and result.stderr.splitlines() == [
        not_here + "--store URL (or set GPUWS_STORE)"
    ]
    assert (
        list(here.iterdir()) == []
        and not (tmp_path / "store").exists()
        and not (tmp_path / "data").exists()
    )


def test_a_store_that_is_not_there_is_an_error_for_every_reader(
    tmp_path: Path, env: dict[str, str]
) -> None:
    missing = tmp_path / "missing"
    no_store = (
        f"jupyter gpuws: error: No store at {missing}: nothing there to read (check the URL, or mount the "
        "drive it is on)"
    )
    result = gpuws(env, tmp_path, "workspaces", "--store", f"file://{missing}")
    assert result.returncode == 1 and error_line(result) == no_store
    for command in (
        ["status", "--workdir", tmp_path],
        ["env", "list"],
        ["restore", "--workdir", tmp_path / "new"],
    ):
        result = gpuws(env, tmp_path, *command, "--store", missing, "--workspace", "ws")
        assert result.returncode == 1 and error_line(result) == no_store, command
    assert not missing.exists() and not (tmp_path / "new").exists()


def test_restore_into_a_folder_that_does_not_exist_makes_it(
    synced: tuple[Path, Path], env: dict[str, str], tmp_path: Path
) -> None:
    _, store = synced
    fresh = tmp_path / "fresh" / "proj"  # its parent is missing too
    result = gpuws(
        env, tmp_path, "restore", "--workdir", fresh, "--store", store, "--workspace", "proj-ws"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("1 file restored (12 B)")
    assert (fresh / "src" / "train.py").read_text() == "print('hi')\n"


@pytest.mark.parametrize("command", [["status"], ["restore"], ["env", "list"], ["workspaces"]])
def test_an_unknown_flag_shows_the_commands_usage(
    tmp_path: Path, env: dict[str, str], command: list[str]
) -> None:
    result = gpuws(env, tmp_path, *command, "--no-such-flag")
    assert result.returncode == 2
    name = " ".join(command)
    assert result.stderr.startswith(f"usage: jupyter gpuws {name} [-h]")
    assert (
        result.stderr.splitlines()[-1]
        == f"jupyter gpuws {name}: error: unrecognized arguments: --no-such-flag"
    )
    assert result.stdout == ""


def test_with_a_server_running_commands_follow_its_settings(
    tmp_path: Path, env: dict[str, str], bare_python: str
) -> None:
    runtime = Path(env["JUPYTER_RUNTIME_DIR"])
    runtime.mkdir()
    with server_process(tmp_path / "server", runtime) as server:
        until(lambda: server.api("/gpuws/api/sync")["state"] == "idle", 60, "the server's sync")
        inside = server.root / "notebooks"
        inside.mkdir()
        # This machine's record of the same folder says another store: the server's settings win.
        other = tmp_path / "other-store"
        other.mkdir()
        assert (
            gpuws(
                env,
                tmp_path,
                "sync",
                "--once",
                "--workdir",
                server.root,
                "--store",
                other,
                "--workspace",
                "old",
            ).returncode
            == 0
        )
        from_server = (
            f"store: {server.store}  workspace: test-ws  (as the server at "
            f"http://localhost:{server.port}/ syncs {server.root})"
        )
        status = gpuws(env, inside, "status")
        assert status.returncode == 0, status.stderr
        assert resolved(status) == from_server
        assert status.stdout.startswith(f"store:     {server.store}/test-ws\n")
        assert "last sync: never" not in status.stdout  # the server's own record
        taken = gpuws(env, inside, "env", "snapshot", "--python", bare_python)
        assert taken.returncode == 0, taken.stderr
        assert resolved(taken) == from_server
        listed = gpuws(env, server.root, "env", "list")
        assert (
            listed.returncode == 0
            and listed.stdout.splitlines()[1].split()[0] == taken.stdout.split()[2][:-1]
        )
        assert sorted(p.name for p in server.store.iterdir() if not p.name.startswith(".")) == [
            "test-ws"
        ]


def test_status_in_another_terminal_asks_the_server_and_needs_no_store_credentials(
    tmp_path: Path,
    env: dict[str, str],
    s3_server: S3Server,  # noqa: F811 (the fixture imported above)
) -> None:
    # The store's credentials are the server's own (its configuration), not this terminal's.
    runtime = Path(env["JUPYTER_RUNTIME_DIR"])
    runtime.mkdir()
    config = {
        "store_url": f"s3://{S3_BUCKET}/status-{tmp_path.name}",
        "storage_options": {
            "endpoint_url": s3_server.endpoint,
            "key": S3_ACCESS_KEY,
            "secret": S3_SECRET_KEY,
        },
        "sync_debounce": 0.02,
    }
    with server_process(tmp_path / "server", runtime, config) as server:
        until(lambda: server.api("/gpuws/api/sync")["state"] == "idle", 60, "the server's sync")
        bare = {k: v for k, v in env.items() if not k.startswith("AWS_")}
        status = gpuws(bare, server.root, "status")
        assert status.returncode == 0, status.stderr
        assert status.stdout.startswith(f"store:     s3://{S3_BUCKET}/status-{tmp_path.name}/")
        assert f"server:    http://localhost:{server.port}/ (idle)" in status.stdout
        assert "last sync: " in status.stdout and "never" not in status.stdout
        assert S3_SECRET_KEY not in status.stdout + status.stderr
        # A file that cannot be synced is listed there too, with why: never left out in silence.
        (server.root / "elsewhere").symlink_to(tmp_path)
        until(lambda: server.api("/gpuws/api/sync").get("problem_files"), 30, "the link listed")
        status = gpuws(bare, server.root, "status")
        assert "not synced: 1 file cannot be synced:" in status.stdout, status.stdout
        assert "  elsewhere: a symbolic link pointing outside the work directory" in status.stdout
