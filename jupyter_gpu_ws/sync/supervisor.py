"""Starts the sync for the server off the event loop: open the store, restore, then follow the
work directory; and says, at any moment, what state it is in (also when it could not start)."""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from .engine import SyncEngine, SyncSettings
from .errors import SyncError
from .service import SyncService


class SyncConfig(Protocol):
    restore_on_start: bool
    rescan_interval: float
    sync_debounce: float

    def sync_settings(self) -> SyncSettings: ...


class SyncSupervisor:
    def __init__(self, config: SyncConfig, log: logging.Logger | logging.LoggerAdapter) -> None:
        self.config = config
        self.log = log
        self.service: SyncService | None = None
        # The engine as soon as the store is open, before the service runs: a kernel's resume()
        # may ask it for a checkpoint (fetch_checkpoint) while the start's restore is under way.
        self.engine: SyncEngine | None = None
        self.state = "starting"
        self.error: str | None = None
        self.restore_summary: dict[str, Any] | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._start, name="gpuws-sync-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        settings = self.config.sync_settings()
        try:
            engine = SyncEngine(settings)
            engine.open()
        except SyncError as err:
            self.state, self.error = "error", str(err)
            self.log.error("GPU workspace sync is off: %s", err)
            return
        self.engine = engine
        if self.config.restore_on_start and not engine.read_only:
            try:
                report = engine.restore()
                self.restore_summary = {"restored": len(report.restored), "conflicts": report.conflicts,
                                        "errors": report.errors}
                if report.restored or report.conflicts:
                    self.log.info("GPU workspace: restored %d files (%d conflict copies)",
                                  len(report.restored), len(report.conflicts))
            except SyncError as err:
                self.restore_summary = {"restored": 0, "conflicts": [], "errors": [str(err)]}
                self.log.error("GPU workspace restore failed: %s", err)
        if self._stopping.is_set():
            engine.close()
            return
        self.service = SyncService(engine, debounce=self.config.sync_debounce,
                                   rescan_interval=self.config.rescan_interval)
        self.service.start()
        self.state, self.error = "running", None

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(30)
        if self.service is not None:
            self.service.stop()
            self.service.engine.close()

    def require(self) -> SyncService:
        """The running service, or a SyncError saying why there is none."""
        if self.service is None:
            if self.state == "starting":
                raise SyncError("The sync is still starting (opening the store and restoring); try again shortly")
            raise SyncError(f"The sync is not running: {self.error or 'disabled (c.GpuWorkspace.sync_enabled)'}")
        return self.service

    def status(self) -> dict[str, Any]:
        if self.service is None:
            return {"state": self.state, "last_error": self.error,
                    "pending_files": 0, "pending_bytes": 0, "restore": self.restore_summary}
        status = self.service.engine.status()
        status["restore"] = self.restore_summary
        status["watch"] = self.service.watch_status()
        return status
