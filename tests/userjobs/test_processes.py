"""A job's processes are the job's (userjobs/reaper.py, userjobs/manager.py): every process a job
starts, a `setsid` daemon and a double fork included, ends when the job ends, when it is stopped
and when its server stops or is killed; the job's exit code, its death by a signal, its folder,
environment and signals are what they were without a supervisor. And its output reader never
stops (userjobs/joblog.py): on a full disk the job goes on, its reason says the log was not
written, and once space is back its output reaches the log again. Real processes throughout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from jupyter_gpu_ws.userjobs.joblog import RETRY_SECONDS, JobLog
from jupyter_gpu_ws.userjobs.manager import Job, JobManager, JobSettings
from tests.fusefs import MountedDrive, mounted_drive  # noqa: F401 - a fixture, found by its name
from tests.servers import ServerProcess, server_process
from tests.userjobs.jobfiles import job_key
from tests.waiting import until

pytestmark = pytest.mark.slow  # jobs' processes, servers and a FUSE drive: seconds each

STOP_GRACE = 2.0

# A job whose daemons are a `setsid` one (whose `sh` and `sleep` ignore SIGTERM, so only SIGKILL
# ends them) and a double fork's grandchild in a session of its own. Their pids go to files that
# appear whole (written, then renamed), before the main process goes on: it ends with `exit 3`
# once the file `go` exists ("end"), or sleeps until it is stopped ("stay").
DAEMONS = """
import os, subprocess, sys, time

def tell(name, pid):
    with open(name + ".tmp", "w") as f:
        f.write(str(pid))
    os.rename(name + ".tmp", name)

tell("main.pid", os.getpid())
setsid = subprocess.Popen(["setsid", "sh", "-c", "trap '' TERM; sleep 1000"])
tell("setsid.pid", setsid.pid)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        tell("forked.pid", os.getpid())
        time.sleep(1000)
    os._exit(0)
os.wait()
while not os.path.exists("forked.pid"):
    time.sleep(0.01)
print("daemons up", flush=True)
while sys.argv[1] == "stay" or not os.path.exists("go"):
    time.sleep(0.01)
sys.exit(3)
"""


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def daemon_pids(folder: Path, timeout: float = 60) -> list[int]:
    files = [folder / "setsid.pid", folder / "forked.pid"]

    def written() -> list[int] | None:
        return [int(f.read_text()) for f in files] if all(f.exists() for f in files) else None

    pids = until(written, timeout, "the job's daemons")
    assert pids is not None and not any(gone(pid) for pid in pids)
    return pids


@pytest.fixture
def manager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[JobManager]:
    monkeypatch.setenv("GPUWS_JOB_KEY", "a-test-key-that-is-long-enough-0123456789")
    work = tmp_path / "work"
    work.mkdir()
    (work / "daemons.py").write_text(DAEMONS)
    jobs = JobManager(
        JobSettings(
            workdir=work,
            workspace="ws",
            host="here",
            runtime_id="r-1",
            stop_grace=STOP_GRACE,
            backoff=(0.1,),
        )
    )
    yield jobs
    jobs.interrupt_all(grace=1.0)  # whatever a test left running


def finished(job: Job, timeout: float = 60) -> Job:
    until(lambda: job.record.state not in ("running", "retrying"), timeout, "the job's end")
    return job


def run(manager: JobManager, command: list[str]) -> Job:
    return finished(manager.get(manager.submit(command).id))


# -- every process of the job ends with it ----------------------------------------------------------


def test_the_daemons_a_job_started_are_gone_when_its_main_process_has_ended(
    manager: JobManager,
) -> None:
    job = manager.get(manager.submit([sys.executable, "daemons.py", "end"]).id)
    pids = daemon_pids(manager.settings.workdir)
    (manager.settings.workdir / "go").touch()
    finished(job)
    # The attempt ends once its supervisor has ended and reaped them: nothing to wait for.
    assert [gone(pid) for pid in pids] == [True, True]
    assert job.record.state == "failed" and job.record.attempts[0].returncode == 3
    assert job.record.reason == "exit code 3"
    assert manager.tail(job.record.id, 1) == ["daemons up"]


def test_the_daemons_of_a_job_stopped_by_the_user_end_with_it(manager: JobManager) -> None:
    job = manager.get(manager.submit([sys.executable, "daemons.py", "stay"]).id)
    pids = daemon_pids(manager.settings.workdir)
    assert manager.stop(job.record.id) is True
    assert job.record.state == "stopped"
    assert [gone(pid) for pid in pids] == [True, True]
    assert job.record.attempts[0].returncode == -signal.SIGTERM  # the main process: as before


def test_the_daemons_of_jobs_interrupted_for_the_runtimes_end_end_within_the_grace(
    manager: JobManager,
) -> None:
    job = manager.get(manager.submit([sys.executable, "daemons.py", "stay"]).id)
    pids = daemon_pids(manager.settings.workdir)
    started = time.monotonic()
    # A grace shorter than the supervisor's: the manager has it end everything at once.
    assert manager.interrupt_all(grace=0.5) == [job.record.id]
    assert time.monotonic() - started < STOP_GRACE
    assert job.record.state == "interrupted"
    assert [gone(pid) for pid in pids] == [True, True]


def test_the_daemons_of_a_job_stopped_for_a_loss_that_is_not_finite_end_with_its_attempt(
    tmp_path: Path, manager: JobManager
) -> None:
    flagged: dict[str, Any] = {}
    manager.run_view = lambda job: flagged
    job = manager.get(manager.submit([sys.executable, "daemons.py", "stay"]).id)
    pids = daemon_pids(manager.settings.workdir)
    flagged.update(nan_loss=True, nan_since=time.time(), nan_step=7)
    assert manager.stop_on_nan_loss() == [job.record.id]
    finished(job)
    assert job.record.reason == "the loss was not finite at step 7"
    assert [gone(pid) for pid in pids] == [True, True]


# A main process that ignores SIGTERM, and a daemon (orphaned at once: its parent `sh` ends) that
# notes the SIGTERM it gets.
DEAF_MAIN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.run(["sh", "-c", f"setsid {sys.executable} noting.py &"], check=True)
time.sleep(1000)
"""
NOTING = """
import os, signal, sys, time
def note(*_):
    open("daemon-got-sigterm", "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, note)
open("daemon-up", "w").close()
time.sleep(1000)
"""


def stopped_once_up(manager: JobManager, main: str, helper: tuple[str, str], up: str) -> Job:
    """The job `python -c main`, with the script `helper` (name, text) beside it, stopped once
    the file `up` says it runs."""
    work = manager.settings.workdir
    (work / helper[0]).write_text(helper[1])
    job = manager.get(manager.submit([sys.executable, "-c", main]).id)
    until(lambda: (work / up).exists(), 60, f"the job's {up}")
    manager.stop(job.record.id)
    return job


def test_a_stop_gives_an_orphaned_daemon_its_sigterm_with_the_main_process(
    manager: JobManager,
) -> None:
    job = stopped_once_up(manager, DEAF_MAIN, ("noting.py", NOTING), "daemon-up")
    # The main process ignored it and was killed after the grace; the daemon ended on its own.
    assert job.record.attempts[0].returncode == -signal.SIGKILL
    assert (manager.settings.workdir / "daemon-got-sigterm").exists()


# A launcher like torchrun: its worker runs in a session of its own, gets the stop's SIGTERM from
# the launcher, saves for a while (a second SIGTERM would end a rank before its save is complete),
# and the launcher ends once it has.
LAUNCHER = """
import signal, subprocess, sys
worker = subprocess.Popen([sys.executable, "worker.py"], start_new_session=True)
signal.signal(signal.SIGTERM, lambda *_: worker.send_signal(signal.SIGTERM))
worker.wait()
"""
WORKER = """
import os, signal, time
def save(*_):
    with open("worker-sigterms", "a") as f:
        f.write("SIGTERM\\n")
signal.signal(signal.SIGTERM, save)
open("worker-up", "w").close()
while not os.path.exists("worker-sigterms"):
    time.sleep(0.01)
time.sleep(0.5)
"""


def test_a_stop_leaves_a_launchers_workers_to_the_launcher_one_sigterm_each(
    manager: JobManager,
) -> None:
    job = stopped_once_up(manager, LAUNCHER, ("worker.py", WORKER), "worker-up")
    assert job.record.state == "stopped"
    assert (manager.settings.workdir / "worker-sigterms").read_text() == "SIGTERM\n"


def test_a_daemon_that_ignores_sigterm_is_killed_after_the_supervisors_grace(
    manager: JobManager,
) -> None:
    job = manager.get(manager.submit([sys.executable, "daemons.py", "end"]).id)
    [stubborn, _] = daemon_pids(manager.settings.workdir)
    (manager.settings.workdir / "go").touch()
    started = time.monotonic()
    finished(job)
    # SIGTERM when the main process ended, SIGKILL 0.9 x the stop grace later.
    assert 0.9 * STOP_GRACE - 0.5 < time.monotonic() - started < STOP_GRACE + 5
    assert gone(stubborn)


# -- what the job was without a supervisor, it is with one --------------------------------------------


@pytest.mark.parametrize(
    ("command", "returncode", "reason"),
    [
        ("setsid sleep 1000 & exit 3", 3, "exit code 3"),
        ("setsid sleep 1000 & kill -KILL $$", -9, "killed by SIGKILL"),
        ("setsid sleep 1000 & kill -SEGV $$", -11, "killed by SIGSEGV"),
    ],
)
def test_a_jobs_exit_code_or_the_signal_that_killed_it_is_its_attempts(
    manager: JobManager, command: str, returncode: int, reason: str
) -> None:
    job = run(manager, ["sh", "-c", command])
    assert job.record.attempts[0].returncode == returncode
    assert job.record.reason == reason
    assert not list(manager.settings.workdir.glob("core*"))  # no core dump of the supervisor's


def test_a_command_that_cannot_start_says_why_as_before(manager: JobManager) -> None:
    script = manager.settings.workdir / "bad.sh"
    script.write_text("#!/no/such/interpreter\n")
    script.chmod(0o755)
    job = run(manager, ["./bad.sh"])
    assert job.record.state == "failed"
    assert job.record.reason == (
        "cannot start ./bad.sh: No such file or directory (not retried: retrying cannot change it)"
    )


def test_a_jobs_folder_environment_stdin_and_signals_are_those_it_had_without_a_supervisor(
    manager: JobManager,
) -> None:
    # The masks are read by the shell's own process at its end (exec): a shell waiting for a
    # command it started has every signal blocked meanwhile (dash), so /proc/$$ read from that
    # command says nothing of what the shell was started with.
    show = (
        'readlink /proc/$$/fd/0; pwd; tr "\\0" "\\n" < /proc/$$/environ | sort; '
        'exec grep -E "^Sig(Blk|Ign)" /proc/self/status'
    )
    job = run(manager, ["sh", "-c", show])
    assert job.record.state == "finished"
    workdir = str(manager.settings.workdir)
    environment = dict(
        os.environ,
        GPUWS_JOB_ID=job.record.id,
        GPUWS_RUN=job.record.run,  # the job's own run (a run per job)
        GPUWS_WORKDIR=workdir,
        PYTHONUNBUFFERED="1",
    )
    # The same command started as the manager started jobs before it had a supervisor.
    direct = subprocess.run(
        ["sh", "-c", show],
        cwd=manager.settings.workdir,
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        check=True,
    )
    shown = manager.tail(job.record.id, 10_000)
    # No signal blocked (a job with SIGTERM blocked could not be stopped at its checkpoint); the
    # rest as it was without a supervisor.
    assert shown[-2] == "SigBlk:\t0000000000000000"
    assert shown == direct.stdout.decode().splitlines()
    assert environment["PYTHONUNBUFFERED"] == "1"


# -- and with its server ------------------------------------------------------------------------------


def submitted_daemons(server: ServerProcess) -> tuple[dict[str, Any], list[int]]:
    until(lambda: server.api("/gpuws/api/sync")["state"] not in ("starting",), 60, "the sync")
    (server.root / "daemons.py").write_text(DAEMONS)
    job = server.api("/gpuws/api/jobs", "POST", {"command": ["python", "daemons.py", "stay"]})
    return job, daemon_pids(server.root)


def test_the_daemons_of_a_job_end_when_its_server_stops(tmp_path: Path) -> None:
    with (
        job_key("processes-test-key-long-enough-0123456789"),
        server_process(tmp_path / "a", tmp_path / "runtime", {"job_stop_grace": STOP_GRACE}) as a,
    ):
        _, pids = submitted_daemons(a)
        a.proc.send_signal(signal.SIGTERM)
        a.proc.wait(60)
        assert [gone(pid) for pid in pids] == [True, True]


def test_the_daemons_of_a_job_end_when_its_server_is_killed(tmp_path: Path) -> None:
    with (
        job_key("processes-test-key-long-enough-0123456789"),
        server_process(tmp_path / "a", tmp_path / "runtime", {"job_stop_grace": STOP_GRACE}) as a,
    ):
        _, pids = submitted_daemons(a)
        main = int((a.root / "main.pid").read_text())
        a.proc.kill()
        a.proc.wait()
        until(lambda: all(gone(pid) for pid in [main, *pids]), 30, "the job's end with its server")


# A job that writes `termed` when it gets SIGTERM (where track() would save its checkpoint).
TERMED = """
import os, signal, time
signal.signal(signal.SIGTERM, lambda *_: (open("termed", "w").close(), os._exit(0)))
open("waiting", "w").close()
time.sleep(600)
"""


def test_a_job_gets_sigterm_when_its_server_is_killed(tmp_path: Path) -> None:
    with (
        job_key("processes-test-key-long-enough-0123456789"),
        server_process(tmp_path / "a", tmp_path / "runtime", {"job_stop_grace": 30}) as a,
    ):
        until(lambda: a.api("/gpuws/api/sync")["state"] not in ("starting",), 60, "the sync")
        (a.root / "termed.py").write_text(TERMED)
        a.api("/gpuws/api/jobs", "POST", {"command": [sys.executable, "termed.py"]})
        until(lambda: (a.root / "waiting").exists(), 60, "the job running")
        a.proc.kill()  # kill -9: the job hears of it from its supervisor, at once, not at the grace
        a.proc.wait()
        until(lambda: (a.root / "termed").exists(), 10, "the job's SIGTERM")


# -- the output reader never stops ---------------------------------------------------------------------

# A job that prints a numbered line every 20 ms until the file `stop` exists.
TICKING = """
import os, itertools, time
for i in itertools.count():
    print(f"tick {i}", flush=True)
    if os.path.exists("stop"):
        break
    time.sleep(0.02)
print("stopped", flush=True)
"""


def test_a_job_printing_onto_a_full_disk_ends_and_its_log_says_how_much_was_dropped(
    tmp_path: Path,
) -> None:
    # /dev/full: every write fails with ENOSPC, through a real file descriptor.
    (tmp_path / "job.log").symlink_to("/dev/full")
    log = JobLog(tmp_path / "job.log")
    code = "import sys\nfor i in range(20_000): sys.stdout.write(f'line {i:05}\\n')\n"
    job = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert job.stdout is not None
    log.follow(job.stdout)
    assert job.wait(timeout=60) == 0  # 220,000 bytes, far more than the pipe holds: never blocked
    log.close()
    assert log.trouble() == "log not written: the disk is full (220,000 bytes of output dropped)"


def test_a_log_that_could_not_be_written_is_written_again_once_it_can_be(tmp_path: Path) -> None:
    (tmp_path / "job.log").symlink_to("/dev/full")
    log = JobLog(tmp_path / "job.log")
    job = subprocess.Popen(
        [sys.executable, "-c", TICKING],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert job.stdout is not None
    log.follow(job.stdout)
    try:
        until(log.trouble, 30, "the log's trouble")
        (tmp_path / "job.log").unlink()  # the next try makes a file of its own: room again
        until(lambda: log.trouble() is None, 30 + RETRY_SECONDS, "the log written again")
    finally:
        (tmp_path / "stop").touch()
    assert job.wait(timeout=60) == 0
    log.close()
    lines = (tmp_path / "job.log").read_text().splitlines()
    assert lines[0].startswith("[… ") and lines[0].endswith(
        " bytes of output not written: the disk is full]"
    )
    ticks = [int(line.split()[1]) for line in lines[1:-1]]
    assert ticks == list(range(ticks[0], ticks[0] + len(ticks))) and lines[-1] == "stopped"


@pytest.fixture
def drive_manager(
    mounted_drive: MountedDrive,  # noqa: F811 - the fixture imported above
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[JobManager, MountedDrive]]:
    """A job manager whose work directory (so its jobs' logs) is on a FUSE drive that can fill up."""
    monkeypatch.setenv("GPUWS_JOB_KEY", "a-test-key-that-is-long-enough-0123456789")
    mounted_drive.set_delays(0, 0, 0)
    work = Path(mounted_drive.mountpoint) / "work"
    work.mkdir()
    jobs = JobManager(
        JobSettings(workdir=work, workspace="ws", host="here", runtime_id="r-1", stop_grace=2.0)
    )
    yield jobs, mounted_drive
    mounted_drive.heal()
    jobs.interrupt_all(grace=1.0)


def test_a_job_on_a_full_disk_runs_on_says_so_in_its_reason_and_logs_again_once_space_is_freed(
    drive_manager: tuple[JobManager, MountedDrive],
) -> None:
    manager, drive = drive_manager
    job = manager.get(manager.submit([sys.executable, "-c", TICKING]).id)
    until(lambda: "tick 3" in manager.tail(job.record.id, 5), 60, "the job's first lines")
    drive.fault("full")

    def saying_so() -> str | None:
        reason = job.record.reason
        return reason if reason and reason.startswith("log not written") else None

    reason = until(saying_so, 30, "the reason to say the log is not written")
    assert reason is not None
    assert reason.startswith("log not written: the disk is full (")
    assert reason.endswith(" bytes of output dropped)")
    assert job.record.state == "running"
    drive.heal()
    until(lambda: job.record.reason is None, 30, "the reason to say nothing more")
    until(lambda: manager.tail(job.record.id, 1)[0].startswith("tick"), 30, "the ticks in the log")
    (manager.settings.workdir / "stop").touch()
    finished(job)
    assert job.record.state == "finished" and job.record.reason is None
    lines = manager.tail(job.record.id, 10_000)
    [gap] = [i for i, line in enumerate(lines) if line.startswith("[… ")]
    assert lines[gap].endswith(" bytes of output not written: the disk is full]")
    before, after = int(lines[gap - 1].split()[1]), int(lines[gap + 1].split()[1])
    assert after > before + 1 and lines[-1] == "stopped"


def test_a_job_that_ends_while_its_disk_is_full_ends_with_a_reason_that_says_so(
    drive_manager: tuple[JobManager, MountedDrive],
) -> None:
    manager, drive = drive_manager
    drive.fault("full")
    flood = "import sys\nfor i in range(20_000): sys.stdout.write(f'line {i:05}\\n')\n"
    job = run(manager, [sys.executable, "-c", flood])  # never blocked on its output
    assert job.record.state == "finished"
    expected = "log not written: the disk is full (220,000 bytes of output dropped)"
    assert job.record.reason == expected and job.record.attempts[0].reason == expected
