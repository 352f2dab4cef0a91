"""The one pipeline behind "Persist now": the browsers save their open documents, every tracked
kernel checkpoints, the Git commit, the sync flushes (newest checkpoints first), then the
environment snapshot; each step says what it does while it runs, and the job ends with one
summary of its outcome."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .jobs import Job, JobRunner, Step, StepFunction
from .sync.errors import CancelledError, SyncError
from .vocabulary import WORDS, count, fill, persist_summary

if TYPE_CHECKING:
    from .documents import BrowserPages
    from .sync.service import SyncService


STEP_WORDS: dict[str, str] = WORDS["persist"]["steps"]


def _sync_step(service: SyncService, since: tuple[int, int, int] | None):
    """`since`: the engine's count of what its passes sent when the persist began; what reached
    the store from then on is this persist's (the background passes carry a saved notebook or
    a new checkpoint as soon as it lands, often before this step begins)."""

    def run(job: Job, step: Step) -> None:
        step.activity = lambda: _upload_words(job.progress.snapshot())
        try:
            report = service.flush(job.progress, job.cancel_event)
        except CancelledError as err:
            step.detail = str(err)
            return
        if since is not None:
            now = service.engine.sent_so_far()
            uploaded, nbytes, there = (now[i] - since[i] for i in range(3))
        else:
            uploaded, nbytes, there = (
                len(report.uploaded),
                report.bytes_uploaded,
                report.found_in_store,
            )
        job.result.update(
            uploaded=uploaded,
            deleted=len(report.deleted),
            bytes_uploaded=nbytes,
            found_in_store=there,
            skipped=report.skipped,
            # Files that cannot be synced for a reason of their own are named, and do not fail
            # the persist of everything else.
            problems=[
                f"{p['path']}: {p['reason']}" for p in service.engine.pending_list(100)["problems"]
            ],
            # An emergency persist's files that could not end in its time: not started, named.
            left_behind=report.left_behind,
            stored=service.engine.stored_summary(),
        )
        step.detail = (
            f"{uploaded} files uploaded, {len(report.deleted)} removed"
            + (
                f", {len(job.result['problems'])} cannot be synced"
                if job.result["problems"]
                else ""
            )
            + (f", {len(report.left_behind)} left behind" if report.left_behind else "")
        )
        if report.errors:
            raise SyncError("; ".join(report.errors[:3]) + (" …" if len(report.errors) > 3 else ""))

    return run


def _upload_words(progress: dict[str, Any]) -> str:
    """ "Uploading 3 of 12 files", or what the sync does before it knows of any file."""
    if not progress.get("files_total"):
        return STEP_WORDS["sync_planning"]
    return fill(
        STEP_WORDS["sync"],
        done=f"{progress.get('files_done', 0):,}",
        files=count(progress["files_total"], "file"),
    )


def _documents_step(pages: BrowserPages, run_async: Callable[..., Any], timeout: float):
    def run(job: Job, step: Step) -> None:
        report = run_async(pages.save_documents(timeout), timeout + 15)
        job.result["documents"] = report.to_dict()
        step.detail = report.summary()
        # A document that could not be saved fails the persist (so a release keeps the server
        # running), yet the later steps still run: the rest of the work matters as much. A page
        # that did not answer is only named: it may hold nothing unsaved, and a laptop asleep
        # with JupyterLab open must not fail every persist (or stop a release) until it wakes.
        job.errors.extend(
            f"{failed['path']} could not be saved: {failed['error']}" for failed in report.failed
        )

    return run


def _checkpoint_step(coordinator: Any, run_async: Callable[..., Any], timeout: float):
    def run(job: Job, step: Step) -> None:
        kernels, runs = coordinator.tracking(), coordinator.run_states()
        if not kernels and not runs:
            step.detail = "no kernel tracks anything"
            return
        asked = count(len(kernels), "kernel") + (
            f" and {count(len(runs), 'distributed run')}" if runs else ""
        )
        step.activity = fill(STEP_WORDS["checkpoints"], kernels=asked)
        results = run_async(coordinator.request_all(), timeout + 15)
        ids = [r["request_id"] for r in results if "request_id" in r]

        def waiting_words() -> str:
            ended = sum(coordinator.requests[rid]["state"] in ("done", "error") for rid in ids)
            return fill(
                STEP_WORDS["checkpoints_waiting"], kernels=asked, done=ended, asked=len(results)
            )

        step.activity = waiting_words
        waiting = [r["request_id"] for r in results if r["state"] in ("accepted", "sent")]
        # Ends as soon as every kernel has answered: a checkpoint complete, or failed with the
        # kernel's reason (never the whole timeout for what has already failed).
        late = run_async(coordinator.wait_done(waiting, timeout), timeout + 15) if waiting else []
        # Each request as it ended (the answers above were taken when the kernels picked them up).
        results = [dict(coordinator.requests.get(r.get("request_id"), r)) for r in results]
        job.result["checkpoints"] = results
        notebooks = _notebooks(coordinator, run_async)

        def done(kind: str) -> str:
            of_kind = [r for r in results if kind in r]
            ok = [r for r in of_kind if r["state"] == "done"]
            return f"{len(ok)} of {len(of_kind)}"

        step.detail = f"{done('kernel_id')} kernels checkpointed" + (
            f", {done('run_id')} distributed runs" if runs else ""
        )
        problems = [
            f"{_who(r, notebooks)}: {r.get('message') or 'the checkpoint failed'}"
            for r in results
            if r["state"] == "error"
        ]
        problems += [
            f"{_who(coordinator.requests[rid], notebooks)}: no checkpoint within {timeout:.0f} s"
            for rid in late
        ]
        if problems:
            # Report, but go on to the sync: the files on disk still need to reach the store.
            job.errors.extend(problems)

    return run


def _notebooks(coordinator: Any, run_async: Callable[..., Any]) -> dict[str, str]:
    """Kernel id → the notebook its session names; none when the sessions cannot be read."""
    try:
        return dict(run_async(coordinator.notebooks(), 15) or {})
    except Exception:  # noqa: BLE001 - a kernel id still says which one
        return {}


def _who(request: dict[str, Any], notebooks: dict[str, str]) -> str:
    """The notebook a request went to (its session's path); a kernel's id only when no session
    names it; a distributed run by its id."""
    if "run_id" in request:
        return f"distributed run {request['run_id'][:8]}"
    return notebooks.get(request["kernel_id"]) or f"kernel {request['kernel_id'][:8]}"


def start_persist(
    runner: JobRunner,
    service: SyncService,
    coordinator: Any = None,
    run_async: Callable[..., Any] | None = None,
    checkpoint_timeout: float = 60.0,
    git: StepFunction | None = None,
    environment: StepFunction | None = None,
    trigger: str = "user",
    pages: BrowserPages | None = None,
    documents_timeout: float = 5.0,
    key: str | None = None,
) -> Job:
    """The open documents first (so the checkpoints, the commit and the sync see what the user
    sees), then checkpoints (so the sync carries them) and the Git commit, then the sync, and
    the environment snapshot last: its wheels of packages installed from folders take seconds
    to build (and may fail), and the files never wait for them. `documents_timeout` 0 leaves
    the browsers alone. `key`: a persist of another key runs beside one running (an
    emergency's), else the running one is joined. The job ends with `result.summary`: the
    one wording of its outcome (vocabulary.persist_summary)."""
    steps: list[tuple[str, StepFunction]] = []
    if pages is not None and run_async is not None and documents_timeout > 0:
        steps.append(
            ("documents", _named(_documents_step(pages, run_async, documents_timeout), "documents"))
        )
    if coordinator is not None and run_async is not None:
        steps.append(("checkpoints", _checkpoint_step(coordinator, run_async, checkpoint_timeout)))
    if git is not None:
        steps.append(("git", _named(git, "git")))
    engine = service.engine
    steps.append(("sync", _sync_step(service, engine.sent_so_far() if engine else None)))
    if environment is not None:
        steps.append(("environment", _named(environment, "environment")))

    def summarize(job: Job, state: str) -> None:
        try:
            same_disk = service.engine.same_disk()
        except Exception:  # noqa: BLE001 - unknown: never claim the files are elsewhere
            same_disk = True
        synced = any(step.name == "sync" and step.state == "done" for step in job.steps)
        job.result["summary"] = persist_summary(state, job.errors, job.result, same_disk, synced)

    job = runner.start("persist", steps, key=key, on_end=summarize)
    job.result.setdefault("trigger", trigger)
    return job


def _named(function: StepFunction, name: str) -> StepFunction:
    """A step that says what it does while it runs (its own function may say more)."""

    def run(job: Job, step: Step) -> None:
        step.activity = STEP_WORDS[name]
        function(job, step)

    return run


def start_restore(runner: JobRunner, service: SyncService) -> Job:
    def run(job: Job, step: Step) -> None:
        report = service.engine.restore(job.progress, job.cancel_event)
        job.result.update(
            restored=len(report.restored),
            conflicts=report.conflicts,
            bytes_restored=report.bytes_restored,
        )
        step.detail = f"{len(report.restored)} files restored, {len(report.conflicts)} kept as conflict copies"
        if report.errors:
            raise SyncError("; ".join(report.errors[:3]))

    return runner.start("restore", [("restore", run)])


def start_checkpoint_fetch(runner: JobRunner, supervisor: Any, run: str, timeout: float) -> Job:
    """For a kernel's `gpuws.resume()`: the newest complete checkpoint of `run` (a run folder
    relative to the work directory) made complete here, waiting for a restore that brings it,
    fetching it from the store otherwise. The result names the folder and its step, or says the
    store has none; an unreadable store fails the job with the reason."""
    import time

    def fetch(job: Job, step: Step) -> None:
        deadline = time.monotonic() + timeout
        while supervisor.engine is None:  # the sync is opening the store
            if supervisor.state in ("error", "disabled"):
                raise SyncError(f"The sync is not running: {supervisor.error or 'turned off'}")
            if time.monotonic() > deadline:
                raise SyncError(f"The sync did not start within {timeout:.0f} s")
            if job.cancel_event.wait(0.2):
                raise CancelledError("Cancelled")
        job.result["restoring"] = bool(supervisor.restoring)
        folder = supervisor.engine.fetch_checkpoint(
            run, job.progress, job.cancel_event, timeout=max(1.0, deadline - time.monotonic())
        )
        job.result["checkpoint"] = folder
        job.result["step"] = checkpoint_step(folder) if folder else None
        step.detail = folder or "the store holds no checkpoint of this run"

    return runner.start("checkpoint-fetch", [("fetch", fetch)], key=run)


def checkpoint_step(folder: str) -> int | None:
    """The step in a checkpoint folder's name (ckpt-<step>-<stamp>)."""
    try:
        return int(folder.rstrip("/").rsplit("/", 1)[-1].split("-")[1])
    except (IndexError, ValueError):
        return None
