"""`jupyter gpuws persist --wait` against a running server (a Kubernetes preStop hook): exit 0
once persisted, non-zero with one line when it failed or ran out of time."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import ServerProcess, server_process
from tests.sync.conftest import s3_env, s3_server, s3_url  # noqa: F401 - the SeaweedFS fixtures
from tests.test_sync_api import mirror
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)


def persist(runtime: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime))
    return subprocess.run(
        [sys.executable, "-m", "jupyter_gpu_ws.cli", "persist", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    with server_process(tmp_path, runtime) as running:
        until(lambda: running.api("/gpuws/api/sync")["state"] == "idle", 60, "the server's sync")
        yield running


def test_wait_exits_0_once_the_files_are_in_the_store(server: ServerProcess) -> None:
    (server.root / "notes.md").write_text("before the pod goes")  # the watcher would wait an hour
    result = persist(server.runtime, "--wait", "--timeout", "60")
    assert result.returncode == 0, result.stderr
    assert (mirror(server.store) / "notes.md").read_text() == "before the pod goes"
    assert (
        f":{server.port}/, store {server.store}" in result.stderr
        and "workspace test-ws" in result.stderr
    )


def test_wait_on_a_store_on_this_disk_says_the_files_are_on_this_machines_disk_only(
    server: ServerProcess,
) -> None:
    (server.root / "notes.md").write_text("on this disk")
    result = persist(server.runtime, "--wait", "--timeout", "60")
    assert result.returncode == 0, result.stderr
    [line] = [
        line
        for line in result.stderr.splitlines()
        if line.startswith("Copied to this machine's disk only: ")
    ]
    # The watcher may have carried the file before the persist looked: either way it is in the store.
    assert (
        "in the store: 1 file" in line
        and "Set GPUWS_STORE" in line
        and "All saved" not in result.stderr
    )


def test_wait_on_a_store_off_this_machine_says_all_saved(
    tmp_path: Path,
    s3_url: str,  # noqa: F811 - the fixture imported above
) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    with server_process(tmp_path, runtime, {"store_url": s3_url}) as server:
        until(lambda: server.api("/gpuws/api/sync")["state"] == "idle", 60, "the server's sync")
        (server.root / "notes.md").write_text("in the bucket")
        result = persist(runtime, "--wait", "--timeout", "60")
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("All saved: ")]
    assert "in the store: 1 file" in line and "this machine's disk" not in result.stderr


def test_a_failed_persist_exits_1_with_one_line(server: ServerProcess) -> None:
    (server.root / "data").mkdir()
    (server.root / "data" / "a.txt").write_text("x")
    # Where the folder must go in the store, a file: the upload cannot succeed.
    blocker = mirror(server.store) / "data"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("in the way")
    result = persist(server.runtime, "--wait", "--timeout", "60")
    assert result.returncode == 1
    errors = [
        line for line in result.stderr.splitlines() if line.startswith("jupyter gpuws: error:")
    ]
    assert len(errors) == 1 and "Persist failed" in errors[0], result.stderr
    assert blocker.read_text() == "in the way"  # nothing of the user's overwritten


def test_a_persist_out_of_time_exits_1_with_one_line(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    # 200 KB/s for 4 MB: twenty seconds of upload, against a one-second timeout.
    with server_process(tmp_path, runtime, {"bandwidth_limit": 200_000}) as server:
        until(lambda: server.api("/gpuws/api/sync")["state"] == "idle", 60, "the server's sync")
        (server.root / "big.bin").write_bytes(os.urandom(4 * 2**20))
        result = persist(runtime, "--wait", "--timeout", "1")
    assert result.returncode == 1
    errors = [
        line for line in result.stderr.splitlines() if line.startswith("jupyter gpuws: error:")
    ]
    assert len(errors) == 1 and "not finished after 1 s" in errors[0], result.stderr


def test_no_running_server_is_one_line_and_exit_1(tmp_path: Path) -> None:
    result = persist(tmp_path, "--wait")
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        == f"jupyter gpuws: error: No running Jupyter Server found in {tmp_path}"
    )


def test_with_no_wait_it_prints_the_job_and_how_to_follow_it_and_returns(
    server: ServerProcess,
) -> None:
    result = persist(server.runtime, "--no-wait")
    assert result.returncode == 0, result.stderr
    job = server.api(f"/gpuws/api/persist/{result.stdout.strip()}")
    assert job["kind"] == "persist"
    assert f"gpuws/api/persist/{job['id']}" in result.stderr


def test_by_default_it_waits_showing_progress_and_says_the_outcome(server: ServerProcess) -> None:
    result = persist(server.runtime)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""  # no id: it waited
    lines = result.stderr.splitlines()
    assert lines[0].startswith("server ") and "store ?" not in lines[0]
    assert "(" in lines[-1] and lines[-1].endswith(" s)")  # the outcome and how long it took
