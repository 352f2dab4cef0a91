"""A run per job, on a real server: each job tracks a run of its own, named after it, and
continues another run only when asked (`jupyter gpuws run --resume RUN`, `"resume"` in the API)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_gpu_ws.checkpoints.catalog import saved_runs
from tests.servers import ServerProcess, server_process
from tests.userjobs.jobfiles import TRAIN, job_key, write
from tests.userjobs.test_jobs_api import ended, error_of, write_notebook
from tests.userjobs.test_run_commands import cli
from tests.waiting import until

pytestmark = pytest.mark.slow  # left out of the fast subset (docs/testing.md)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("job-runs")
    with (
        job_key("the-job-runs-key-long-enough-0123456789"),
        server_process(
            folder / "a", folder / "runtime", {"sync_debounce": 0.05, "job_stop_grace": 5.0}
        ) as server,
    ):
        until(lambda: server.api("/gpuws/api/sync")["state"] not in ("starting",), 60, "the sync")
        yield server


def training_notebook(path: Path, owner: str) -> None:
    """A notebook that tracks a state of its own (`owner`), resumes, and takes 4 steps, a
    checkpoint at each: it prints where it starts and whose state it has then."""
    write_notebook(
        path,
        [
            "import jupyter_gpu_ws as gpuws\n"
            f"state = {{'owner': {owner!r}, 'steps': 0}}\n"
            "gpuws.track(state=state, every_steps=1)\n"
            "start = gpuws.resume()\n"
            "print(f\"start {start} owner {state['owner']}\", flush=True)",
            "for i in range(start, 4):\n    state['steps'] += 1\n    gpuws.step(i)",
        ],
    )


def runs_here(server: ServerProcess) -> dict[str, int]:
    """The work directory's runs with a checkpoint: name → its newest checkpoint's step."""
    return {r.name: r.step for r in saved_runs(server.root / ".gpuws" / "checkpoints")}


def test_two_notebooks_run_as_jobs_keep_separate_runs_and_states(server: ServerProcess) -> None:
    (server.root / "nbs").mkdir()
    training_notebook(server.root / "nbs" / "first.ipynb", "first")
    training_notebook(server.root / "nbs" / "second.ipynb", "second")
    first = server.api("/gpuws/api/jobs", "POST", {"notebook": "nbs/first.ipynb"})
    assert ended(server, first["id"], 180)["state"] == "finished"
    second = server.api("/gpuws/api/jobs", "POST", {"notebook": "nbs/second.ipynb"})
    done = ended(server, second["id"], 180)
    assert done["state"] == "finished", done["log_tail"]
    # Each its own run, named after the notebook and the end of the job's id; never "default".
    assert first["run"] == f"first.ipynb-{first['id'][-4:]}"
    assert second["run"] == f"second.ipynb-{second['id'][-4:]}"
    assert first["resumed_step"] is None and second["resumed_step"] is None
    # The second started from 0 with its own state: nothing of the first's run was resumed.
    assert "start 0 owner second" in done["log_tail"], done["log_tail"]
    # The server that ran it was asked for the store's checkpoint (a notebook job's kernel
    # finds its server), and said it had none.
    assert (
        f"gpuws: no checkpoint of {second['run']} in the store: starting from 0"
        in (done["log_tail"])
    )
    # Each run's checkpoints in its own folder.
    assert {first["run"], second["run"]} <= set(runs_here(server)) and "default" not in runs_here(
        server
    )
    # The Jobs and the Training sections name each run alike.
    training = {r["run"] for r in server.api("/gpuws/api/training")["runs"]}
    assert {done["run"], ended(server, first["id"])["run"]} <= training


def run_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if re.match(r"(run|resumes run) '", line)]


def test_name_starts_a_new_run_and_resume_continues_one(server: ServerProcess) -> None:
    folder = server.root / "named"
    folder.mkdir()
    write(folder, "train.py", TRAIN)

    def started(*args: str) -> tuple[dict[str, Any], list[str]]:
        done = cli(server.runtime, "run", *args, cwd=folder)
        assert done.returncode == 0, done.stderr
        return ended(server, done.stdout.strip()), run_lines(done.stderr)

    a, said = started("--name", "A", "--", "python", "train.py", "12", "0", "3")
    assert a["state"] == "finished" and a["run"] == "A" and said == ["run 'A' (new)"]
    assert "resumed 0" in a["log_tail"]
    # The same script under another name: a new run, from 0 (not A's step 11).
    b, said = started("--name", "B", "--", "python", "train.py", "12", "0", "3")
    assert b["state"] == "finished" and b["run"] == "B" and said == ["run 'B' (new)"]
    assert "resumed 0" in b["log_tail"], b["log_tail"]
    # A name whose run exists is refused: it would resume it unasked.
    again = cli(server.runtime, "run", "--name", "A", "--", "python", "train.py", cwd=folder)
    assert again.returncode == 2 and "a run named 'A' exists" in again.stderr, again.stderr
    assert "--resume A" in again.stderr
    # --resume continues A from its newest checkpoint; --name then names the job only.
    saved = runs_here(server)["A"]
    c, said = started(
        "--resume", "A", "--name", "A-longer", "--", "python", "train.py", "20", "0.05", "3"
    )
    assert c["name"] == "A-longer" and c["run"] == "A" and c["resumed_step"] == saved
    assert said == [f"resumes run 'A' at step {saved:,}"]
    assert c["state"] == "finished" and f"resumed {saved + 1}" in c["log_tail"], c["log_tail"]
    assert runs_here(server)["A"] > saved and "A-longer" not in runs_here(server)


def test_a_run_one_job_writes_is_refused_to_another_and_an_unknown_run_is_a_400_listing_the_runs(
    server: ServerProcess,
) -> None:
    folder = server.root / "busy"
    folder.mkdir()
    write(folder, "train.py", TRAIN)
    job = server.api(
        "/gpuws/api/jobs",
        "POST",
        {
            "command": ["python", "train.py", "100000", "0.05", "20"],
            "name": "busy",
            "cwd": "busy",
        },
    )
    try:
        until(lambda: "busy" in runs_here(server), 120, "the busy run's first checkpoint")
        # While it runs, the Jobs, Training and Checkpoints sections name its run alike.
        assert server.api(f"/gpuws/api/jobs/{job['id']}")["run"] == "busy"
        until(
            lambda: any(r["run"] == "busy" for r in server.api("/gpuws/api/training")["runs"]),
            30,
            "the run in the training view",
        )
        checkpoints = server.api("/gpuws/api/checkpoints")["runs"]
        assert [r["run"] for r in checkpoints if r.get("job") == job["id"]] == ["busy"]

        command = ["python", "train.py", "10", "0"]
        status, message = error_of(
            server, "/gpuws/api/jobs", "POST", {"command": command, "cwd": "busy", "resume": "busy"}
        )
        assert status == 400 and f"run 'busy' is the run of job {job['id']} (running)" in message
        status, message = error_of(
            server, "/gpuws/api/jobs", "POST", {"command": command, "resume": "no-such-run"}
        )
        assert status == 400 and message.startswith("resume: no run 'no-such-run' with a check")
        assert re.search(r"its runs: .*busy \(step \d", message), message
        assert "\n" not in message
    finally:
        server.api(f"/gpuws/api/jobs/{job['id']}", "DELETE")
    assert ended(server, job["id"])["state"] == "stopped"
    # Stopped, its run goes on in a job that resumes it: the first job's restart would write it too.
    saved = runs_here(server)["busy"]
    follower = server.api(
        "/gpuws/api/jobs",
        "POST",
        {
            "command": ["python", "train.py", "100000", "0.05", "20"],
            "cwd": "busy",
            "resume": "busy",
        },
    )
    try:
        assert follower["run"] == "busy" and follower["resumed_step"] == saved
        status, message = error_of(server, f"/gpuws/api/jobs/{job['id']}/restart", "POST", {})
        assert status == 400 and f"run 'busy' is the run of job {follower['id']} (running)" in (
            message
        )
    finally:
        server.api(f"/gpuws/api/jobs/{follower['id']}", "DELETE")


def test_a_run_name_keeps_accented_letters_as_their_letters() -> None:
    from jupyter_gpu_ws.checkpoints.files import plain_run_name, run_dir

    assert plain_run_name("expérience été") == "experience-ete"
    assert plain_run_name("Ångström/ﬁt.py") == "Angstrom--fit.py"  # ligature: its letters
    assert plain_run_name("日本語") == ""  # nothing of it a folder name keeps: the caller's default
    name = plain_run_name("crème brûlée")
    assert run_dir("/r", name).name == name  # its folder has the name the panel shows


def test_resuming_the_run_a_running_job_writes_before_its_first_checkpoint_names_that_job(
    tmp_path: Path,
) -> None:
    from jupyter_gpu_ws.userjobs.manager import Job, JobInputError, JobManager, JobSettings
    from jupyter_gpu_ws.userjobs.record import JobRecord

    manager = JobManager(
        JobSettings(workdir=tmp_path, workspace="ws", host="here", runtime_id="r-1"), None
    )
    quiet = JobRecord(
        id="j-00000000beef", name="quiet", kind="command", command=["python", "t.py"],
        workspace="ws", state="running", run="quiet",
    )  # fmt: skip
    manager.jobs[quiet.id] = Job(quiet)
    with pytest.raises(JobInputError) as refused:
        manager._run_to_resume("quiet", [])
    assert str(refused.value) == (
        "resume: run 'quiet' is the run of job j-00000000beef (running), which goes on writing "
        "it: stop or forget that job first, or start a new run (no checkpoint of it yet)"
    )
