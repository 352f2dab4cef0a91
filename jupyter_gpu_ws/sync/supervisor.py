"""Starts the sync for the server off the event loop: open the store, restore, then follow the
work directory; and says, at any moment, what state it is in (also when it could not start).

Restoring needs no lease: a runtime that starts while another still holds the workspace (a
successor seconds after a crash) restores at once, and writes once the lease is its own."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..store import open_backend
from ..store.faults import recall
from ..store.redact import redact
from ..store.workspaces import remember_choice, resolve_workspace
from .engine import SyncEngine, SyncSettings
from .errors import (
    LeaseHeldError,
    StoreConfigError,
    StoreMissingError,
    StoreUnavailableError,
    SyncError,
    WorkdirError,
)
from .service import SyncService

# A fault at start that may go by itself (the store away, a bucket not made yet, credentials or
# access refused, the work directory not mounted yet) is tried again: first after this many
# seconds, then twice as long each time, at most RETRY_MOST.
RETRY_FIRST = 5.0
RETRY_MOST = 60.0


class SyncConfig(Protocol):
    restore_on_start: bool
    rescan_interval: float
    sync_debounce: float
    workspace: str
    # The name earlier versions derived for this work directory, used while the default one does
    # not exist in the store and it does; None when the workspace was named (or chosen).
    legacy_workspace: str | None

    def sync_settings(self) -> SyncSettings: ...


class SyncSupervisor:
    def __init__(self, config: SyncConfig, log: logging.Logger | logging.LoggerAdapter) -> None:
        self.config = config
        self.log = log
        self.service: SyncService | None = None
        # The engine as soon as the store is open, and the service's once it runs: a kernel's
        # resume() may ask it for a checkpoint (fetch_checkpoint) while the start's restore is
        # under way, and the user may take the lease over then.
        self.engine: SyncEngine | None = None
        self.state = "starting"
        self.error: str | None = None
        self.restore_summary: dict[str, Any] | None = None
        self.restoring = False
        # What the start does or waits on now (opening the store, taking the lease, restoring,
        # waiting to try again), and since when: the panel says it, with the seconds.
        self.activity: str | None = None
        self.activity_since = 0.0
        self._retry_at = 0.0
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # Held while a restore writes the work directory (at start, and as a job): made here,
        # before the engine, so the Git tier can wait for the restore at start too.
        self.restore_lock = threading.Lock()
        # Called (from the sync's thread) once the service runs: the restore at start is over.
        self.on_running: list[Callable[[], None]] = []

    def start(self) -> None:
        self._thread = threading.Thread(target=self._start, name="gpuws-sync-start", daemon=True)
        self._thread.start()

    def _doing(self, activity: str | None) -> None:
        self.activity, self.activity_since = activity, time.monotonic()

    def _start(self) -> None:
        wait = RETRY_FIRST
        said = None
        while True:
            try:
                engine = self._open()
                break
            except Exception as err:  # any fault at start shows, with its message, in the panel
                self.state, self.error = "error", _one_line(err)
                if not _may_heal(err):
                    self._doing(None)
                    self.log.error("GPU workspace sync is off: %s", self.error)
                    return
                if self.error != said:  # once per fault, not at every try
                    said = self.error
                    self.log.error(
                        "GPU workspace sync cannot start: %s (trying again by itself)", self.error
                    )
                self._doing("trying again")
                self._retry_at = time.monotonic() + wait
                if self._stopping.wait(wait):
                    return
                wait = min(wait * 2, RETRY_MOST)
        if said is not None:
            self.log.info("GPU workspace sync: the store answers again; starting")
        self.state, self.error = "starting", None
        self.engine = engine
        if self.config.restore_on_start:
            self._doing("restoring from the store")
            self.restore(engine)
        self._doing(None)
        if self._stopping.is_set():
            engine.close()
            return
        self.service = SyncService(
            engine,
            debounce=self.config.sync_debounce,
            rescan_interval=self.config.rescan_interval,
            on_takeover=lambda: self.restore(engine) if self.config.restore_on_start else None,
        )
        self.service.start()
        self.state, self.error = "running", None
        for listener in self.on_running:
            listener()

    def _open(self) -> SyncEngine:
        settings = self.config.sync_settings()
        self._doing(f"opening the store {redact(settings.store_url)}")
        backend = open_backend(
            settings.store_url, settings.storage_options, settings.durable, settings.concurrency
        )
        if self.config.legacy_workspace:
            name, why = resolve_workspace(backend, settings.workspace, self.config.legacy_workspace)
            if why:
                self.log.info("GPU workspace: using %s", why)
                settings.workspace = self.config.workspace = name
        engine = SyncEngine(settings, backend=backend, restore_lock=self.restore_lock)
        self._doing("taking the workspace lease")
        engine.open()
        return engine

    def restore(self, engine: SyncEngine) -> None:
        """Bring back what the work directory lacks (whoever holds the lease), and say so."""
        self.restoring = True
        try:
            report = engine.restore()
            self.restore_summary = {
                "restored": len(report.restored),
                "conflicts": report.conflicts,
                "errors": report.errors,
                "time": time.time(),
            }
            if report.restored or report.conflicts:
                self.log.info(
                    "GPU workspace: restored %d files (%d conflict copies)",
                    len(report.restored),
                    len(report.conflicts),
                )
        except StoreMissingError as err:
            # Said once, as the sync's own state; the restore runs when the store is back.
            self.log.warning("GPU workspace restore waits for the store: %s", err)
        except Exception as err:  # noqa: BLE001 - reported; the sync goes on without it
            self.restore_summary = {
                "restored": 0,
                "conflicts": [],
                "errors": [_one_line(err)],
                "time": time.time(),
            }
            self.log.error("GPU workspace restore failed: %s", _one_line(err))
        finally:
            self.restoring = False

    def _activity_text(self) -> str | None:
        """What the start does or waits on, with its seconds so far ("opening the store
        s3://b/p (12 s)"); None once the sync runs."""
        activity = self.activity
        if activity is None:
            return None
        if activity == "trying again":
            return f"trying again by itself in {max(0.0, self._retry_at - time.monotonic()):.0f} s"
        return f"{activity} ({time.monotonic() - self.activity_since:.0f} s)"

    def use_workspace(self, name: str, state_dir: str, workdir: str) -> None:
        """Switch this work directory to another workspace of the store (remembered on this
        machine): the sync stops, and starts again there, restoring what it holds."""
        self.stop()
        remember_choice(state_dir, workdir, name)
        self.config.workspace = name
        self.config.legacy_workspace = None
        self.service = self.engine = None
        self.state, self.error, self.restore_summary = "starting", None, None
        self._stopping = threading.Event()
        self.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(30)
        if self.service is not None:
            self.service.stop()
            self.service.engine.close()
        elif self.engine is not None and (self._thread is None or not self._thread.is_alive()):
            self.engine.close()

    def require(self) -> SyncService:
        """The running service, or a SyncError saying why there is none."""
        if self.service is None:
            engine = self.engine
            if engine is not None and engine.read_only_reason is not None:
                # Read-only while it restores at start: the same answer as once it runs.
                raise LeaseHeldError(engine.read_only_reason)
            if self.state == "starting":
                raise SyncError(
                    "The sync is still starting (opening the store and restoring); try again shortly"
                )
            raise SyncError(
                f"The sync is not running: {self.error or 'disabled (c.GpuWorkspace.sync_enabled)'}"
            )
        return self.service

    def take_over(self) -> None:
        """The user's Take over, also while the start's restore runs (it needs no lease): the
        engine is open by then, and the service that follows starts as the writer."""
        engine = self.engine  # also the running service's
        if engine is None:
            engine = self.require().engine  # raises: why there is no engine yet
        engine.take_over()

    def status(self) -> dict[str, Any]:
        engine = self.engine
        if engine is None:  # the store not open yet: the same keys, nothing held or written
            fault = recall(self.error)
            return {
                "state": self.state,
                "last_error": self.error,
                "error_kind": fault.kind if fault else None,
                "error_detail": fault.detail if fault else None,
                "pending_files": 0,
                "pending_bytes": 0,
                "lease": None,
                "lease_held": False,
                "lease_writing": False,
                "restore": self.restore_summary,
                "restoring": False,
                "watch": None,
                "starting": self._activity_text(),
            }
        status = engine.status()
        status["starting"] = self._activity_text()
        if self.service is None and status["state"] not in ("error", "read-only"):
            status["state"] = "starting"  # restoring, before the watcher runs
        status["restore"] = self.restore_summary
        status["restoring"] = self.restoring
        status["watch"] = self.service.watch_status() if self.service is not None else None
        return status


def _may_heal(err: BaseException) -> bool:
    """Whether a fault at start may go by itself, so that trying again is worth it: the store
    away or refusing (a fault the store answered, faults.py), the work directory missing; not a
    malformed URL or option, which only a restart with another configuration mends."""
    if isinstance(err, (StoreUnavailableError, WorkdirError)):
        return True
    return isinstance(err, StoreConfigError) and recall(str(err)) is not None


def _one_line(err: BaseException) -> str:
    """An error as the panel and the CLI show it: the core's own message, or the exception's."""
    if isinstance(err, SyncError):
        return str(err)
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
