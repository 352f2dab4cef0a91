"""The kernels' Python environment, on the server: what it holds now against the latest
snapshot in the store, noticed when it changes, snapshots and restores run as jobs."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .envsnap import (
    EnvError,
    SnapshotNotFoundError,
    SourcesNotAllowedError,
    capture,
    compatibility,
    diff,
    list_snapshots,
    load_snapshot,
    read_machine,
    restore,
    restore_sources,
    save_snapshot,
)
from .jobs import Job, JobRunner, Step
from .store.faults import recall
from .sync.errors import SyncError
from .sync.supervisor import SyncSupervisor
from .vocabulary import WORDS

if TYPE_CHECKING:
    from jupyter_server.serverapp import ServerApp

    from .store import Store

# The installer's last lines kept for the panel.
KEEP_LOG_LINES = 200
# How often the site-packages folders are looked at for a change (an os.stat each).
WATCH_EVERY = 10.0
# The store's list of snapshots is read again after this long (each panel polls GET /env),
# and at once after this server takes or compares a snapshot.
SNAPSHOT_LIST_TTL = 60.0


# How much lower the background check's probe runs (capture.probe_environment's `nice`).
BACKGROUND_NICE = 10


@dataclass(frozen=True)
class EnvironmentSettings:
    """Plain values from the app's traits (the same names), read once at the server's start."""

    env_python: str
    nvml_test_double: str
    env_keep_all_wheels: bool


class EnvironmentSupervisor:
    """Captures the kernels' environment in the background and compares it with the store's
    latest snapshot; a change to its site-packages (a `pip install` in a cell) makes it look
    again and, until a new snapshot is taken, says the snapshot is stale."""

    def __init__(
        self,
        settings: EnvironmentSettings,
        server: ServerApp,
        sync: SyncSupervisor,
        jobs: JobRunner,
        log: logging.Logger | logging.LoggerAdapter,
    ) -> None:
        self.settings = settings
        self.server = server  # its default kernel's interpreter is the default Python
        self.sync = sync
        self.jobs = jobs
        self.log = log
        self.current: dict[str, Any] | None = None
        self.captured: float | None = None
        self.compared: dict[str, Any] | None = None  # the latest snapshot's id, diff and verdicts
        self.error: str | None = None
        self.capturing = False
        self._signature: tuple[float, ...] | None = None
        self._listed: tuple[float, list[dict[str, Any]]] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- which Python -------------------------------------------------------------------------

    def python(self) -> str:
        """`env_python`, else the default kernel's interpreter, else the server's own."""
        if self.settings.env_python:
            return self.settings.env_python
        try:
            ksm = self.server.kernel_spec_manager
            argv = ksm.get_kernel_spec(self.server.kernel_manager.default_kernel_name).argv
            candidate = argv[0] if argv else ""
            if candidate in ("python", "python3", "{python}"):
                return sys.executable
            if os.path.isabs(candidate) or shutil.which(candidate):
                return candidate
        except Exception as err:  # no kernel spec: the server's Python is the best guess
            self.log.debug("GPU workspace: no default kernel interpreter: %s", err)
        return sys.executable

    def nvml(self) -> Any:
        """Where the machine's GPUs are read: the NVML test double when one is configured (as
        the monitor does), else the real binding (None)."""
        if self.settings.nvml_test_double:
            from .monitor.fake_nvml import FakeNvml

            return FakeNvml(self.settings.nvml_test_double)
        return None

    def store(self) -> Store:
        service = self.sync.require()
        return service.engine.store

    # -- watching ---------------------------------------------------------------------------

    def watch(self) -> None:
        """Start reading and watching the environment, once: on the first look at it (the
        panel), so a server nobody asks about its environment never imports torch to tell."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._watch, name="gpuws-env", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        self.refresh()
        while not self._stop.wait(WATCH_EVERY):
            signature = self._site_signature()
            if signature != self._signature:
                self.refresh()
            elif self.compared is not None and self.compared.get("error"):
                self.compare()  # the store could not be read (away, missing): heals once it can

    def _site_signature(self) -> tuple[float, ...] | None:
        """The modification times of the folders packages are installed in, and of the
        interpreter's own site-packages (an empty environment's first install goes there): an
        install or uninstall adds or removes a `*.dist-info` folder, which changes its mtime."""
        if not self.current:
            return None
        times = []
        folders = {
            os.path.dirname(p["location"])
            for p in self.current.get("packages", [])
            if p.get("location")
        }
        folders.update((self.current.get("python") or {}).get("site") or [])
        for folder in sorted(folders):
            try:
                times.append(os.stat(folder).st_mtime)
            except OSError:
                times.append(-1.0)
        return tuple(times)

    def refresh(self) -> None:
        """Capture the environment and compare it with the latest snapshot (in this thread)."""
        with self._lock:
            if self.capturing:
                return
            self.capturing = True
        try:
            # At a lower CPU priority: a check in the background, never in a job's way.
            current = capture(self.python(), nvml=self.nvml(), nice=BACKGROUND_NICE)
            self.current, self.captured, self.error = current, time.time(), None
            self._signature = self._site_signature()
            self.compare()
        except (EnvError, OSError) as err:
            self.error = str(err)
            self.log.warning("GPU workspace: cannot read the environment: %s", err)
        finally:
            self.capturing = False

    def snapshots(self) -> list[dict[str, Any]]:
        """The store's snapshots, newest last, listed at most once a minute."""
        listed = self._listed
        if listed is None or time.monotonic() - listed[0] > SNAPSHOT_LIST_TTL:
            try:
                listed = (
                    time.monotonic(),
                    [info.to_dict() for info in list_snapshots(self.store())],
                )
            except (SyncError, EnvError, OSError):
                return []  # asked again next time
            self._listed = listed
        return listed[1]

    def compare(self) -> None:
        self._listed = None  # a snapshot may have been added: list them again
        if self.current is None:
            return
        try:
            snapshot = load_snapshot(self.store())
        except SnapshotNotFoundError:
            self.compared = {"latest": None, "diff": None, "compatibility": []}
            return
        except (SyncError, EnvError) as err:
            self.compared = {"latest": None, "diff": None, "compatibility": [], "error": str(err)}
            return
        verdicts = compatibility(snapshot, read_machine(self.nvml()), self.current.get("python"))
        try:
            sources = restore_sources(snapshot, self.store(), self.python(), current=self.current)
        except (SyncError, EnvError, OSError):
            sources = []  # the restore itself checks again, and refuses
        self.compared = {
            "latest": {
                "id": snapshot.get("id"),
                "captured_at": snapshot.get("captured_at"),
                "hash": snapshot.get("hash"),
                "packages": len(snapshot.get("packages", [])),
            },
            "diff": diff(self.current, snapshot).to_dict(),
            "compatibility": [v.to_dict() for v in verdicts],
            # What a restore would fetch and build from VCS or URL sources: the restore dialog
            # lists them beside the checkbox that allows it.
            "sources": sources,
        }

    # -- the API -----------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        compared = self.compared or {}
        latest = compared.get("latest")
        current = self.current or {}
        if self.error:
            state = "error"
        elif not self.current:
            state = "capturing"
        elif latest is None:
            state = "no-snapshot"
        else:
            state = (
                "matches"
                if current.get("hash") == latest["hash"] or compared["diff"]["matches"]
                else "differs"
            )
        return {
            "state": state,
            "python": self.python(),
            "captured_at": self.captured,
            "capturing": self.capturing,
            "current": {
                "hash": current.get("hash"),
                "packages": len(current.get("packages", [])),
                "python": current.get("python"),
                "torch": current.get("torch"),
                "machine": current.get("machine"),
            }
            if current
            else None,
            "latest": latest,
            "diff": compared.get("diff"),
            "compatibility": compared.get("compatibility", []),
            "sources": compared.get("sources", []),
            "snapshots": self.snapshots(),
            "error": self.error or compared.get("error"),
            "store_fault": recall(self.error or compared.get("error")) is not None,
            "snapshot_job": _summary(self.jobs.latest("env-snapshot")),
            "restore_job": _summary(self.jobs.latest("env-restore")),
        }

    # -- jobs ---------------------------------------------------------------------------------

    def snapshot_step(self) -> Callable[[Job, Step], None]:
        """Capture and keep a snapshot (a step of Persist now, or a job of its own)."""

        def run(job: Job, step: Step) -> None:
            words = WORDS["persist"]["steps"]["environment"]

            def doing(what: str) -> None:
                step.activity = f"{words}: {what}"

            doing("reading the packages")
            snapshot = capture(self.python(), nvml=self.nvml())
            result = save_snapshot(
                self.store(),
                snapshot,
                self.python(),
                self.settings.env_keep_all_wheels,
                log=lambda line: _log(job, line),
                doing=doing,
            )
            self.current, self.captured = snapshot, time.time()
            self._signature = self._site_signature()
            self.compare()
            job.result["environment"] = result.to_dict()
            # A wheel that could not be made leaves the snapshot short of that package, and the
            # files are saved all the same: one line each, with the cause and what to do, where
            # the user reads the result (not only in the job's log).
            job.result.setdefault("warnings", []).extend(
                f"Environment snapshot: {failure['message']}" for failure in result.not_reproducible
            )
            step.detail = (
                f"new snapshot {result.id}" if result.new else f"unchanged since {result.id}"
            ) + (
                f", {len(result.not_reproducible)} packages not reproducible"
                if result.not_reproducible
                else ""
            )

        return run

    def start_snapshot(self) -> Job:
        self.store()  # a clear SyncError now, not a failed job later
        return self.jobs.start("env-snapshot", [("snapshot", self.snapshot_step())])

    def start_restore(
        self, snapshot_id: str | None, offline: bool, uninstall: bool, allow_sources: bool = False
    ) -> Job:
        """The restore job; before any, a clear error for an unknown or refused snapshot, and for
        sources to build without `allow_sources`. The job's answer lists the sources it builds."""
        store = self.store()
        snapshot = load_snapshot(store, snapshot_id)  # SnapshotNotFoundError, UnsafeSnapshotError
        sources = restore_sources(snapshot, store, self.python(), offline)
        if sources and not allow_sources:
            raise SourcesNotAllowedError(sources)

        def run(job: Job, step: Step) -> None:
            def progress(done: int, total: int, current: str) -> None:
                job.progress.set_items(done, total, current, "installing")

            report = restore(
                snapshot,
                store,
                self.python(),
                offline=offline,
                uninstall=uninstall,
                progress=progress,
                cancel=job.cancel_event,
                log=lambda line: _log(job, line),
                allow_sources=allow_sources,
            )
            job.result["restore"] = report.to_dict()
            job.result["snapshot"] = snapshot.get("id")
            step.detail = (
                f"{len(report.installed)} installed, {len(report.skipped)} already right"
                + (f", {len(report.failed)} failed" if report.failed else "")
            )
            for failure in report.failed:
                job.errors.append(f"{failure['name']}: {failure['message']}")
            self.refresh()

        return self.jobs.start(
            "env-restore",
            [("restore", run)],
            result={"snapshot": snapshot["id"], "sources": sources},
        )


def _log(job: Job, line: str) -> None:
    lines = job.result.setdefault("log", [])
    lines.append(line.rstrip())
    del lines[:-KEEP_LOG_LINES]


def _summary(job: Job | None) -> dict[str, Any] | None:
    return job.to_dict() if job is not None else None
