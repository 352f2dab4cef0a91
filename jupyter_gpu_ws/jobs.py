"""Long work (persist, restore) as jobs: run in a thread, with progress, errors and cancel."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .sync.engine import Progress
from .sync.errors import SyncError

log = logging.getLogger(__name__)

KEEP_JOBS = 50


@dataclass
class Step:
    name: str
    state: str = "pending"  # pending, running, done, failed, skipped
    detail: str | None = None
    # What the step is doing now, in the user's words ("Checkpointing 2 kernels"), while it
    # runs: a text, or a function that says it from live figures (the upload's files done).
    activity: str | Callable[[], str] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state, "detail": self.detail}

    def doing(self) -> str | None:
        activity = self.activity
        return activity() if callable(activity) else activity


@dataclass
class Job:
    id: str
    kind: str
    steps: list[Step]
    state: str = "running"  # running, done, failed, cancelled
    started: float = field(default_factory=time.time)
    finished: float | None = None
    errors: list[str] = field(default_factory=list)
    result: dict[str, Any] = field(default_factory=dict)
    progress: Progress = field(default_factory=Progress)
    cancel_event: threading.Event = field(default_factory=threading.Event)
    key: str | None = None  # what the job is about, where several of a kind may run (a run's fetch)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "state": self.state,
            # Cancelled while a step that cannot stop midway finishes (a checkpoint, a browser's
            # save): no further step starts.
            "cancelling": self.state == "running" and self.cancel_event.is_set(),
            "started": self.started,
            "finished": self.finished,
            "steps": [step.to_dict() for step in self.steps],
            # The running step's own words and progress: never a file count while no file moves.
            "activity": next(
                (step.doing() for step in self.steps if step.state == "running"), None
            ),
            "progress": self.progress.snapshot(),
            "errors": list(self.errors),
            "result": dict(self.result),
        }


StepFunction = Callable[[Job, Step], None]
# Called once every step has ended, with the state the job is about to take: the last word on
# its result (a summary), in place before anyone polling sees the job end.
EndFunction = Callable[[Job, str], None]


class JobRunner:
    """Runs one job of a kind (and key) at a time: asking again while one runs returns it."""

    def __init__(self) -> None:
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()

    def start(
        self,
        kind: str,
        steps: list[tuple[str, StepFunction]],
        result: dict[str, Any] | None = None,
        key: str | None = None,
        on_end: EndFunction | None = None,
    ) -> Job:
        """A new job (with `result` as its first result), or the one of this kind still running.
        `key`: jobs of one kind about different things run side by side (a fetch per run); one
        about the same thing is joined instead of started again. A cancelled job still finishing
        its step is not joined: it starts no further step."""
        with self._lock:
            for job in self._jobs.values():
                if (
                    job.kind == kind
                    and job.key == key
                    and job.state == "running"
                    and not job.cancel_event.is_set()
                ):
                    return job
            job = Job(
                uuid.uuid4().hex[:12],
                kind,
                [Step(name) for name, _ in steps],
                result=dict(result or {}),
                key=key,
            )
            self._jobs[job.id] = job
            while len(self._jobs) > KEEP_JOBS:
                self._jobs.popitem(last=False)
        threading.Thread(
            target=self._run, args=(job, steps, on_end), name=f"gpuws-{kind}", daemon=True
        ).start()
        return job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def latest(self, kind: str) -> Job | None:
        with self._lock:
            found = [job for job in self._jobs.values() if job.kind == kind]
        return found[-1] if found else None

    def cancel(self, job_id: str) -> Job | None:
        job = self.get(job_id)
        if job is not None and job.state == "running":
            job.cancel_event.set()
        return job

    def _run(
        self, job: Job, steps: list[tuple[str, StepFunction]], on_end: EndFunction | None = None
    ) -> None:
        for step, (_, function) in zip(job.steps, steps, strict=False):
            if job.cancel_event.is_set():
                step.state = "skipped"
                continue
            step.state = "running"
            try:
                function(job, step)
                step.state = "done"
            except Exception as err:  # every failure reaches the user through the job
                step.state = "failed"
                step.detail = str(err)
                job.errors.append(str(err))
                if not isinstance(err, SyncError):  # expected failures carry their own message
                    log.exception("%s job %s: step %s failed", job.kind, job.id, step.name)
        state = "cancelled" if job.cancel_event.is_set() else "failed" if job.errors else "done"
        if on_end is not None:
            try:
                on_end(job, state)
            except Exception:  # the job's own outcome stands; its summary is a courtesy
                log.exception("%s job %s: its summary failed", job.kind, job.id)
        job.finished = time.time()
        job.state = state
