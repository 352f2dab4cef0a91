"""The one pipeline behind "Persist now": today a full flush of the sync; the checkpoint,
environment and Git steps join it in later issues, in that order before the flush."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .jobs import Job, JobRunner, Step
from .sync.errors import CancelledError, SyncError

if TYPE_CHECKING:
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
        )
        step.detail = f"{len(report.uploaded)} files uploaded, {len(report.deleted)} removed"
        if report.errors:
            raise SyncError("; ".join(report.errors[:3]) + (" …" if len(report.errors) > 3 else ""))

    return run


def start_persist(runner: JobRunner, service: SyncService) -> Job:
    return runner.start("persist", [("sync", _sync_step(service))])


def start_restore(runner: JobRunner, service: SyncService) -> Job:
    def run(job: Job, step: Step) -> None:
        report = service.engine.restore(job.progress, job.cancel_event)
        job.result.update(restored=len(report.restored), conflicts=report.conflicts,
                          bytes_restored=report.bytes_restored)
        step.detail = f"{len(report.restored)} files restored, {len(report.conflicts)} kept as conflict copies"
        if report.errors:
            raise SyncError("; ".join(report.errors[:3]))

    return runner.start("restore", [("restore", run)])
