"""The one pipeline behind "Persist now": the browsers save their open documents, every tracked
kernel checkpoints, then the sync flushes (newest checkpoints first), with the environment
snapshot and the Git commit between them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .jobs import Job, JobRunner, Step, StepFunction
from .sync.errors import CancelledError, SyncError

if TYPE_CHECKING:
    from .documents import BrowserPages
    from .sync.service import SyncService


def _sync_step(service: SyncService):
    def run(job: Job, step: Step) -> None:
        try:
            report = service.flush(job.progress, job.cancel_event)
        except CancelledError as err:
            step.detail = str(err)
            return
        job.result.update(
            uploaded=len(report.uploaded),
            deleted=len(report.deleted),
            bytes_uploaded=report.bytes_uploaded,
            skipped=report.skipped,
            # Files that cannot be synced for a reason of their own are named, and do not fail
            # the persist of everything else.
            problems=[f"{p['path']}: {p['reason']}" for p in service.engine.pending_list(100)["problems"]],
            # An emergency persist's files that could not end in its time: not started, named.
            left_behind=report.left_behind,
            stored=service.engine.stored_summary(),
        )
        step.detail = f"{len(report.uploaded)} files uploaded, {len(report.deleted)} removed" + (
            f", {len(job.result['problems'])} cannot be synced" if job.result["problems"] else "") + (
            f", {len(report.left_behind)} left behind" if report.left_behind else "")
        if report.errors:
            raise SyncError("; ".join(report.errors[:3]) + (" …" if len(report.errors) > 3 else ""))

    return run


def _documents_step(pages: BrowserPages, run_async: Callable[..., Any], timeout: float):
    def run(job: Job, step: Step) -> None:
        report = run_async(pages.save_documents(timeout), timeout + 15)
        job.result["documents"] = report.to_dict()
        step.detail = report.summary()
        # A document that could not be saved fails the persist (so a release keeps the server
        # running), yet the later steps still run: the rest of the work matters as much. A page
        # that did not answer is only named: it may hold nothing unsaved, and a laptop asleep
        # with JupyterLab open must not fail every persist (or stop a release) until it wakes.
        job.errors.extend(f"{failed['path']} could not be saved: {failed['error']}" for failed in report.failed)

    return run


def _checkpoint_step(coordinator: Any, run_async: Callable[..., Any], timeout: float):
    def run(job: Job, step: Step) -> None:
        if not coordinator.tracking() and not coordinator.run_states():
            step.detail = "no kernel tracks anything"
            return
        results = run_async(coordinator.request_all(), timeout + 15)
        failed = [r for r in results if r["state"] == "error"]
        waiting = [r["request_id"] for r in results if r["state"] in ("accepted", "sent")]
        late = run_async(coordinator.wait_done(waiting, timeout), timeout + 15) if waiting else []
        job.result["checkpoints"] = results

        def done(kind: str) -> str:
            asked = [r for r in results if kind in r]
            ok = [r for r in asked if r["state"] != "error" and r.get("request_id") not in late]
            return f"{len(ok)} of {len(asked)}"

        runs = sum("run_id" in r for r in results)
        step.detail = f"{done('kernel_id')} kernels checkpointed" + (
            f", {done('run_id')} distributed runs" if runs else "")
        problems = [f"{_who(r)}: {r.get('message')}" for r in failed]
        problems += [f"{_who(coordinator.requests[rid])}: no checkpoint within {timeout:.0f} s" for rid in late]
        if problems:
            # Report, but go on to the sync: the files on disk still need to reach the store.
            job.errors.extend(problems)

    return run


def _who(request: dict[str, Any]) -> str:
    if "run_id" in request:
        return f"distributed run {request['run_id'][:8]}"
    return f"kernel {request['kernel_id'][:8]}"


def start_persist(runner: JobRunner, service: SyncService, coordinator: Any = None,
                  run_async: Callable[..., Any] | None = None, checkpoint_timeout: float = 60.0,
                  git: StepFunction | None = None, environment: StepFunction | None = None,
                  trigger: str = "user", pages: BrowserPages | None = None,
                  documents_timeout: float = 5.0, key: str | None = None) -> Job:
    """The open documents first (so the checkpoints, the commit and the sync see what the user
    sees), then checkpoints (so the sync carries them), the environment snapshot and the Git
    commit, then the sync. `documents_timeout` 0 leaves the browsers alone. `key`: a persist
    of another key runs beside one running (an emergency's), else the running one is joined."""
    steps: list[tuple[str, StepFunction]] = []
    if pages is not None and run_async is not None and documents_timeout > 0:
        steps.append(("documents", _documents_step(pages, run_async, documents_timeout)))
    if coordinator is not None and run_async is not None:
        steps.append(("checkpoints", _checkpoint_step(coordinator, run_async, checkpoint_timeout)))
    if environment is not None:
        steps.append(("environment", environment))
    if git is not None:
        steps.append(("git", git))
    steps.append(("sync", _sync_step(service)))
    job = runner.start("persist", steps, key=key)
    job.result.setdefault("trigger", trigger)
    return job


def start_restore(runner: JobRunner, service: SyncService) -> Job:
    def run(job: Job, step: Step) -> None:
        report = service.engine.restore(job.progress, job.cancel_event)
        job.result.update(restored=len(report.restored), conflicts=report.conflicts,
                          bytes_restored=report.bytes_restored)
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
        folder = supervisor.engine.fetch_checkpoint(run, job.progress, job.cancel_event,
                                                    timeout=max(1.0, deadline - time.monotonic()))
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
