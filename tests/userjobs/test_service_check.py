"""The jobs' background look (userjobs/service.py): a failure of it shows in the jobs' list, the
way the panel and `jupyter gpuws jobs` read it, until a look succeeds; not only in the log."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from jupyter_gpu_ws.userjobs.service import JobService


class App(SimpleNamespace):
    """The few app fields the service reads; `sync` fails while `broken` says why."""

    broken: str | None = None
    # Why the sync could not open the store (its state is then "error"), or None: opening.
    unopened: str | None = None

    @property
    def sync(self) -> Any:
        if self.broken:
            raise OSError(self.broken)
        # The store not open yet: nothing to do yet (the list says its records are not read).
        return SimpleNamespace(
            service=None,
            engine=None,
            on_running=[],
            state="error" if self.unopened else "starting",
            error=self.unopened,
        )


def made(tmp_path: Path) -> tuple[App, JobService]:
    app = App(
        workdir=str(tmp_path),
        workspace="ws",
        checkpoints=SimpleNamespace(server_id="r-1"),
        relaunch_jobs=True,
        job_stop_grace=5.0,
    )
    return app, JobService(app, env={})


def test_a_failing_look_shows_in_the_jobs_list_and_clears_once_a_look_succeeds(
    tmp_path: Path,
) -> None:
    app, service = made(tmp_path)
    app.broken = "the state folder is gone"
    service.check()
    error = service.manager.list()["error"]
    assert (
        error is not None
        and "the state folder is gone" in error
        and "background check failed" in error
    )
    app.broken = None
    service.check()
    error = service.manager.list()["error"]
    assert "background check failed" not in error and "still being read" in error


def test_while_the_sync_cannot_open_the_store_the_list_says_its_fault_not_being_read(
    tmp_path: Path,
) -> None:
    app, service = made(tmp_path)
    app.unopened = "The bucket late does not exist at 127.0.0.1:8333: create it"
    service.check()
    error = service.manager.list()["error"]
    assert "still being read" not in error
    assert error.endswith("until the sync opens the store: " + app.unopened)
    app.unopened = None  # the sync opens it now
    service.check()
    assert "still being read" in service.manager.list()["error"]


def test_a_store_away_is_said_once_in_the_log_and_waited_for_in_the_list(
    tmp_path: Path, caplog: Any
) -> None:
    from jupyter_gpu_ws.store.errors import StoreUnavailableError

    app, service = made(tmp_path)
    fault = "The store's host s3.example.invalid was not found (DNS): check the endpoint's name"

    def away() -> None:
        raise StoreUnavailableError(fault)

    service._once = away  # type: ignore[method-assign]  # a tick that meets the store away
    with caplog.at_level("WARNING"):
        for _ in range(5):
            service.check()
    assert service.manager.list()["error"] == f"the jobs wait for the store: {fault}"
    told = [r for r in caplog.records if fault in r.getMessage()]
    assert len(told) == 1 and told[0].exc_info is None  # once, and no traceback


def test_the_jobs_listing_of_the_cli_and_the_magic_says_the_lists_error() -> None:
    from jupyter_gpu_ws.userjobs.commands import listing_lines

    lines = listing_lines(
        {
            "jobs": [],
            "relaunch": {"enabled": True, "pending": []},
            "error": "job records not read from the store: the store does not answer",
        }
    )
    assert lines[-1] == "Problem: job records not read from the store: the store does not answer"
    assert listing_lines({"jobs": [], "relaunch": {"enabled": True, "pending": []}, "error": None})[
        -1
    ].startswith("No jobs")
