"""`jupyter gpuws run|jobs|status` and `%gpuws run|jobs|status` against a real server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.userjobs.record import JobRecord
from tests.servers import ServerProcess, server_process
from tests.test_successor import kernel_client, run
from tests.userjobs.jobfiles import FAILING, job_key, write
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

OK = "print('the job ran', flush=True)\n"
NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "c1",
            "metadata": {},
            "outputs": [],
            "source": "print('from the notebook')",
        }
    ],
    "metadata": {},
    "nbformat": 4,
    "nbformat_minor": 5,
}


# A record someone else wrote into the store (unsigned): it waits for approval, and its name
# holds a terminal's escape sequence and a right-to-left override.
PLANTED = JobRecord(
    id="j-0000000000aa",
    name="\x1b[31mplanted\u202egnp.py",
    kind="command",
    command=["python", "-c", "print('\x1b[2J')"],
    workspace="test-ws",
    cwd="sub",
    state="interrupted",
    created=1.0,
    updated=1.0,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("jobs-cli")
    records = folder / "a" / "store" / "test-ws" / ".gpuws" / "jobs"
    records.mkdir(parents=True)
    (records / f"{PLANTED.id}.json").write_text(json.dumps(PLANTED.to_json()))
    with (
        job_key("the-cli-tests-key-long-enough-0123456789"),
        server_process(folder / "a", folder / "runtime", {"sync_debounce": 0.05}) as server,
    ):
        until(lambda: server.api("/gpuws/api/sync")["state"] not in ("starting",), 60, "the sync")
        (server.root / "sub").mkdir()
        write(server.root / "sub", "ok.py", OK)
        write(server.root / "sub", "nb.ipynb", json.dumps(NOTEBOOK))
        write(server.root, "fail.py", FAILING)
        yield server


def cli(
    runtime: Path, *args: str, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_gpu_ws.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=120,
        env={**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime), **env},
    )


def ended(server: ServerProcess, job_id: str) -> dict[str, Any]:
    return until(
        lambda: (
            (j := server.api(f"/gpuws/api/jobs/{job_id}"))["state"] in ("finished", "failed") and j
        ),
        120,
        f"job {job_id}'s end",
    )


def test_jupyter_gpuws_run_starts_the_command_in_the_folder_it_is_run_from_and_prints_the_job_id(
    server: ServerProcess,
) -> None:
    done = cli(
        server.runtime,
        "run",
        "--name",
        "from-cli",
        "--",
        "python",
        "ok.py",
        cwd=server.root / "sub",
    )
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    # A terminal's user is pointed at the terminal's command for the log, not at an HTTP route.
    assert f"follow it with jupyter gpuws jobs --log {job_id} --follow" in done.stderr
    assert "api/" not in done.stderr
    job = ended(server, job_id)
    assert job["name"] == "from-cli" and job["cwd"] == "sub" and job["state"] == "finished"
    assert "the job ran" in job["log_tail"]
    listing = cli(server.runtime, "jobs")
    assert listing.returncode == 0 and f"from-cli ({job_id}): finished" in listing.stdout


def test_jupyter_gpuws_run_of_a_notebook_runs_it_from_the_folder_it_is_in(
    server: ServerProcess,
) -> None:
    done = cli(server.runtime, "run", "nb.ipynb", cwd=server.root / "sub")
    assert done.returncode == 0, done.stderr
    job = ended(server, done.stdout.strip())
    assert job["notebook"] == "sub/nb.ipynb" and job["state"] == "finished"
    assert "from the notebook" in (server.root / "sub" / "nb.job.ipynb").read_text()


def test_a_notebook_jobs_log_has_its_output_and_warnings_but_not_the_kernels_tcp_warning(
    server: ServerProcess,
) -> None:
    cell = (
        "import os, sys, warnings\n"
        "print('printed by the notebook')\n"
        "warnings.warn('a warning of the notebook its own')\n"
        "os.write(2, b'written to the kernel process stderr\\n')"
    )
    notebook = {**NOTEBOOK, "cells": [{**NOTEBOOK["cells"][0], "source": cell}]}  # type: ignore[index]
    write(server.root, "warns.ipynb", json.dumps(notebook))
    job = server.api("/gpuws/api/jobs", "POST", {"notebook": "warns.ipynb"})
    assert ended(server, job["id"])["state"] == "finished"
    log = "\n".join(server.api(f"/gpuws/api/jobs/{job['id']}/log?lines=1000")["lines"])
    assert "printed by the notebook" in log
    assert "UserWarning: a warning of the notebook its own" in log
    assert "written to the kernel process stderr" in log
    assert "without encryption" not in log and "TCP" not in log, log


def test_jupyter_gpuws_run_of_a_missing_program_is_one_line_and_exit_2(
    server: ServerProcess,
) -> None:
    done = cli(server.runtime, "run", "--", "no-such-program-anywhere")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (  # the server's words, without the HTTP code
        "jupyter gpuws: error: no-such-program-anywhere: command not found on this server's PATH"
    )


def test_a_server_refusing_the_token_is_said_in_words_without_the_http_code(
    server: ServerProcess,
) -> None:
    done = cli(
        server.runtime,
        "jobs",
        "--server",
        f"http://127.0.0.1:{server.port}/",
        JUPYTER_TOKEN="not-the-servers-token",
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == (
        "jupyter gpuws: error: the server refused access (a token it does not take, or no "
        "permission): Forbidden"
    )


def test_the_job_managers_info_lines_are_in_the_servers_log_with_time_and_level_as_its_own(
    server: ServerProcess,
) -> None:
    job = server.api("/gpuws/api/jobs", "POST", {"command": ["python", "ok.py"], "cwd": "sub"})
    ended(server, job["id"])
    started = re.compile(
        r"\[I \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} jupyter_gpu_ws\.userjobs\.manager\] "
        + re.escape(f"gpuws: job {job['id']} attempt 1 started: python ok.py")
    )
    until(lambda: started.search(server.log.read_text()), 30, "the manager's line")
    # As the server's own lines are written:
    assert re.search(
        r"\[I \S+ \S+ ServerApp\] Jupyter Server \S+ is running at", server.log.read_text()
    )


def test_jupyter_gpuws_jobs_log_prints_the_last_lines_of_a_jobs_log(server: ServerProcess) -> None:
    job = server.api(
        "/gpuws/api/jobs", "POST", {"command": ["python", "-c", "for i in range(9): print(i)"]}
    )
    ended(server, job["id"])
    done = cli(server.runtime, "jobs", "--log", job["id"], "--lines", "3")
    assert (done.returncode, done.stdout, done.stderr) == (0, "6\n7\n8\n", "")
    unknown = cli(server.runtime, "jobs", "--log", "j-000000000000")
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == "jupyter gpuws: error: No job 'j-000000000000'"


def follow(server: ServerProcess, job_id: str, stdout: Any) -> subprocess.Popen[str]:
    """`jupyter gpuws jobs --log ID --follow` against `server`, its output into `stdout`."""
    return subprocess.Popen(
        [sys.executable, "-m", "jupyter_gpu_ws.cli", "jobs", "--log", job_id, "--follow"],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "JUPYTER_RUNTIME_DIR": str(server.runtime)},
    )


def test_jupyter_gpuws_jobs_log_follow_prints_each_line_as_the_job_writes_it_until_it_ends(
    server: ServerProcess, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    # Two lines, then (once the follower has shown them) a line left open, its end, one more.
    code = (
        "import os, sys, time\n"
        "print('first', flush=True)\nprint('second', flush=True)\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
        "sys.stdout.write('third, '); sys.stdout.flush(); time.sleep(0.3)\n"
        "print('ended', flush=True)\nprint('last', flush=True)\n"
    )
    job = server.api("/gpuws/api/jobs", "POST", {"command": ["python", "-c", code]})
    until(
        lambda: "second" in server.api(f"/gpuws/api/jobs/{job['id']}")["log_tail"],
        60,
        "the job's 2 lines",
    )
    out = tmp_path / "out"
    with out.open("w") as stdout:
        follower = follow(server, job["id"], stdout)
        until(lambda: out.read_text() == "first\nsecond\n", 60, "the follower's first lines")
        assert follower.poll() is None  # the job runs: the follower waits for more
        go.touch()
        _, stderr = follower.communicate(timeout=60)
    assert follower.returncode == 0, stderr
    assert out.read_text() == "first\nsecond\nthird, ended\nlast\n"
    assert stderr.strip().endswith(f"({job['id']}): finished")


def test_a_followed_log_that_ends_in_an_open_line_ends_it_before_the_jobs_end_is_told(
    server: ServerProcess, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    code = (
        "import os, sys, time\n"
        "sys.stdout.write('partial, no newline'); sys.stdout.flush()\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
    )
    job = server.api("/gpuws/api/jobs", "POST", {"command": ["python", "-c", code]})
    out = tmp_path / "out"
    with out.open("w") as stdout:
        follower = follow(server, job["id"], stdout)
        until(lambda: out.read_text() == "partial, no newline", 60, "the follower's open line")
        go.touch()  # the job ends with nothing more written
        _, stderr = follower.communicate(timeout=60)
    assert follower.returncode == 0, stderr
    assert out.read_text() == "partial, no newline\n"


def test_jupyter_gpuws_jobs_shows_what_approving_a_record_from_the_store_runs_escaped(
    server: ServerProcess,
) -> None:
    done = cli(server.runtime, "jobs")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "(j-0000000000aa)" in line)
    assert lines[at].startswith("\\x1b[31mplanted\\u202egnp.py (j-0000000000aa): interrupted")
    assert "waits for your approval (restart it): not signed" in lines[at]
    assert lines[at + 1 : at + 3] == [
        "  runs: python -c 'print('\"'\"'\\x1b[2J'\"'\"')'",
        "  in: sub",
    ]
    assert "\x1b" not in done.stdout and "\u202e" not in done.stdout


def test_jupyter_gpuws_run_without_a_server_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = cli(tmp_path, "run", "--", "python", "x.py")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "No running Jupyter Server" in done.stderr


def test_status_in_a_terminal_lists_the_jobs_the_store_records(server: ServerProcess) -> None:
    job = server.api(
        "/gpuws/api/jobs", "POST", {"command": ["python", "fail.py"], "name": "for-status"}
    )
    ended(server, job["id"])
    until(
        lambda: (server.store / "test-ws" / ".gpuws" / "jobs" / f"{job['id']}.json").exists(),
        30,
        "the record",
    )
    done = cli(
        server.runtime,
        "status",
        "--workdir",
        str(server.root),
        "--store",
        str(server.store),
        "--workspace",
        "test-ws",
        "--state-dir",
        str(server.state),
    )
    assert done.returncode == 0, done.stderr
    assert f"for-status ({job['id']}): failed · exit code 3" in done.stdout


def displayed(client: Any, code: str, timeout: float = 120) -> str:
    """What a cell displayed as text (the magic's status is a display bundle, not a print)."""
    msg_id = client.execute(code)
    out: list[str] = []
    while True:
        msg = client.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "display_data":
            out.append(msg["content"]["data"].get("text/plain", ""))
        elif msg["msg_type"] == "error":
            raise AssertionError("\n".join(msg["content"]["traceback"]))
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return "".join(out)


def test_the_magic_runs_a_job_and_lists_it_in_its_status(server: ServerProcess) -> None:
    client = kernel_client(server, "sub/start.ipynb")
    try:
        printed = run(
            client, "%load_ext jupyter_gpu_ws\n%gpuws run --name from-magic -- python ok.py"
        )
        assert printed.startswith("started from-magic as job j-"), printed
        job_id = printed.split("as job ")[1].split()[0]
        assert ended(server, job_id)["state"] == "finished"
        assert f"from-magic ({job_id}): finished" in run(client, "%gpuws jobs")
        status = displayed(client, "%gpuws status")
        assert "Jobs:" in status and f"from-magic ({job_id})" in status, status
        bare = run(client, "%gpuws run")  # no command: one line why, the usage once
        assert bare.startswith("gpuws: ") and bare.count("usage: %gpuws run") == 1, bare
        bogus = run(client, "%gpuws bogus")
        assert bogus.startswith("gpuws: no command 'bogus'\nusage: %gpuws status"), bogus
    finally:
        client.stop_channels()
