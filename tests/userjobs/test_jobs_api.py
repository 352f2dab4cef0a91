"""The jobs' API on a real server (a separate process, its store a local folder): what a job
becomes when it fails, what is refused, what a flood of output does, and which records from
the store are run."""

from __future__ import annotations

import json
import math
import os
import time
import urllib.error
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.userjobs import manifest, trust
from jupyter_gpu_ws.userjobs.record import JobRecord
from tests.servers import ServerProcess, server_process
from tests.test_successor import kill_everything
from tests.userjobs.jobfiles import (
    BROKEN,
    FAILING,
    FLOOD,
    TRAIN,
    job_key,
    losses,
    write,
)
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)

KEY = "this-users-job-key-long-enough-0123456789"
# The manifest of a work directory without code (userjobs/manifest.py).
NO_CODE = manifest.take(Path("."), [], frozenset()).to_json()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("jobs-api")
    with (
        job_key(KEY),
        server_process(
            folder / "a", folder / "runtime", {"sync_debounce": 0.05, "job_stop_grace": 2.0}
        ) as server,
    ):
        until(lambda: server.api("/gpuws/api/sync")["state"] not in ("starting",), 60, "the sync")
        for name, text in (("fail.py", FAILING), ("broken.py", BROKEN), ("flood.py", FLOOD)):
            write(server.root, name, text)
        (server.root / "sub").mkdir()
        (server.root / "out").symlink_to(folder)
        (server.root / "bad.ipynb").write_text("{not json")
        write_notebook(
            server.root / "sub" / "hello.ipynb", ["x = 6 * 7", "print('the answer is', x)"]
        )
        yield server


def write_notebook(path: Path, cells: list[str]) -> None:
    import nbformat

    nbformat.write(
        nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path
    )


def ended(server: ServerProcess, job_id: str, timeout: float = 120) -> dict[str, Any]:
    return until(
        lambda: (
            (j := server.api(f"/gpuws/api/jobs/{job_id}"))["state"]
            in ("finished", "failed", "stopped")
            and j
        ),
        timeout,
        f"job {job_id}'s end",
    )


def error_of(server: ServerProcess, path: str, method: str, body: Any) -> tuple[int, str]:
    try:
        server.api(path, method, body)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())["message"]
    raise AssertionError(f"{method} {path} {body!r} was accepted")


def test_a_failing_job_is_retried_then_reported_failed_with_each_attempts_reason(
    server: ServerProcess,
) -> None:
    job = server.api("/gpuws/api/jobs", "POST", {"command": ["python", "fail.py"], "retries": 2})
    done = ended(server, job["id"])
    assert done["state"] == "failed"
    assert [a["number"] for a in done["attempts"]] == [1, 2, 3]
    assert all(
        a["returncode"] == 3 and "exit code 3" in a["reason"] and a["retryable"]
        for a in done["attempts"]
    )
    assert done["reason"].startswith("attempt 3 of 3: ") and "exit code 3" in done["reason"]
    assert "about to fail" in done["log_tail"]
    # Each later attempt's lines begin under a line of their own: never taken for the last one's.
    marks = [line for line in done["log_tail"] if line.startswith("\u2500\u2500 gpuws: attempt ")]
    assert [m.split(",")[0] for m in marks][-1] == "\u2500\u2500 gpuws: attempt 3", done["log_tail"]
    assert done["log_tail"].index(marks[-1]) < len(done["log_tail"]) - 1  # its output follows


def test_restarting_a_failed_job_runs_it_again_with_all_its_retries(server: ServerProcess) -> None:
    job = server.api("/gpuws/api/jobs", "POST", {"command": ["python", "fail.py"], "retries": 1})
    assert len(ended(server, job["id"])["attempts"]) == 2
    restarted = server.api(f"/gpuws/api/jobs/{job['id']}/restart", "POST", {})
    assert restarted["state"] == "running"
    done = until(
        lambda: (
            len((j := server.api(f"/gpuws/api/jobs/{job['id']}"))["attempts"]) == 4
            and j["state"] == "failed"
            and j
        ),
        120,
        "the restarted job's two attempts",
    )
    assert done["reason"].startswith("attempt 2 of 2: ")


def test_a_notebook_job_runs_headless_and_writes_its_outputs_into_a_copy_beside_it(
    server: ServerProcess,
) -> None:
    import nbformat

    job = server.api("/gpuws/api/jobs", "POST", {"notebook": "sub/hello.ipynb"})
    assert (
        job["kind"] == "notebook"
        and job["output"] == "sub/hello.job.ipynb"
        and job["name"] == "hello"
    )
    assert ended(server, job["id"])["state"] == "finished"
    copy = nbformat.read(server.root / "sub" / "hello.job.ipynb", as_version=4)
    assert copy.cells[1].outputs[0]["text"] == "the answer is 42\n"
    assert nbformat.read(server.root / "sub" / "hello.ipynb", as_version=4).cells[1].outputs == []


NAN_AT = 12


def nan_job(server: ServerProcess, folder: str, retries: int, once: bool) -> dict[str, Any]:
    """A training job whose loss becomes NaN at step NAN_AT (in every attempt, or the first only),
    with a checkpoint every 5 steps and steps slow enough that the NaN is seen long before its end."""
    (server.root / folder).mkdir()
    write(
        server.root / folder, f"{folder}.py", TRAIN
    )  # its own run: a run's checkpoints go by its script's name
    command = ["python", f"{folder}.py", "200", "0.1", "5", str(NAN_AT)] + (
        ["nan-seen"] if once else []
    )
    return server.api(
        "/gpuws/api/jobs", "POST", {"command": command, "retries": retries, "cwd": folder}
    )


def test_two_jobs_of_one_notebook_at_once_write_their_outputs_into_copies_of_their_own(
    server: ServerProcess,
) -> None:
    write_notebook(
        server.root / "twice.ipynb",
        ["import os, time\nprint('job', os.environ['GPUWS_JOB_ID'])\ntime.sleep(3)"],
    )
    first = server.api("/gpuws/api/jobs", "POST", {"notebook": "twice.ipynb"})
    second = server.api("/gpuws/api/jobs", "POST", {"notebook": "twice.ipynb"})
    assert first["output"] == "twice.job.ipynb"
    assert second["output"] == f"twice.job-{second['id'][-4:]}.ipynb"
    for job in (first, second):
        assert ended(server, job["id"])["state"] == "finished"
        text = (server.root / job["output"]).read_text()
        assert f"job {job['id']}" in text  # each its own outputs, none written over
        server.api(f"/gpuws/api/jobs/{job['id']}", "DELETE")


def test_a_loss_the_training_view_flags_not_finite_ends_the_attempt_which_resumes_from_a_healthy_checkpoint(
    server: ServerProcess,
) -> None:
    job = nan_job(server, "nan-once", retries=2, once=True)
    done = ended(server, job["id"], 300)
    assert done["state"] == "finished", done["reason"]
    first, second = done["attempts"]
    assert first["reason"] == f"the loss was not finite at step {NAN_AT}" and first["retryable"]
    # Stopped by the server, not run to its end (the step last seen may lag the loop's own).
    assert first["step"] < 150 and second["returncode"] == 0
    resumed = [int(line.split()[1]) for line in done["log_tail"] if line.startswith("resumed ")]
    assert (
        resumed and 0 < resumed[-1] <= NAN_AT
    )  # the newest healthy checkpoint, none taken after the NaN
    steps = losses(server.root / "nan-once" / "losses.txt")
    assert sorted(steps) == list(range(200)) and all(
        math.isfinite(float.fromhex(v)) for v in steps.values()
    )


def test_a_job_whose_loss_is_not_finite_with_no_retries_is_reported_failed_with_the_step(
    server: ServerProcess,
) -> None:
    job = nan_job(server, "nan-always", retries=0, once=False)
    done = ended(server, job["id"], 300)
    assert (
        done["state"] == "failed" and done["reason"] == f"the loss was not finite at step {NAN_AT}"
    )
    [attempt] = done["attempts"]
    assert attempt["step"] < 150  # stopped at the NaN, not let run on


def test_a_syntax_error_is_not_retried_and_says_so(server: ServerProcess) -> None:
    job = server.api("/gpuws/api/jobs", "POST", {"command": ["python", "broken.py"], "retries": 3})
    done = ended(server, job["id"])
    assert done["state"] == "failed" and len(done["attempts"]) == 1
    assert done["attempts"][0]["retryable"] is False
    assert "SyntaxError" in done["reason"] and "not retried" in done["reason"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"command": ["no-such-program-anywhere", "x"]}, "command not found"),
        ({"command": ["./nothing.sh"]}, "no such program"),
        ({"command": []}, "1 to 4096 arguments"),
        ({"notebook": "bad.ipynb"}, "not valid JSON"),
        ({"notebook": "missing.ipynb"}, "does not exist"),
        ({"command": ["python", "fail.py"], "cwd": "../elsewhere"}, "inside the work directory"),
        ({"command": ["python", "fail.py"], "cwd": "/tmp"}, "inside the work directory"),
        ({"command": ["python", "fail.py"], "cwd": "out"}, "outside the work directory"),
        ({"command": ["python", "fail.py"], "retries": -1}, "retries"),
        ({"command": ["python", "fail.py"], "notebook": "bad.ipynb"}, "or"),
        ({"command": ["python", "fail.py"], "shell": True}, "Unknown key"),
        # What a record's reader refuses, the API refuses: a job it took survives its relaunch.
        ({"command": ["python", "fail.py"], "name": "a\x00b"}, "without NUL"),
    ],
    ids=[
        "unknown-program",
        "missing-script",
        "empty",
        "notebook-not-json",
        "notebook-missing",
        "dot-dot",
        "absolute-cwd",
        "link-out",
        "negative-retries",
        "both",
        "unknown-key",
        "nul-in-name",
    ],
)
def test_bad_input_to_post_is_a_400_with_a_message_and_starts_nothing(
    server: ServerProcess, body: dict[str, Any], words: str
) -> None:
    before = len(server.api("/gpuws/api/jobs")["jobs"])
    status, message = error_of(server, "/gpuws/api/jobs", "POST", body)
    assert status == 400 and words in message, message
    assert len(server.api("/gpuws/api/jobs")["jobs"]) == before


# What a request names that is not a regular file: refused at once, by what it is. Each is made
# in the work directory by the test (a FIFO, a link to a device, a socket), as a user could.
NOT_FILES = [
    ({"notebook": "fifo.ipynb"}, "notebook 'fifo.ipynb' is a named pipe (FIFO), not a file"),
    ({"notebook": "socket.ipynb"}, "notebook 'socket.ipynb' is a socket, not a file"),
    ({"notebook": "zero.ipynb"}, "notebook 'zero.ipynb' leads outside the work directory"),
    ({"command": ["python", "fifo.py"]}, "script 'fifo.py' is a named pipe (FIFO), not a file"),
    ({"command": ["python", "zero.py"]}, "script 'zero.py' is a device, not a file"),
    ({"command": ["./fifo.py"]}, "program './fifo.py' is a named pipe (FIFO), not a program"),
    ({"command": ["python", "fail.py"], "cwd": "fifo.py"}, "cwd 'fifo.py' is a named pipe (FIFO)"),
]


@pytest.fixture(scope="module")
def not_files(server: ServerProcess) -> Iterator[None]:
    import socket

    os.mkfifo(server.root / "fifo.ipynb")
    os.mkfifo(server.root / "fifo.py")
    (server.root / "zero.ipynb").symlink_to("/dev/zero")
    (server.root / "zero.py").symlink_to("/dev/zero")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(server.root / "socket.ipynb"))
        yield
    for name in ("fifo.ipynb", "fifo.py", "zero.ipynb", "zero.py", "socket.ipynb"):
        (server.root / name).unlink()


@pytest.mark.parametrize(("body", "words"), NOT_FILES, ids=lambda v: str(v)[:40])
def test_what_a_request_names_that_is_not_a_file_is_a_400_at_once_and_the_server_keeps_answering(
    server: ServerProcess, not_files: None, body: dict[str, Any], words: str
) -> None:
    def post() -> tuple[int, str, float]:
        started = time.monotonic()
        status, message = error_of(server, "/gpuws/api/jobs", "POST", body)
        return status, message, time.monotonic() - started

    def others() -> float:
        started = time.monotonic()
        assert server.api("/gpuws/api/sync")["state"]
        assert "jobs" in server.api("/gpuws/api/jobs")
        return time.monotonic() - started

    before = len(server.api("/gpuws/api/jobs")["jobs"])
    # More requests at once than the server's executor has threads (6 on 2 cores): a request
    # that waited on the file would hold one each, and the other routes would wait behind them.
    with ThreadPoolExecutor(12) as pool:
        posts = [pool.submit(post) for _ in range(8)]
        answered = [pool.submit(others) for _ in range(3)]
        results = [f.result(timeout=60) for f in posts]
        other_times = [f.result(timeout=60) for f in answered]
    for status, message, took in results:
        assert status == 400 and words in message, message
        assert len(message.splitlines()) == 1
        # A bound on a hang (a blocking open waits for a writer that never comes), not a speed:
        # on a quiet machine each takes milliseconds; 12 requests on a loaded machine, seconds.
        assert took < 5.0, f"the refusal took {took:.2f} s"
    assert max(other_times) < 5.0, other_times
    assert len(server.api("/gpuws/api/jobs")["jobs"]) == before


def test_a_job_flooding_its_output_leaves_the_server_answering_and_its_log_bounded(
    server: ServerProcess,
) -> None:
    job = server.api(
        "/gpuws/api/jobs", "POST", {"command": ["python", "../flood.py"], "cwd": "sub"}
    )
    folder = server.root / ".gpuws" / "jobs" / job["id"]
    until(lambda: (folder / "log.2").exists(), 120, "the log rotated twice")
    for _ in range(5):  # the server answers while the flood goes on
        listing = server.api("/gpuws/api/jobs")
        assert any(j["id"] == job["id"] and j["state"] == "running" for j in listing["jobs"])
        time.sleep(0.5)
    server.api(f"/gpuws/api/jobs/{job['id']}", "DELETE")
    stopped = server.api(f"/gpuws/api/jobs/{job['id']}")
    assert stopped["state"] == "stopped" and stopped["reason"].startswith("stopped by you")
    sizes = {p.name: p.stat().st_size for p in folder.iterdir()}
    assert set(sizes) <= {"log", "log.1", "log.2"}, sizes
    assert all(size <= 8 * 2**20 + 100_001 for size in sizes.values()), sizes
    lines = server.api(f"/gpuws/api/jobs/{job['id']}/log?lines=3")[
        "lines"
    ]  # the last one cut by the stop
    assert len(lines) == 3 and lines[:2] == ["x" * 100] * 2 and set(lines[2]) == {"x"}


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace_and_kept_as_stopped(
    server: ServerProcess,
) -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(600)"
    job = server.api("/gpuws/api/jobs", "POST", {"command": ["python", "-c", stubborn]})
    until(lambda: "up" in server.api(f"/gpuws/api/jobs/{job['id']}/log")["lines"], 60, "the job up")
    server.api(f"/gpuws/api/jobs/{job['id']}", "DELETE")
    stopped = server.api(f"/gpuws/api/jobs/{job['id']}")
    assert stopped["state"] == "stopped" and stopped["attempts"][-1]["returncode"] == -9


def test_deleting_a_job_that_has_ended_forgets_it_here_and_in_the_store(
    server: ServerProcess,
) -> None:
    job = server.api("/gpuws/api/jobs", "POST", {"command": ["python", "broken.py"]})
    ended(server, job["id"])
    record = server.store / "test-ws" / ".gpuws" / "jobs" / f"{job['id']}.json"
    # The API says "failed" as the record is being written to the store: wait for the write.
    until(
        lambda: json.loads(record.read_text())["state"] == "failed",
        30,
        "the failed record in the store",
        ignore=(OSError, ValueError),
    )
    server.api(f"/gpuws/api/jobs/{job['id']}", "DELETE")
    assert not record.exists()
    assert error_of(server, f"/gpuws/api/jobs/{job['id']}", "GET", None)[0] == 404


# -- records from the store ------------------------------------------------------------------------


def planted(
    job_id: str,
    command: list[str],
    key: str | None,
    workspace: str = "test-ws",
    changes: dict[str, Any] | None = None,
    cwd: str = "",
) -> dict[str, Any]:
    record = JobRecord(
        id=job_id,
        name="planted",
        kind="command",
        command=command,
        workspace=workspace,
        state="interrupted",
        created=time.time(),
        updated=time.time(),
        cwd=cwd,
        code=NO_CODE,  # it ran no file of the work directory, which the store leaves empty
    )
    if key is not None:
        trust.sign(record, key.encode())
    data = record.to_json()
    data.update(changes or {})
    return data


def test_records_from_the_store_run_only_when_this_key_signed_them_for_this_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(trust.KEY_ENV, KEY)
    store = tmp_path / "store"
    jobs = store / "test-ws" / ".gpuws" / "jobs"
    jobs.mkdir(parents=True)
    touch = ["python", "-c", "open('ran-' + __import__('os').environ['GPUWS_JOB_ID'], 'w')"]
    records = {
        "j-000000000001": planted("j-000000000001", touch, KEY),  # ours: relaunched
        "j-000000000002": planted("j-000000000002", touch, None),  # unsigned
        "j-000000000003": planted("j-000000000003", touch, "someone-elses-key"),
        "j-000000000004": planted(
            "j-000000000004",
            ["sh", "-c", "echo pwned"],
            KEY,
            changes={"command": ["python", "-c", "open('ran-j-000000000004', 'w')"]},
        ),  # changed
        "j-000000000005": planted("j-000000000005", touch, KEY, workspace="another-ws"),
    }
    held = JobRecord(
        id="j-000000000006",
        name="held",
        kind="command",
        command=touch,
        workspace="test-ws",
        state="interrupted",
        held=True,
        created=time.time(),
        updated=time.time(),
    )
    trust.sign(held, KEY.encode())
    records["j-000000000006"] = held.to_json()
    for job_id, data in records.items():
        (jobs / f"{job_id}.json").write_text(json.dumps(data))
    (jobs / "j-00000000000f.json").write_text("{corrupt")
    with server_process(tmp_path / "a", tmp_path / "runtime", {"store_url": str(store)}) as server:
        ours = until(
            lambda: (
                (j := server.api("/gpuws/api/jobs/j-000000000001"))["state"] == "finished" and j
            ),
            120,
            "our interrupted job relaunched and finished",
        )
        assert (server.root / "ran-j-000000000001").exists() and ours["needs_approval"] is False
        listing = {j["id"]: j for j in server.api("/gpuws/api/jobs")["jobs"]}
        reasons = {
            "j-000000000002": "not signed",
            "j-000000000003": "signed with another key",
            "j-000000000004": "signed with another key",
            "j-000000000005": "another workspace",
        }
        for job_id, words in reasons.items():
            assert job_id in listing, (
                job_id,
                sorted(listing),
                server.api("/gpuws/api/jobs")["error"],
            )
            job = listing[job_id]
            assert job["needs_approval"] is True and job["state"] == "interrupted", job
            assert words in job["relaunch"], job
            # What approving it runs, as the store's record says, beside why it waits.
            approval = job["approval"]
            assert words in approval["reason"] and approval["reason"] in job["relaunch"], job
            assert approval["command"] == records[job_id]["command"], job
            assert (approval["cwd"], approval["notebook"]) == ("", None), job
            assert (approval["changed"], approval["changed_more"]) == ([], 0), job
        assert ours["approval"] is None and listing["j-000000000006"]["approval"] is None
        assert (
            listing["j-000000000006"]["state"] == "held"
            and "held" in listing["j-000000000006"]["relaunch"]
        )
        assert "j-00000000000f" not in listing
        # Listed by its file with why, while the others were listed and relaunched.
        assert server.api("/gpuws/api/jobs")["bad_records"] == [
            {
                "file": "j-00000000000f.json",
                "reason": "not strict JSON: Expecting property name enclosed in double "
                "quotes: line 1 column 2 (char 1)",
            }
        ]
        assert sorted(p.name for p in server.root.glob("ran-*")) == ["ran-j-000000000001"]
        # The user's approval: restart runs it, signed with this key from now on.
        server.api("/gpuws/api/jobs/j-000000000002/restart", "POST", {})
        until(
            lambda: server.api("/gpuws/api/jobs/j-000000000002")["state"] == "finished",
            120,
            "the approved job",
        )
        assert (server.root / "ran-j-000000000002").exists()
        assert server.api("/gpuws/api/jobs/j-000000000002")["approval"] is None  # approved
        stored = json.loads((jobs / "j-000000000002.json").read_text())
        assert stored["state"] == "finished" and stored["signature"]
        # Released from hold, a job waits for a relaunch by the next runtime, or a restart here.
        released = server.api("/gpuws/api/jobs/j-000000000006/hold", "POST", {"hold": False})
        assert (
            released["state"] == "interrupted" and not (server.root / "ran-j-000000000006").exists()
        )


def store_with(folder: Path, job_id: str, command: list[str], cwd: str = "") -> Path:
    """A local store whose workspace records one interrupted job, signed with this user's key."""
    jobs = folder / "store" / "test-ws" / ".gpuws" / "jobs"
    jobs.mkdir(parents=True)
    (jobs / f"{job_id}.json").write_text(json.dumps(planted(job_id, command, KEY, cwd=cwd)))
    return folder / "store"


def test_with_relaunching_off_an_interrupted_job_waits_for_a_restart_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(trust.KEY_ENV, KEY)
    store = store_with(tmp_path, "j-0000000000aa", ["python", "-c", "open('ran', 'w')"])
    with server_process(
        tmp_path / "a", tmp_path / "runtime", {"store_url": str(store), "relaunch_jobs": False}
    ) as s:
        listing = until(
            lambda: (j := s.api("/gpuws/api/jobs"))["jobs"] and j, 60, "the store's record listed"
        )
        assert listing["relaunch"] == {"enabled": False, "pending": []}
        [job] = listing["jobs"]
        assert job["state"] == "interrupted" and "relaunching is off" in job["relaunch"]
        assert not (s.root / "ran").exists()
        s.api("/gpuws/api/jobs/j-0000000000aa/restart", "POST", {})
        until(
            lambda: s.api("/gpuws/api/jobs/j-0000000000aa")["state"] == "finished",
            60,
            "the restarted job",
        )
        assert (s.root / "ran").exists()


def test_a_relaunch_whose_folder_now_leads_outside_the_work_directory_fails_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(trust.KEY_ENV, KEY)
    store = store_with(tmp_path, "j-0000000000cc", ["python", "-c", "open('ran', 'w')"], cwd="sub")
    outside, root = tmp_path / "outside", tmp_path / "a" / "root"
    outside.mkdir()
    root.mkdir(parents=True)
    (root / "sub").symlink_to(outside)
    with server_process(
        tmp_path / "a", tmp_path / "runtime", {"store_url": str(store)}, root=root
    ) as server:
        failed = until(
            lambda: (j := server.api("/gpuws/api/jobs/j-0000000000cc"))["state"] == "failed" and j,
            60,
            "the relaunch refused",
        )
        assert "leads outside the work directory" in failed["reason"]
    assert list(outside.iterdir()) == []


def test_of_two_runtimes_on_one_store_only_the_lease_holder_relaunches_a_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(trust.KEY_ENV, KEY)
    store = store_with(
        tmp_path,
        "j-0000000000bb",
        ["python", "-c", "import time; open('started', 'w'); time.sleep(600)"],
    )
    config = {"store_url": str(store), "lease_ttl": 5.0}
    with server_process(tmp_path / "a", tmp_path / "runtime-a", config) as a:
        until(lambda: (a.root / "started").exists(), 60, "the first runtime's relaunch")
        with server_process(tmp_path / "b", tmp_path / "runtime-b", config) as b:
            listed = until(
                lambda: (j := b.api("/gpuws/api/jobs"))["jobs"] and j,
                60,
                "the record in the second",
            )
            assert not b.api("/gpuws/api/sync")["lease_held"]
            [job] = listed["jobs"]
            assert (
                job["state"] == "relaunched" and listed["relaunch"]["pending"] == []
            )  # the first one runs it
            assert not (b.root / "started").exists()
            kill_everything(a)
            # The first runtime is gone: once its lease has run out, the second relaunches the job.
            until(
                lambda: (b.root / "started").exists(),
                60,
                "the second runtime's relaunch after the first died",
            )
            assert b.api("/gpuws/api/jobs/j-0000000000bb")["state"] == "relaunched"
            b.api(
                "/gpuws/api/jobs/j-0000000000bb", "DELETE"
            )  # its own session: the server's kill would miss it


def test_a_jobs_process_ends_when_its_server_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psutil

    monkeypatch.setenv(trust.KEY_ENV, KEY)
    with server_process(tmp_path / "a", tmp_path / "runtime", {}) as server:
        until(lambda: server.api("/gpuws/api/sync")["state"] not in ("starting",), 60, "the sync")
        job = server.api(
            "/gpuws/api/jobs",
            "POST",
            {
                "command": [
                    "python",
                    "-c",
                    "import os, time; open('pid', 'w').write(str(os.getpid())); time.sleep(600)",
                ]
            },
        )
        pid = int(
            until(
                lambda: (server.root / "pid").exists() and (server.root / "pid").read_text(),
                60,
                "the job",
            )
        )
        assert job["state"] == "running" and psutil.pid_exists(pid)
        server.proc.kill()  # the server alone: the job runs in a session of its own
        server.proc.wait()
        until(
            lambda: (
                not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
            ),
            30,
            "the job's end with its server",
        )
