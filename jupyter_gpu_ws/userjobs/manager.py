"""The server's jobs: each one a child process in a session of its own, its output in a bounded
log, its end classified, retried with backoff, stopped at a checkpoint before the runtime ends,
its record kept in the store at every change, and relaunched by the runtime that holds the
lease next. No Tornado inside: the app passes the store, the checkpoint request and the
training view in as plain callables."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..checkpoints.catalog import SavedRun, saved_runs
from ..checkpoints.files import (
    MAX_RUN_NAME,
    RUN_ENV,
    checkpoints_root,
    plain_run_name,
    run_dir,
)
from ..diskio import file_kind
from ..store.faults import recall
from ..store.names import shown
from . import files, manifest, trust
from .failure import classify, oom_kills
from .gpus import Fitted, fit_to_gpus
from .joblog import JobLog, LogText
from .notebook import output_path
from .record import ACTIVE, MAX_TEXT, JobRecord, RecordError, command_problem, from_json, limits
from .vouching import SeenRecords, judge

log = logging.getLogger(__name__)

# Linux's prctl, loaded here: the job's process calls it between fork and exec, where nothing
# may be imported or allocated.
try:
    _LIBC: Any = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
except OSError:
    _LIBC = None
PR_SET_PDEATHSIG = 1


def _dies_with_its_server() -> None:
    """A job's supervisor gets SIGTERM when the server's thread that started it ends, as it does
    when the server is killed (it then ends the job and every process the job started): no job
    runs on unsupervised beside a server started anew, which would relaunch it a second time."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


# The job's supervisor (reaper.py), run by its path with only the standard library in reach: it
# starts with every job, and a job's folder or PYTHONPATH must not change what it imports.
REAPER = [sys.executable, "-I", "-S", str(Path(__file__).with_name("reaper.py"))]
# When the manager's own grace is over: the supervisor's word to end every process of the job at
# once, and how long the supervisor has for that before the process group gets SIGKILL.
END_NOW = signal.SIGUSR1
END_NOW_WAIT = 5.0


JOB_ID_ENV = "GPUWS_JOB_ID"
NOTEBOOK_MODULE = "jupyter_gpu_ws.userjobs.notebook"
BACKOFF = (2.0, 4.0, 8.0, 16.0, 30.0)
MAX_RETRIES = limits().retries
# How long after its last signed write an interrupted job still relaunches by itself (a copy put
# back into the store from longer ago waits for the user): c.GpuWorkspace.relaunch_window.
RELAUNCH_WINDOW = 24 * 3600.0
# A running job's record is signed and written again at least this often (and four times per
# relaunch_window), so that the window counts from the runtime's end, not from the job's start.
RENEW_EVERY = 600.0
# A running job's step goes into its stored record when it moved, at most this often: what a
# successor says of an attempt whose runtime was killed ("interrupted at step N").
STEP_WRITE_EVERY = 15.0
# The supervisor's grace after a SIGTERM, as a share of the manager's: it ends what is left of the
# job (its daemons too) before the manager's own grace is over.
SUPERVISOR_GRACE = 0.9
# How often a running job's log is looked at (is its output written?), and how often a reason
# that says it is not may be written again with a new count of the bytes dropped.
LOG_LOOK_SECONDS = 1.0
LOG_TROUBLE_EVERY = 10.0
TAIL_LINES = 20


class JobInputError(ValueError):
    """What was asked cannot be a job (a command that does not exist, a folder outside the work
    directory, a notebook that is not one): the message says which, in one line."""


class JobNotFound(LookupError):
    pass


class JobsNotRead(JobNotFound):
    """No such job here yet, and the store's records are not read yet: it may be one of them."""


class JobStore(Protocol):
    """Where the records go: `<workspace>/.gpuws/jobs/<id>.json` through the sync's backend."""

    def why_not_writable(self) -> str | None: ...
    def write(self, job_id: str, record: dict[str, Any]) -> None: ...
    def read_all(self) -> list[tuple[str, Any, str | None]]: ...
    def delete(self, job_id: str) -> None: ...
    def writer_gone(self) -> tuple[str, float, float] | None: ...


@dataclass
class JobSettings:
    workdir: Path
    workspace: str
    host: str
    runtime_id: (
        str  # this server: a record marked running by another one whose lease we hold is orphaned
    )
    env: dict[str, str] = field(default_factory=dict)  # the server's identity for the job's tracker
    relaunch: bool = True
    stop_grace: float = 10.0
    backoff: tuple[float, ...] = BACKOFF
    log_max_bytes: int = 8 * 2**20
    state_dir: Path | None = None  # where this runtime keeps what it has seen (vouching.py)
    relaunch_window: float = RELAUNCH_WINDOW


@dataclass
class Job:
    record: JobRecord
    untrusted: str | None = None  # why the record is not run without the user's say
    process: subprocess.Popen[bytes] | None = None
    log: JobLog | None = None
    thread: threading.Thread | None = None
    wake: threading.Event = field(default_factory=threading.Event)  # ends a backoff's wait early
    stopping: str | None = None  # "stopped" (the user) or "interrupted" (the runtime's end)
    runtime_id: str | None = None  # the server running it now
    checkpoint_step: int | None = None  # its run's newest checkpoint, as last seen
    step_written: float = 0.0  # when its step last went into its stored record (time.monotonic)
    failures_before: int = (
        0  # failed attempts before the user's last restart: they used no retries of this run
    )
    nan_stopped: bool = (
        False  # this attempt was ended because the training view saw its loss not finite
    )
    nan_step: int | None = None  # the step the loss stopped being finite at, as the view said
    relaunched_on: str | None = (
        None  # the environment a relaunch ran it on, where that was worth saying
    )
    # Its code's files changed since the record was signed (path, "changed" | "added" |
    # "missing"), the first few, and how many more: what the user approves with it.
    changed: list[tuple[str, str]] = field(default_factory=list)
    changed_more: int = 0
    log_trouble: str | None = None  # why its output is not reaching its log, as its reason says
    log_trouble_next: float = 0.0  # when the reason may say it again (a count that grew)


class JobManager:
    def __init__(
        self,
        settings: JobSettings,
        store: JobStore | None = None,
        checkpoint: Callable[[Job], str | None] | None = None,
        run_view: Callable[[Job], dict[str, Any]] | None = None,
        run_ended: Callable[[Job], None] | None = None,
        gpu_count: Callable[[], int | None] | None = None,
        code_files: Callable[[], Any] | None = None,
        elsewhere: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.settings = settings
        # The jobs run elsewhere (bringhome.py), as their areas in the store were last seen.
        self.elsewhere = elsewhere
        # The work directory's files the store mirrors (relative paths): where a job's code is
        # looked for (manifest.py); without the sync's list, every file but environments.
        self.code_files = code_files or (lambda: manifest.walk(self.settings.workdir))
        self.seen = SeenRecords(settings.state_dir)
        self.key_error: str | None = None  # why this runtime has no usable job key
        # Record files of the store that cannot be read, by name, with why: listed until gone.
        self.bad_records: dict[str, str] = {}
        self.gpu_count = gpu_count or (
            lambda: None
        )  # this runtime's GPUs as the monitor sees them; None: unknown
        self.store = store
        self.checkpoint = (
            checkpoint  # asks the job's run for a checkpoint and waits; None or why not
        )
        self.run_view = run_view or (lambda job: {})
        self.run_ended = run_ended or (lambda job: None)
        self.jobs: dict[str, Job] = {}
        self.loaded = False  # the store's records read (once the store is open)
        # Why the sync could not open the store, while it cannot (the records wait for it).
        self.unopened: str | None = None
        self.relaunched: set[str] = set()
        self.store_error: str | None = None
        self.check_error: str | None = None  # the service's last look failed: why (service.py)
        # Where the environment differs from the snapshot: what the relaunch runs on ("on this
        # environment, which differs from the snapshot: 2 packages", "after restoring …").
        self.environment_note: str | None = None
        self._unwritten: set[str] = set()
        self._lock = threading.RLock()
        # One flush at a time, each copy taken and written under it: the store gets a job's
        # records in the order they were made (two flushes at once could leave an older copy,
        # "running", over its "finished" one). Never taken while _lock is held.
        self._writing = threading.Lock()
        self._key: bytes | None = None

    # -- the key -------------------------------------------------------------------------------

    def key(self) -> bytes:
        """The user's job key; JobKeyError (one line: where, why, how to fix) when unusable."""
        if self._key is None:
            try:
                self._key = trust.job_key()
            except trust.JobKeyError as err:
                self.key_error = str(err)
                raise
            self.key_error = None
        return self._key

    # -- starting --------------------------------------------------------------------------------

    def submit(
        self,
        command: list[str] | None = None,
        notebook: str | None = None,
        name: str | None = None,
        retries: int = 0,
        gpus: int | None = None,
        cwd: str = "",
        resume: str | None = None,
    ) -> JobRecord:
        """Check what is asked, record it (signed) and start it; JobInputError says what is wrong,
        JobKeyError that there is no key to sign it with. The job's run is a new one of its own
        (its name, else its script's or notebook's and a short id), or `resume`'s: a run of this
        work directory with a checkpoint, which no active job writes."""
        if (command is None) == (notebook is None):
            raise JobInputError("Give a command (a list of arguments) or a notebook, not both")
        bounds = limits()
        if resume is not None and (
            not isinstance(resume, str) or not resume.strip() or len(resume) > MAX_RUN_NAME
        ):
            raise JobInputError(f"resume must be a run's name of 1 to {MAX_RUN_NAME} characters")
        if (
            isinstance(retries, bool)
            or not isinstance(retries, int)
            or not 0 <= retries <= MAX_RETRIES
        ):
            raise JobInputError(f"retries must be a whole number from 0 to {MAX_RETRIES}")
        if gpus is not None and (
            isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= bounds.gpus
        ):
            raise JobInputError(f"gpus must be a whole number from 1 to {bounds.gpus}")
        if not isinstance(cwd, str) or len(cwd) > bounds.path:
            raise JobInputError(f"cwd must be a folder path of at most {bounds.path} characters")
        folder = self.folder(cwd)
        output = None
        if notebook is not None:
            notebook_rel, output = self._check_notebook(notebook)
            kind, argv = "notebook", ["python", "-m", NOTEBOOK_MODULE, notebook_rel]
            label = name or Path(notebook_rel).stem
        else:
            problem = command_problem(command)
            if problem:
                raise JobInputError(problem)
            assert isinstance(command, list)
            self._check_command(command, folder)
            kind, argv, notebook_rel = "command", list(command), None
            label = name or _label(command)
        if name is not None and (
            not isinstance(name, str)
            or not name.strip()
            or len(name) > bounds.name
            or "\x00" in name
        ):
            # Without NUL, as its record's reader takes it: a job the API took survives relaunch.
            raise JobInputError(f"name must be text of 1 to {bounds.name} characters without NUL")
        self.key()  # no record without a key to sign it: JobKeyError says how to fix it
        job_id = f"j-{uuid.uuid4().hex[:12]}"
        if output is not None and self._output_taken(output):
            # Another job of the same notebook writes its copy now: this one writes its own.
            stem = Path(output).name.removesuffix(".job.ipynb")
            output = Path(output).with_name(f"{stem}.job-{job_id[-4:]}.ipynb").as_posix()
        saved = saved_runs(checkpoints_root(self.settings.workdir))
        now = time.time()
        record = JobRecord(
            id=job_id,
            name=label,
            kind=kind,
            command=argv,
            workspace=self.settings.workspace,
            notebook=notebook_rel,
            output=output,
            cwd=folder.relative_to(self._root()).as_posix() if folder != self._root() else "",
            gpus=gpus,
            retries=retries,
            created=now,
            updated=now,
        )
        job = Job(record)
        with self._lock:  # two jobs asked at once never take one run
            if resume is not None:
                record.run, record.resumed_step = self._run_to_resume(resume, saved)
            else:
                record.run = self._new_run(
                    name, notebook_rel or _script(argv) or argv[0], job_id, saved
                )
            self.jobs[record.id] = job
        self._start(job, "running")
        return record

    def _saved_step(self, run: str | None) -> int | None:
        """The step of the newest complete checkpoint of `run` in the work directory."""
        if not run:
            return None
        folder = self._folder(run)
        try:
            runs = saved_runs(checkpoints_root(self.settings.workdir))
        except OSError:
            return None
        return next((r.step for r in runs if r.folder == folder or r.name == run), None)

    def _folder(self, run: str) -> str:
        """The folder of a run's checkpoints under the work directory: what makes two runs one."""
        return run_dir(checkpoints_root(self.settings.workdir), run).name

    def _writer_of(
        self, folder: str, besides: str | None = None, relaunching: bool = True
    ) -> Job | None:
        """The job (other than `besides`) that runs the run of this folder, or (`relaunching`)
        will run it again once relaunched: a second job would write the same run."""
        return next(
            (
                j
                for j in self.jobs.values()
                if (j.record.active or (relaunching and j.record.state == "interrupted"))
                and j.record.id != besides
                and j.record.run
                and self._folder(j.record.run) == folder
            ),
            None,
        )

    @staticmethod
    def _written_by(run: str, writer: Job) -> str:
        return (
            f"run {run!r} is the run of job {writer.record.id} ({writer.record.state}), which "
            "goes on writing it: stop or forget that job first"
        )

    def _run_to_resume(self, wanted: str, saved: list[SavedRun]) -> tuple[str, int]:
        """The run `wanted` names (by its name or its folder's) and its newest checkpoint's step;
        JobInputError, with the runs there are, where there is no such run or a job writes it."""
        folder = self._folder(wanted)
        found = next((r for r in saved if r.name == wanted), None) or next(
            (r for r in saved if r.folder == folder), None
        )
        # A run a job writes is its own, checkpoint or not yet: said so, not "no such run".
        writer = self._writer_of(found.folder if found is not None else folder)
        if found is None and writer is not None:
            raise JobInputError(
                f"resume: {self._written_by(wanted, writer)}, or start a new run (no "
                "checkpoint of it yet)"
            )
        if found is None:
            raise JobInputError(
                f"resume: no run {wanted!r} with a checkpoint in this work directory; "
                + _runs_words(saved)
            )
        if writer is not None:
            raise JobInputError(
                f"resume: {self._written_by(found.name, writer)}, or start a new run"
            )
        return found.name, found.step

    def _new_run(self, name: str | None, target: str, job_id: str, saved: list[SavedRun]) -> str:
        """A run no job has yet: the job's name (a run of that name is refused: resume it, or
        name another), else its script's or notebook's name and the end of the job's id."""
        taken = {r.folder: r for r in saved}
        if name is not None and plain_run_name(name):
            run = plain_run_name(name)
            if run in taken:
                raise JobInputError(
                    f"a run named {run!r} exists (its newest checkpoint at step "
                    f'{_step(taken[run].step)}): resume it (--resume {run}, or "resume" in '
                    "the request) or give the job another name for a new run"
                )
            writer = self._writer_of(run)
            if writer is not None:
                raise JobInputError(
                    f"{self._written_by(run, writer)}, or give the job another name for a new run"
                )
            return run
        base = plain_run_name(Path(target).name) or "job"
        hexits = job_id[2:]
        for width in (4, 8, 12):  # the short id, longer only where a run has it already
            run = f"{base}-{hexits[-width:]}"
            if run not in taken and self._writer_of(run) is None:
                break
        return run

    def _root(self) -> Path:
        return self.settings.workdir.resolve()

    def folder(self, cwd: str) -> Path:
        """The job's folder: inside the work directory, after every link is followed."""
        if not isinstance(cwd, str) or "\x00" in cwd:
            raise JobInputError("cwd must be a folder of the work directory, as text")
        if os.path.isabs(cwd) or ".." in Path(cwd).parts:
            raise JobInputError(
                f"cwd {cwd!r} must be a folder inside the work directory, relative to it"
            )
        root = self._root()
        folder = (root / cwd).resolve()
        if folder != root and root not in folder.parents:
            raise JobInputError(f"cwd {cwd!r} leads outside the work directory (through a link)")
        mode = files.mode_of(folder)  # links resolved above: looked at, never opened
        if mode is None:
            raise JobInputError(f"cwd {cwd!r} is not a folder of the work directory")
        if not stat.S_ISDIR(mode):
            raise JobInputError(f"cwd {cwd!r} is {file_kind(mode)}, not a folder")
        return folder

    def _check_command(self, command: list[str], folder: Path) -> None:
        """The program exists (on the PATH, or as a path in the folder) and is a file; the script
        it runs, where one is there by that name, is a file or a folder: never a FIFO, a device
        or a socket (its job would wait on it for ever, or act on it). Only looked at, links
        followed: nothing is opened, so nothing waits."""
        program = command[0]
        if "/" in program:
            path = folder / program
            mode = files.mode_of(path)
            if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
                raise JobInputError(f"program {program!r} is {file_kind(mode)}, not a program")
            if mode is None or not stat.S_ISREG(mode) or not os.access(path, os.X_OK):
                raise JobInputError(
                    f"{program}: no such program in {folder} (or it is not executable)"
                )
        elif shutil.which(program, path=os.environ.get("PATH")) is None:
            raise JobInputError(f"{program}: command not found on this server's PATH")
        script = _script(command)
        mode = None if script is None else files.mode_of(folder / script)
        if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
            raise JobInputError(f"script {script!r} is {file_kind(mode)}, not a file")

    def _check_notebook(self, notebook: str) -> tuple[str, str]:
        if not isinstance(notebook, str) or not notebook.endswith(".ipynb"):
            raise JobInputError("notebook must be the path of a .ipynb file in the work directory")
        if os.path.isabs(notebook) or ".." in Path(notebook).parts:
            raise JobInputError(
                f"notebook {notebook!r} must be a path inside the work directory, relative to it"
            )
        root = self._root()
        path = (root / notebook).resolve()
        if root not in path.parents:
            raise JobInputError(
                f"notebook {notebook!r} leads outside the work directory (through a link)"
            )
        try:
            data = json.loads(
                files.read_regular(path, f"notebook {notebook!r}", files.MAX_NOTEBOOK_BYTES)
            )
        except files.RefusedFile as err:
            raise JobInputError(str(err)) from None
        except FileNotFoundError:
            raise JobInputError(f"notebook {notebook!r} does not exist") from None
        except OSError as err:
            raise JobInputError(
                f"notebook {notebook!r} cannot be read: {err.strerror or err}"
            ) from None
        except ValueError as err:
            raise JobInputError(f"notebook {notebook!r} is not valid JSON: {err}") from None
        if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
            raise JobInputError(f"notebook {notebook!r} is not a notebook (no list of cells)")
        rel = path.relative_to(root)
        return rel.as_posix(), output_path(rel).as_posix()

    def _start(self, job: Job, state: str) -> None:
        job.stopping = None
        job.runtime_id = self.settings.runtime_id
        job.record.held = False
        # A relaunch says what it follows (each attempt keeps its own end); a restart, nothing.
        before = job.record.reason if state == "relaunched" else None
        self._set(job, state=state, reason=f"relaunched after: {before}" if before else None)
        job.thread = threading.Thread(
            target=self._supervise, args=(job,), name=f"gpuws-job-{job.record.id}", daemon=True
        )
        job.thread.start()

    def _output_taken(self, output: str) -> bool:
        """Whether a job that is under way writes its outputs into `output`."""
        with self._lock:
            return any(
                j.record.output == output and j.record.state in ACTIVE for j in self.jobs.values()
            )

    def _argv(self, record: JobRecord) -> list[str]:
        if record.kind == "notebook":
            assert record.notebook is not None
            argv = [
                sys.executable,
                "-m",
                NOTEBOOK_MODULE,
                str(self.settings.workdir / record.notebook),
            ]
            out = record.output
            # Its own copy where another job of the notebook had the usual one; a record's path
            # is used only inside the work directory, as a notebook.
            if (
                out
                and out.endswith(".ipynb")
                and not os.path.isabs(out)
                and ".." not in Path(out).parts
            ):
                argv += ["--output", str(self.settings.workdir / out)]
            return argv
        return list(record.command)

    def _gpus_here(self) -> int | None:
        """This runtime's GPUs as the monitor counts them; None where it cannot count them."""
        try:
            return self.gpu_count()
        except Exception as err:  # noqa: BLE001 - the monitor's fault: unknown
            log.debug("gpuws: this runtime's GPUs: %s", err)
            return None

    def _code(self, record: JobRecord) -> manifest.CodeManifest:
        """The code this job would run now (manifest.py): what an attempt signs at its start,
        and what a relaunch compares with what was signed."""
        root = self.settings.workdir
        if record.kind == "notebook" and record.notebook:
            named = frozenset({record.notebook})
        else:
            named = manifest.named_files(record.command, record.cwd, root)
        return manifest.take(root, self.code_files(), named)

    def _fitted(self, job: Job) -> Fitted:
        """What this attempt runs: the command on the GPUs this runtime has (the record keeps
        what the user asked, so a later runtime with more GPUs runs it as asked again)."""
        available = self._gpus_here()
        fitted = fit_to_gpus(
            self._argv(job.record),
            job.record.gpus,
            available,
            relaunch=job.record.state == "relaunched",
        )
        if fitted.note:
            fitted.note = fitted.note[:MAX_TEXT]  # a record's text has a bound
        return fitted

    def log_path(self, job_id: str) -> Path:
        return self.settings.workdir / ".gpuws" / "jobs" / job_id / "log"

    def _environment(self, record: JobRecord, gpus: int | None) -> dict[str, str]:
        env = dict(os.environ, **self.settings.env)
        env.update(
            {
                JOB_ID_ENV: record.id,
                "GPUWS_WORKDIR": str(self.settings.workdir),
                "PYTHONUNBUFFERED": "1",
            }
        )
        # Its run, at every attempt (a relaunch resumes its own checkpoints): a record from
        # before runs were named by job has none, and tracks what its process names.
        env.pop(RUN_ENV, None)
        if record.run:
            env[RUN_ENV] = record.run
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(gpus))
        return env

    def _spawn(
        self, command: list[str], folder: Path, env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        """The job's command, started by its supervisor (reaper.py) in a session of its own; the
        Popen is the supervisor's, which exits as the command does. An OSError if the command
        cannot start, as Popen would raise it."""
        report, report_end = os.pipe()
        try:
            process = subprocess.Popen(
                [
                    *REAPER,
                    f"{self.settings.stop_grace * SUPERVISOR_GRACE:g}",
                    str(os.getpid()),
                    str(report_end),
                    *command,
                ],
                cwd=folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=(report_end,),
                # One prctl call, its library loaded beforehand: nothing that
                # another thread's lock could block between fork and exec.
                preexec_fn=_dies_with_its_server,
            )  # noqa: PLW1509
        finally:
            os.close(report_end)
        try:
            # Closed by the command's exec, or the errno of the exec that failed.
            with os.fdopen(report, "rb") as file:
                failure = file.read()
        except BaseException:
            _signal_group(process, signal.SIGKILL)
            process.wait()
            raise
        if failure:
            process.wait()
            assert process.stdout is not None
            process.stdout.close()
            number = int(failure)
            raise OSError(number, os.strerror(number))
        return process

    # -- one job's life --------------------------------------------------------------------------

    def _supervise(self, job: Job) -> None:
        record = job.record
        while True:
            attempt = self._attempt(job)
            if job.stopping == "stopped":
                self._set(
                    job,
                    state="stopped",
                    reason=f"stopped by you at step {_step(record.step)}"
                    if record.step is not None
                    else "stopped by you",
                )
                return
            if attempt.state == "interrupted" or job.stopping == "interrupted":
                self._set(job, state="interrupted", reason=attempt.reason)
                return
            if attempt.state == "finished":  # its reason only says where its log fell short
                self._set(job, state="finished", reason=attempt.reason)
                return
            used = (
                len([a for a in record.attempts if a.retryable is not None]) - job.failures_before
            )
            of = f"attempt {used} of {record.retries + 1}: {attempt.reason}"
            if attempt.retryable and used <= record.retries:
                wait = self.settings.backoff[min(used - 1, len(self.settings.backoff) - 1)]
                self._set(job, state="retrying", reason=f"{of}; retrying in {wait:g} s")
                job.wake.clear()
                job.wake.wait(wait)
                if job.stopping:
                    self._set(
                        job, state=job.stopping, reason=f"{of}; {job.stopping} before the retry"
                    )
                    return
                self._set(job, state="running", reason=of)
                continue
            if not attempt.retryable:
                reason = of if record.retries else str(attempt.reason)
                if "cannot change" not in reason:
                    reason += " (not retried: retrying cannot change it)"
                elif record.retries:
                    reason += " (not retried)"
            else:
                reason = of if record.retries else str(attempt.reason)
            self._set(job, state="failed", reason=reason)
            return

    def _attempt(self, job: Job) -> Any:
        from .record import Attempt

        record = job.record
        number = len(record.attempts) + 1
        attempt = Attempt(number=number, started=time.time(), host=self.settings.host)
        record.attempts.append(attempt)
        # Its folder made by the log, which a full disk does not stop: the job runs regardless.
        job.log = JobLog(self.log_path(record.id), max_bytes=self.settings.log_max_bytes)
        if number > 1:  # the log goes on from the attempt before: where this one begins
            began = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(attempt.started))
            job.log.note(f"gpuws: attempt {number}, on {self.settings.host}, {began}")
        kills_before = oom_kills()
        job.nan_stopped, job.nan_step = False, None
        try:
            # Checked again at each start: a relaunch runs in another work directory, where a link
            # may lead elsewhere and the folder may not have come back.
            folder = self.folder(record.cwd)
        except JobInputError as err:
            attempt.ended, attempt.retryable, attempt.reason = time.time(), False, str(err)
            return _Outcome("failed", attempt.reason, False)
        fitted = self._fitted(job)
        attempt.runs_on = fitted.note
        if fitted.note:
            log.info("gpuws: job %s %s", record.id, fitted.note)
        # What this attempt runs, signed in its record and written before the process starts (a
        # runtime killed a moment after the start leaves a record that holds it): a successor
        # relaunches the job by itself only on the same code.
        self._set(job, code=self._code(record).to_json())
        try:
            process = self._spawn(fitted.command, folder, self._environment(record, fitted.gpus))
        except OSError as err:  # gone since it was asked (a successor without the program)
            attempt.ended, attempt.retryable = time.time(), False
            attempt.reason = f"cannot start {record.command[0]}: {err.strerror or err}"
            return _Outcome("failed", attempt.reason, False)
        job.process = process
        log.info(
            "gpuws: job %s attempt %d started: %s",
            record.id,
            number,
            shown(shlex.join(fitted.command)),
        )
        # The process runs: its attempt is in the record, and on fewer GPUs than asked, the reason says so.
        self._set(job, **({"reason": fitted.note} if fitted.note and not record.reason else {}))
        assert process.stdout is not None
        reader = job.log.follow(process.stdout)
        returncode = self._wait(job, process, reader)
        process.stdout.close()
        job.log.close()
        job.process = None
        log_trouble = job.log.trouble()  # its output, to the end, not in its log
        try:
            self.run_ended(job)  # what its run reported last (its loop's last step) read now
        except Exception as err:  # noqa: BLE001 - the view is an extra, never the attempt's end
            log.debug("gpuws: the last view of job %s: %s", record.id, err)
        view = self._view(job)
        if isinstance(
            view.get("step"), int
        ):  # a view read after the end may lag the one read at the stop
            record.step = max(view["step"], record.step if record.step is not None else -1)
        tail = job.log.tail(TAIL_LINES)
        record.log_tail = tail
        kills_after = oom_kills()
        outcome = classify(
            returncode,
            tail,
            step=record.step,
            interrupted=job.stopping is not None,
            nan_loss=bool(view.get("nan_loss")),
            nan_stopped=job.nan_stopped,
            nan_step=job.nan_step if job.nan_stopped else view.get("nan_step"),
            oom_killed=kills_before is not None
            and kills_after is not None
            and kills_after > kills_before,
        )
        reason = outcome.reason
        checkpoint = view.get("checkpoint_step", job.checkpoint_step)
        if outcome.state == "interrupted" and record.step is not None:
            reason = f"stopped for the runtime's end at step {_step(record.step)}" + (
                f"; resumes from its checkpoint at step {_step(checkpoint)}"
                if checkpoint is not None
                else ""
            )
        reason = _joined(reason, log_trouble)
        attempt.ended, attempt.returncode, attempt.step = time.time(), returncode, record.step
        # An interruption is no failure: it uses none of the retries.
        attempt.reason, attempt.retryable = (
            reason,
            None if outcome.state in ("interrupted", "finished") else outcome.retryable,
        )
        log.info(
            "gpuws: job %s attempt %d ended: %s", record.id, number, shown(reason or outcome.state)
        )
        return _Outcome(outcome.state, reason, outcome.retryable)

    def _wait(self, job: Job, process: subprocess.Popen[bytes], reader: threading.Thread) -> int:
        """The attempt's return code, once its output is read to the end; meanwhile its reason
        says when that output does not reach its log (a full disk)."""
        job.log_trouble, job.log_trouble_next = None, 0.0
        while reader.is_alive() and process.poll() is None:
            reader.join(LOG_LOOK_SECONDS)
            self._say_log_trouble(job)
        returncode = process.wait()
        reader.join()
        return returncode

    def _say_log_trouble(self, job: Job) -> None:
        """Put why the job's output is not reaching its log in its reason (after what the reason
        says already), or take it out once the log is written again. A count that grew is said
        again at most every LOG_TROUBLE_EVERY seconds: each change is a write to the store."""
        trouble = job.log.trouble() if job.log is not None else None
        said = job.log_trouble
        if trouble == said or (trouble and said and time.monotonic() < job.log_trouble_next):
            return
        reason = job.record.reason
        if said and reason and reason.endswith(said):
            reason = reason[: -len(said)].removesuffix("; ") or None
        job.log_trouble, job.log_trouble_next = trouble, time.monotonic() + LOG_TROUBLE_EVERY
        self._set(job, reason=_joined(reason, trouble))

    def _view(self, job: Job) -> dict[str, Any]:
        try:
            return self.run_view(job) or {}
        except Exception as err:  # noqa: BLE001 - the job's view is an extra, never its end
            log.debug("gpuws: the view of job %s: %s", job.record.id, err)
            return {}

    def _set(self, job: Job, **changes: Any) -> None:
        """Change the record and write it to the store (a record not written yet is written by
        the next flush: the store may be away, or this runtime not the writer yet)."""
        with self._lock:
            for name, value in changes.items():
                setattr(job.record, name, value)
            job.record.updated = time.time()
            if job.untrusted is None:
                job.record.seq = max(job.record.seq, self.seen.newest(job.record.id)) + 1
                trust.sign(job.record, self.key())
                self.seen.saw(job.record.id, job.record.seq)
            self._unwritten.add(job.record.id)
        self.flush()

    def flush(self) -> None:
        """Write the records changed since the last write, where this runtime may write."""
        if self.store is None:
            return
        with self._writing:
            self._flush()

    def _flush(self) -> None:
        assert self.store is not None
        with self._lock:
            pending = [(i, self.jobs[i]) for i in sorted(self._unwritten) if i in self.jobs]
        if not pending or self.store.why_not_writable() is not None:
            return
        for job_id, job in pending:
            if job.untrusted is not None:
                with self._lock:
                    self._unwritten.discard(
                        job_id
                    )  # not ours to rewrite until the user approves it
                continue
            with self._lock:
                data = job.record.to_json()
                self._unwritten.discard(job_id)
            try:
                self.store.write(job_id, data)
                self.store_error = None
            except Exception as err:  # noqa: BLE001 - the store's fault: kept, written again later
                with self._lock:
                    self._unwritten.add(job_id)
                self.store_error = f"job records not written to the store: {err}"
                log.warning("gpuws: %s", self.store_error)
                return
        self.seen.save()

    # -- what the user does ----------------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        with self._lock:
            job = self.jobs.get(job_id)
        if job is None:
            if self.store is not None and not self.loaded:
                raise JobsNotRead(
                    f"No job {job_id!r} yet: the store's job records are still being read "
                    "(the store is being opened); ask again in a moment"
                )
            raise JobNotFound(f"No job {job_id!r}")
        return job

    def stop(self, job_id: str) -> bool:
        """A running job: checkpoint, then stop, kept as `stopped` (True). Any other: forgotten
        here and in the store (False)."""
        job = self.get(job_id)
        if job.record.state in ACTIVE:
            self._stop(job, "stopped", checkpoint=True)
            return True
        with self._lock:
            self.jobs.pop(job_id, None)
            self._unwritten.discard(job_id)
            # No copy of it comes back to this runtime: one past its newest record.
            self.seen.saw(job_id, max(job.record.seq, self.seen.newest(job_id)) + 1)
        self.seen.save()
        if self.store is not None and self.store.why_not_writable() is None:
            self.store.delete(job_id)  # the user's say, a record this key did not sign included
        return False

    def restart(self, job_id: str) -> JobRecord:
        """Run again (from the newest checkpoint: the tracker's resume() finds it). For a record
        this key did not sign, this is the user's approval: it is signed as theirs from now."""
        job = self.get(job_id)
        if job.record.state in ACTIVE:
            raise JobInputError(f"job {job_id} is {job.record.state}: stop it first")
        self.key()  # approving signs it: JobKeyError says how to fix a key that is not one
        if job.record.kind == "notebook":
            assert job.record.notebook is not None
            self._check_notebook(job.record.notebook)
        else:
            self._check_command(job.record.command, self.folder(job.record.cwd))
        run = job.record.run
        with self._lock:  # an interrupted one beside it is approved or forgotten in its turn
            writer = self._writer_of(self._folder(run), job_id, relaunching=False) if run else None
        if run and writer is not None:
            raise JobInputError(self._written_by(run, writer))
        job.untrusted = None
        job.changed, job.changed_more = [], 0
        job.relaunched_on = None
        job.record.workspace = self.settings.workspace
        job.failures_before = len([a for a in job.record.attempts if a.retryable is not None])
        self._start(job, "running")
        return job.record

    def hold(self, job_id: str, held: bool) -> JobRecord:
        """A held job is not relaunched by a successor (nor by this runtime) until released."""
        job = self.get(job_id)
        if job.record.state in ACTIVE and held:
            raise JobInputError(
                f"job {job_id} is {job.record.state}: only a job waiting to relaunch can be held"
            )
        self._set(job, held=held)
        return job.record

    def tail(self, job_id: str, lines: int) -> list[str]:
        return self.log_text(job_id, lines).lines

    def log_text(self, job_id: str, lines: int, after: str | None = None) -> LogText:
        """The job's last `lines` lines, or with `after` (an earlier answer's `next`) what it
        wrote since; where its log is not on this disk, the last lines its record keeps."""
        job = self.get(job_id)
        path = self.log_path(job_id)
        if path.exists() or Path(f"{path}.1").exists():
            log = job.log or JobLog(path)
            if after is None:
                return log.tail_text(lines)
            try:
                return log.since(after)
            except ValueError as err:
                raise JobInputError(str(err)) from None
        if after is not None:
            return LogText([], False, after)
        return LogText(job.record.log_tail[-lines:] if lines else [], False, "")

    # -- the runtime's end -----------------------------------------------------------------------

    def running(self) -> list[Job]:
        with self._lock:
            return [
                j
                for j in self.jobs.values()
                if j.process is not None or j.record.state == "retrying"
            ]

    def interrupt_all(self, grace: float | None = None, checkpoint: bool = False) -> list[str]:
        """Stop every running job for the runtime's end (its run asked for a checkpoint first
        unless the persist has done so), record it `interrupted` at its step, write the records.
        Returns the ids stopped."""
        jobs = self.running()
        threads = [
            threading.Thread(
                target=self._stop, args=(job, "interrupted", checkpoint, grace), daemon=True
            )
            for job in jobs
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.flush()
        return [job.record.id for job in jobs]

    def hand_over(self, why: str) -> list[str]:
        """Another runtime has taken the workspace over (it relaunches the jobs): stop every job
        running here at once, its run asked for a checkpoint first, and leave the records to the
        new writer (nothing of this runtime's is written over its copies). Returns the ids."""
        jobs = self.running()
        if jobs:
            log.warning("gpuws: stopping %d job(s) here: %s", len(jobs), why)
        threads = [
            threading.Thread(target=self._stop, args=(job, "interrupted", True), daemon=True)
            for job in jobs
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        with self._lock:
            self._unwritten.clear()
        return [job.record.id for job in jobs]

    def stop_on_nan_loss(self) -> list[str]:
        """End the attempt of every running job whose run the training view flags with a loss
        that is not finite, as the runtime's end would (checkpoint, SIGTERM, SIGKILL after the
        grace): its supervisor then classifies and retries it, and resume() passes over the
        suspect checkpoints taken since. Returns the ids being stopped."""
        stopping = []
        for job in self.running():
            process, attempts = job.process, job.record.attempts
            if process is None or job.stopping or job.nan_stopped or not attempts:
                continue
            view = self._view(job)
            since = view.get("nan_since")
            # An episode from before this attempt (the view not yet told of its resume) is not its.
            if (
                not view.get("nan_loss")
                or not isinstance(since, (int, float))
                or since < attempts[-1].started
            ):
                continue
            step = view.get("nan_step")
            job.nan_stopped, job.nan_step = True, step if isinstance(step, int) else None
            log.warning(
                "gpuws: job %s: the loss was not finite at step %s; its attempt is stopped",
                job.record.id,
                job.nan_step,
            )
            threading.Thread(
                target=self._end_process,
                args=(job, process, True, None),
                daemon=True,
                name=f"gpuws-job-nan-{job.record.id}",
            ).start()
            stopping.append(job.record.id)
        return stopping

    def _stop(self, job: Job, why: str, checkpoint: bool, grace: float | None = None) -> None:
        grace = self.settings.stop_grace if grace is None else grace
        job.stopping = why
        job.wake.set()
        process = job.process
        if process is not None:
            self._end_process(job, process, checkpoint, grace)
        if job.thread is not None:
            job.thread.join(max(5.0, grace))

    def _end_process(
        self, job: Job, process: subprocess.Popen[bytes], checkpoint: bool, grace: float | None
    ) -> None:
        """Ask the job's run for a checkpoint (when `checkpoint`), then SIGTERM its supervisor,
        which passes it on to the job's process group (its command, the command's ranks and
        workers), as it does when this server dies; after the grace have the supervisor SIGKILL
        every process of the job (the group, as a last resort)."""
        grace = self.settings.stop_grace if grace is None else grace
        if checkpoint and self.checkpoint is not None and process.poll() is None:
            problem = self.checkpoint(job)
            if problem:
                log.info("gpuws: job %s stops without a new checkpoint: %s", job.record.id, problem)
        view = self._view(job)  # where it is, while its run is still registered
        job.record.step = view.get("step", job.record.step)
        job.checkpoint_step = view.get("checkpoint_step", job.checkpoint_step)
        try:
            os.kill(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(max(0.5, grace))
        except subprocess.TimeoutExpired:
            try:
                os.kill(process.pid, END_NOW)  # the supervisor: SIGKILL to every process of the job
                process.wait(END_NOW_WAIT)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                _signal_group(process, signal.SIGKILL)
                process.wait()

    # -- a successor -----------------------------------------------------------------------------

    def load(self, orphans: bool = True) -> bool:
        """Read the store's records (once the restore is done): jobs another runtime runs, ran
        or started. With `orphans` (this runtime holds the lease: no other writes the
        workspace), an active one counts as interrupted: its runtime is gone. Read again, a
        record replaces what this runtime knew of a job it does not run itself."""
        if self.store is None:
            self.loaded = True
            return True
        try:
            found = self.store.read_all()
        except Exception as err:  # noqa: BLE001 - tried again at the next tick
            self.store_error = f"job records not read from the store: {err}"
            return False
        try:
            key: bytes | None = self.key()
        except trust.JobKeyError:
            key = None  # nothing runs by itself; each record says why (relaunch_words)
        bad: dict[str, str] = {}
        for name, data, problem in found:
            try:
                why = problem or self._take(name, data, key, orphans)
            except Exception as err:  # noqa: BLE001 - one record's fault is its own
                log.exception("gpuws: job record %s", name)
                why = f"cannot be read: {err}"
            if why:
                bad[name] = why
        if set(bad) != set(self.bad_records):
            for name in sorted(set(bad) - set(self.bad_records)):
                log.warning("gpuws: job record %s ignored: %s", shown(name), shown(bad[name]))
        self.bad_records = bad
        self.seen.save()
        self.loaded = True
        return True

    def _take(self, name: str, data: Any, key: bytes | None, orphans: bool) -> str | None:
        """One record read from the store, judged alone: why it is not used, or None."""
        try:
            record = from_json(data)
        except RecordError as err:
            return str(err)
        if name != f"{record.id}.json":
            return f"holds the record of {record.id}, not of the job its name says"
        untrusted = (
            trust.why_untrusted(record, key, self.settings.workspace)
            if key is not None
            else f"this runtime has no usable job key ({self.key_error})"
        )
        with self._lock:
            known = self.jobs.get(record.id)
            if known is not None and (known.runtime_id is not None or record.id in self._unwritten):
                return None  # ours: this runtime's record is the newer
            if untrusted is None:
                newest = self.seen.newest(record.id)
                if record.seq < newest:
                    return (
                        f"an older copy of job {record.id}'s record (number {record.seq}; "
                        f"this runtime has seen number {newest}): put back into the store, "
                        "it is not used"
                    )
                self.seen.saw(record.id, record.seq)
            job = Job(record, untrusted=untrusted)
            if orphans and record.state in ACTIVE:
                # Its step as far as anything says: the record (written at most every
                # STEP_WRITE_EVERY) or its run's newest checkpoint, restored here by now.
                saved = self._saved_step(record.run)
                if saved is not None and (record.step is None or saved > record.step):
                    record.step = saved
                record.state = "interrupted"
                record.reason = _orphaned(record)
                last = record.attempts[-1] if record.attempts else None
                if last is not None and last.ended is None:
                    # Its end as its record last knew it: the runtime went without a word.
                    last.ended, last.reason = record.updated, record.reason
                    last.step = record.step if record.step is not None else last.step
                if job.untrusted is None and key is not None:
                    record.seq += 1
                    trust.sign(record, key)
                    self.seen.saw(record.id, record.seq)
                    self._unwritten.add(record.id)
            self.jobs[record.id] = job
        return None

    def renew(self) -> list[str]:
        """Sign and write again the record of each job this runtime runs whose last write is
        older than RENEW_EVERY (or a quarter of relaunch_window): a successor relaunches by
        itself only records written within relaunch_window, and a job that runs for days on one
        runtime must still come back when that runtime is lost. Returns the ids written."""
        every = min(RENEW_EVERY, self.settings.relaunch_window / 4)
        now = time.time()
        renewed = []
        for job in self.running():
            if job.untrusted is None and now - job.record.updated >= every:
                self._set(job)
                renewed.append(job.record.id)
        return renewed

    def record_steps(self) -> list[str]:
        """Put the step of each job this runtime runs into its stored record where it moved, at
        most every STEP_WRITE_EVERY seconds a job (each is a write to the store). Returns the
        ids written."""
        now = time.monotonic()
        written = []
        for job in self.running():
            if job.untrusted is not None or now - job.step_written < STEP_WRITE_EVERY:
                continue
            step = self._view(job).get("step")
            if isinstance(step, int) and step != job.record.step:
                job.step_written = now
                self._set(job, step=step)
                written.append(job.record.id)
        return written

    def relaunch_pending(self) -> list[str]:
        """The interrupted jobs that the next relaunch runs (the user sees them before)."""
        if not self.settings.relaunch:
            return []
        with self._lock:
            # A job this runtime stopped at its end is the next runtime's to relaunch.
            return [
                j.record.id
                for j in self.jobs.values()
                if j.record.state == "interrupted"
                and not j.record.held
                and j.untrusted is None
                and j.record.id not in self.relaunched
                and j.runtime_id != self.settings.runtime_id
            ]

    def relaunch(self) -> list[str]:
        """Relaunch every pending job (only the lease holder may: call once its restore is done)."""
        if self.store is not None and self.store.why_not_writable() is not None:
            return []
        started = []
        for job_id in self.relaunch_pending():
            job = self.get(job_id)
            self.relaunched.add(job_id)
            if not self._vouched(job):
                continue
            job.record.held = False
            job.relaunched_on = self.environment_note
            self._start(job, "relaunched")
            started.append(job_id)
        return started

    def note_environment(self, note: str) -> None:
        """What the environment's check, done after the relaunch, says the relaunched jobs run
        on: theirs to say, and every later relaunch's."""
        with self._lock:
            self.environment_note = note
            for job_id in self.relaunched:
                job = self.jobs.get(job_id)
                if job is not None and job.relaunched_on is None:
                    job.relaunched_on = note

    def _vouched(self, job: Job) -> bool:
        """Whether the job may relaunch by itself now (vouching.py); if not, it waits for the
        user's approval with the reason and the files that differ."""
        try:
            code = self._code(job.record)
        except OSError as err:
            log.warning(
                "gpuws: the code of job %s could not be read: %s", job.record.id, shown(str(err))
            )
            code = None
        verdict = judge(job.record, code, self.settings.relaunch_window, time.time())
        if verdict.reason is None:
            return True
        log.warning("gpuws: job %s is not relaunched by itself: %s", job.record.id, verdict.reason)
        with self._lock:
            job.untrusted = verdict.reason[:MAX_TEXT]
            job.changed, job.changed_more = verdict.changed, verdict.changed_more
        return False

    def relaunch_words(self, job: Job) -> str | None:
        record = job.record
        if record.state in ACTIVE and job.runtime_id is None:  # another runtime's, as it records
            return self._successor_words(job)
        if record.state != "interrupted":  # kept to its end: what its run and its outcome ran on
            return f"relaunched {job.relaunched_on}" if job.relaunched_on else None
        if job.untrusted is not None:
            return f"waits for your approval (restart it): {job.untrusted}"
        if record.held:
            return "held: not relaunched until you release it"
        if job.runtime_id == self.settings.runtime_id:
            return "the next runtime on this store relaunches it from its checkpoint"
        if not self.settings.relaunch:
            return "relaunching is off (c.GpuWorkspace.relaunch_jobs): restart it by hand"
        refusal = self.store.why_not_writable() if self.store is not None else None
        if refusal:  # the lease decides which runtime relaunches: never two
            return f"relaunched by the runtime that writes this workspace ({refusal})"
        if self.environment_note:
            return f"relaunches {self.environment_note}"
        return "relaunches when this runtime has restored its checkpoint"

    def _successor_words(self, job: Job) -> str | None:
        """A job another runtime records as running, while that runtime has stopped renewing
        its lease: when this one relaunches it (once the lease runs out and the restore is done),
        or why it will not by itself."""
        gone = self.store.writer_gone() if self.store is not None else None
        if gone is None:
            return None
        host, left, quiet = gone
        silent = f"its runtime on {host} has not renewed its lease for {quiet:.0f} s"
        if job.untrusted is not None:
            return f"{silent}; it then waits for your approval (restart it): {job.untrusted}"
        if job.record.held:
            return f"{silent}; held: not relaunched until you release it"
        if not self.settings.relaunch:
            return f"{silent}; relaunching is off (c.GpuWorkspace.relaunch_jobs)"
        when = f"in {left:.0f} s" if left >= 1 else "once its checkpoint is restored"
        return f"will be relaunched here {when}: {silent}"

    # -- what the API shows ----------------------------------------------------------------------

    def describe(self, job: Job, tail: int = TAIL_LINES) -> dict[str, Any]:
        record = job.record
        view = self._view(job) if record.state in ACTIVE else {}
        step = view.get("step", record.step)
        state = "held" if record.held and record.state == "interrupted" else record.state
        return {
            "id": record.id,
            "name": record.name,
            "kind": record.kind,
            "command": record.command,
            "notebook": record.notebook,
            "output": record.output,
            "cwd": record.cwd,
            "gpus": record.gpus,
            "retries": record.retries,
            "state": state,
            "reason": record.reason,
            "attempts": [vars(a) for a in record.attempts],
            "run": view.get("run", record.run),
            "resumed_step": record.resumed_step,
            "step": step,
            "total_steps": view.get("total_steps"),
            "eta_seconds": view.get("eta_seconds"),
            "verdict": view.get("verdict"),
            "log_tail": self.tail(record.id, tail)
            if record.state in ACTIVE
            else record.log_tail[-tail:],
            "relaunch": self.relaunch_words(job),
            "needs_approval": job.untrusted is not None,
            "approval": self.approval(job),
            "created": record.created,
            "updated": record.updated,
        }

    def approval(self, job: Job) -> dict[str, Any] | None:
        """What restarting a job that needs approval approves, as its record says (None for a job
        that needs none): what runs, where, why it waits, and its code's changed files."""
        if job.untrusted is None:
            return None
        record = job.record
        return {
            "reason": job.untrusted,
            "command": list(record.command),
            "cwd": record.cwd,
            "notebook": record.notebook,
            "changed": [{"path": path, "change": change} for path, change in job.changed],
            "changed_more": job.changed_more,
        }

    def records(self) -> list[JobRecord]:
        """Every job's record, newest first (the Checkpoints view names each job's run)."""
        with self._lock:
            return [j.record for j in sorted(self.jobs.values(), key=lambda j: -j.record.created)]

    def list(self) -> dict[str, Any]:
        with self._lock:
            jobs = sorted(self.jobs.values(), key=lambda j: -j.record.created)
        error = (
            self.store_error
            or self.check_error
            or self._key_words()
            or (
                (
                    f"the store's job records cannot be read until the sync opens the store: "
                    f"{self.unopened}"
                    if self.unopened
                    else "the store's job records are still being read (the store is being "
                    "opened): the list is not complete yet"
                )
                if self.store is not None and not self.loaded
                else None
            )
        )
        return {
            "jobs": [self.describe(job) for job in jobs],
            "relaunch": {"enabled": self.settings.relaunch, "pending": self.relaunch_pending()},
            "error": error,
            "store_fault": recall(error) is not None,
            "bad_records": [
                {"file": name, "reason": why} for name, why in sorted(self.bad_records.items())
            ],
            "elsewhere": self.elsewhere() if self.elsewhere is not None else None,
        }

    def _key_words(self) -> str | None:
        if self.key_error is None:
            return None
        return f"no job runs by itself on this runtime: {self.key_error}"


@dataclass
class _Outcome:
    state: str
    reason: str | None
    retryable: bool


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(process.pid, sig)  # the job's whole session: its workers and torchrun's ranks too
    except (ProcessLookupError, PermissionError):
        pass


def _joined(reason: str | None, more: str | None) -> str | None:
    return f"{reason}; {more}" if reason and more else reason or more


def _script(command: list[str]) -> str | None:
    """The script a command runs, as far as its words say: its first argument that is not an
    option and looks like a path (`python train.py`, `torchrun --nproc-per-node 2 train.py`)."""
    for arg in command[1:]:
        if not arg.startswith("-") and ("." in arg or "/" in arg):
            return arg
    return None


def _label(command: list[str]) -> str:
    """A job's default name: the script it runs (`python train.py` → train.py), else the program."""
    return Path(_script(command) or command[0]).name[:200]


def _step(step: int) -> str:
    return f"{step:,}"


def _orphaned(record: JobRecord) -> str:
    """How an attempt ended whose runtime is gone (a kill -9, a machine lost): as far as its
    record, written while it ran, knows."""
    if record.step is None:
        return "interrupted: its runtime ended without stopping it"
    return f"interrupted at step {_step(record.step)}: its runtime ended without stopping it"


RUNS_LISTED = 20


def _runs_words(runs: list[SavedRun]) -> str:
    """The runs a job may resume, for a refusal: each with its newest checkpoint's step."""
    if not runs:
        return "it has none yet: leave resume out to start a new run"
    listed = ", ".join(f"{shown(r.name[:100])} (step {_step(r.step)})" for r in runs[:RUNS_LISTED])
    more = f" and {len(runs) - RUNS_LISTED:,} more" if len(runs) > RUNS_LISTED else ""
    return f"its runs: {listed}{more}"
