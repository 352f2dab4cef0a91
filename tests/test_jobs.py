"""Jobs (jobs.py): one at a time per kind and key, and what a cancel does to the one running."""

from __future__ import annotations

import threading

from jupyter_gpu_ws.jobs import Job, JobRunner, Step
from tests.waiting import until


def test_a_job_asked_again_is_joined_but_a_cancelled_one_still_in_its_step_is_not() -> None:
    runner = JobRunner()
    release = threading.Event()
    ran: list[str] = []

    def stuck(job: Job, step: Step) -> None:
        release.wait(10)  # a step that does not look at the cancel (a checkpoint wait)
        ran.append(f"{job.id}:stuck")

    def then(job: Job, step: Step) -> None:
        ran.append(f"{job.id}:then")

    first = runner.start("persist", [("stuck", stuck), ("then", then)])
    assert runner.start("persist", [("stuck", stuck), ("then", then)]) is first  # joined
    assert first.to_dict()["cancelling"] is False
    runner.cancel(first.id)
    assert first.to_dict()["state"] == "running" and first.to_dict()["cancelling"] is True
    second = runner.start("persist", [("then", then)])
    assert second is not first  # a cancelled job starts no further step: a new one does the work
    until(lambda: second.state == "done")
    assert first.state == "running"  # still in its step
    release.set()
    until(lambda: first.state == "cancelled")
    assert first.to_dict()["cancelling"] is False
    assert [s.state for s in first.steps] == ["done", "skipped"]
    assert ran == [f"{second.id}:then", f"{first.id}:stuck"]


def test_jobs_of_another_key_run_side_by_side() -> None:
    runner = JobRunner()
    release = threading.Event()

    def stuck(job: Job, step: Step) -> None:
        release.wait(10)

    ordinary = runner.start("persist", [("stuck", stuck)])
    emergency = runner.start("persist", [("stuck", stuck)], key="emergency")
    assert emergency is not ordinary
    assert runner.start("persist", [("stuck", stuck)], key="emergency") is emergency
    assert runner.latest("persist") is emergency
    release.set()
    until(lambda: ordinary.state == emergency.state == "done")
