"""Keeps the store in step with the work directory, in the background: file-system events feed
passes over just the changed paths, a periodic rescan is the backstop, a store that failed a
pass is tried again by itself, and a take-over of the lease is followed by a restore and a
rescan. The server and `jupyter gpuws sync` both run one of these."""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable

import watchfiles

from ..store.backend import PART_SUFFIX
from . import inotify
from .engine import PassReport, Progress, SyncEngine
from .errors import LeaseHeldError, SyncError
from .ignore import IGNORE_FILE
from .scan import is_environment

log = logging.getLogger(__name__)


# How long the inotify watcher waits for quiet after the last event before it reports.
WATCH_STEP_MS = 5
# watchfiles' `step` (elsewhere than Linux): also how often it wakes to look, so it is longer.
WATCHFILES_STEP_MS = 10
# The first pass waits at most this long for the watch to be in place (a very large tree).
WATCH_READY_TIMEOUT = 30.0
# After a pass that the store failed (not answering, full), the next try waits this long,
# doubling up to the cap: each try costs one request while the store stays down.
RETRY_FIRST = 2.0
RETRY_MAX = 15.0
# The whole store's versions are pruned (and counted) after the first pass, then this often.
PRUNE_EVERY = 3600.0
# A change after a quiet spell is uploaded at once when it is this small: a burst that goes on
# (a large file being written) waits for the settle delay instead, so no upload is wasted on it.
LEADING_MAX_FILES = 8
LEADING_MAX_BYTES = 4 * 2**20


def _few_small(workdir: str, rels: set[str]) -> bool:
    if len(rels) > LEADING_MAX_FILES:
        return False
    for rel in rels:
        try:
            st = os.lstat(os.path.join(workdir, rel))  # a link is small, whatever it names
        except OSError:
            continue  # gone: a deletion is small
        if st.st_size > LEADING_MAX_BYTES or stat.S_ISDIR(st.st_mode):
            return False  # a folder that appeared may hold anything
    return True


class SyncService:
    def __init__(
        self,
        engine: SyncEngine,
        *,
        debounce: float = 0.05,
        rescan_interval: float = 300.0,
        watch_step: int = WATCH_STEP_MS,
        watcher: str = "auto",
        on_pass: Callable[[PassReport | None, str | None], None] | None = None,
        on_takeover: Callable[[], None] | None = None,
    ) -> None:
        """`on_takeover`: run in the service's thread when this runtime becomes the writer
        after another (the server restores there), before the full pass that follows."""
        self.engine = engine
        self.on_takeover = on_takeover
        self._need_takeover_work = False
        self._retry_delay = 0.0
        self._retry_at: float | None = None
        self._next_prune: float | None = None
        self.debounce = debounce
        self.watch_step = watch_step
        # `watcher`: "auto" is inotify on Linux, else watchfiles; "watchfiles" forces the portable one.
        self._use_inotify = watcher != "watchfiles" and inotify.available()
        self._tree_watcher: inotify.TreeWatcher | None = None
        self.watch_error: str | None = None
        # The watcher's last report came after a quiet spell and named a few small files: it is
        # uploaded at once instead of after the settle delay (a saved notebook, an edited script).
        self._leading = False
        self._quiet_open = False  # a quiet spell's first write was reported while still open
        self.rescan_interval = rescan_interval
        self.on_pass = on_pass
        self.final_pass = True
        self._next_rescan = 0.0  # monotonic: when the next full rescan is due
        # Files held back while still being written, and when to look at them again.
        self._settling: set[str] = set()
        self._settle_at: float | None = None
        self._looked = False  # what differs was noted while the engine could not write yet
        self._stop = threading.Event()
        self._wake = threading.Event()
        # Set once the watch is in place (or has failed): the first pass waits for it, so that a
        # file written between that pass's scan and the watch is not left to the next rescan.
        self._watching = threading.Event()
        self._threads: list[threading.Thread] = []
        self._last_logged: str | None = None
        self.passes = 0

    def start(self, initial_pass: bool = True) -> None:
        self.engine.on_writable = self._on_writable
        self.engine.settling.sees_closing = self._use_inotify  # inotify says when a file is closed
        self.engine.on_gap = (
            self.request_rescan
        )  # the store is back: its record is checked, everything looked at
        self._stop.clear()
        self._watching.clear()
        self._need_rescan = initial_pass
        if initial_pass:
            self._wake.set()
        for target, name in ((self._watch, "gpuws-watch"), (self._loop, "gpuws-sync")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        watcher = self._tree_watcher
        if watcher is not None:
            watcher.close()
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []

    def request_rescan(self) -> None:
        self._need_rescan = True
        self._wake.set()

    def _on_writable(self) -> None:
        """The lease's thread made this runtime the writer (a take-over): restore, then rescan."""
        self._need_takeover_work = True
        self.request_rescan()

    def flush(
        self, progress: Progress | None = None, cancel: threading.Event | None = None
    ) -> PassReport:
        """A full pass now (Persist now): everything on disk reaches the store."""
        self.engine.take_dirty()  # the full pass covers them
        return self._run(None, progress, cancel, raise_errors=True, durable=True)  # type: ignore[return-value]

    # -- threads -----------------------------------------------------------------------------

    def watch_status(self) -> dict[str, object]:
        """How changes are noticed: the watcher, whether some folders go unwatched (the
        system's limit), why watching stopped if it did, and the rescan that covers for it."""
        watcher = self._tree_watcher
        return {
            "watcher": "inotify" if self._use_inotify else "watchfiles",
            "folders": len(watcher.wds) if watcher is not None else None,
            "limited": bool(watcher is not None and watcher.limited),
            "error": self.watch_error,
            "rescan_interval": self.rescan_interval,
        }

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                if self._use_inotify:
                    self._watch_inotify()
                else:
                    self._watch_watchfiles()
            except Exception as err:  # the folder vanished, too many watches, …: rescans still run
                if "Unable to decode path" in str(err):
                    # watchfiles cannot name a file whose name is not UTF-8 (store/names.py): the
                    # rescan finds it and the others in that batch, and watching goes on at once.
                    self.request_rescan()
                    continue
                self._watching.set()
                self.watch_error = f"File watching stopped: {err}"
                log.warning("Sync: file watching stopped (%s); relying on periodic rescans", err)
                self._stop.wait(30)

    def _report(self, rels: set[str], writing: set[str] | None = None) -> None:
        """The watcher's news: mark the paths dirty and wake the loop. `writing`: those still
        open for writing at their latest event (they wait to settle: sync/settle.py); None where
        the watcher cannot tell."""
        rules = self.engine.rules
        rels = {rel for rel in rels if PART_SUFFIX not in rel and not rules.ignored(rel)}
        if not rels:
            return
        if writing is not None:
            self.engine.settling.heard(rels, writing)
        # A quiet spell's first write may come in two reports (its writes, still open, then its
        # close): the close still leads, though the first report just counted as a change.
        quiet = time.monotonic() - self.engine.last_change >= self.debounce or self._quiet_open
        self._quiet_open = quiet and bool(writing)
        self._leading = quiet and not writing and _few_small(self.engine.workdir, rels)
        try:
            self.engine.mark_dirty(rels)
        except Exception:  # noqa: BLE001 - a path it cannot look at must not stop the watching
            log.exception(
                "Sync: could not note %d changed paths; a full pass looks at them", len(rels)
            )
            self._need_rescan = True
        self._wake.set()

    def _watch_inotify(self) -> None:
        """Linux: the thread sleeps in the kernel until something changes (see inotify.py)."""
        engine = self.engine

        def skip(rel: str, path: str) -> bool:
            return engine.rules.ignored(rel, is_dir=True) or is_environment(path)

        watcher = inotify.TreeWatcher(engine.workdir, skip)
        self._tree_watcher = watcher
        self._watching.set()
        self.watch_error = None
        try:
            if self._stop.is_set():
                return
            for batch in watcher.changes(self.watch_step):
                if batch is None:  # the kernel's queue overflowed: look at everything
                    self.request_rescan()
                    continue
                if (
                    IGNORE_FILE in batch.paths
                ):  # folders it no longer excludes are watched from now on
                    engine.rules.reload()
                    watcher.add_tree("")
                self._report(batch.paths, batch.writing)
        finally:
            self._tree_watcher = None
            watcher.release()

    def _watch_watchfiles(self) -> None:
        """Elsewhere: watchfiles, which looks for news every step (at least 10 ms)."""
        workdir = self.engine.workdir
        self.watch_error = None
        self._watching.set()  # watchfiles says nothing when it is ready
        for changes in watchfiles.watch(
            workdir,
            debounce=1600,
            step=max(self.watch_step, WATCHFILES_STEP_MS),
            stop_event=self._stop,
            rust_timeout=1000,
            yield_on_timeout=False,
            raise_interrupt=False,
        ):
            rels = {os.path.relpath(p, workdir).replace(os.sep, "/") for _, p in changes}
            self._report({rel for rel in rels if not rel.startswith("..")})

    def _loop(self) -> None:
        """The service's thread: it never dies. A step that fails unforeseen (a bug, a file the
        engine did not expect) is logged with its traceback and shown as the sync's error, and
        the next step runs after a back-off; a clean stop still ends with a last full pass."""
        self._watching.wait(WATCH_READY_TIMEOUT)
        self._next_rescan = time.monotonic() + self.rescan_interval
        while not self._stop.is_set():
            try:
                self._step()
            except Exception as err:  # noqa: BLE001 - the sync must never stop silently
                log.exception("Sync: the sync's loop failed; it goes on")
                self.engine.state, self.engine.last_error = "error", f"Sync failed: {err}"
                self._retry_delay = (
                    min(RETRY_MAX, self._retry_delay * 2) if self._retry_delay else RETRY_FIRST
                )
                self._retry_at = time.monotonic() + self._retry_delay
                self._stop.wait(min(self._retry_delay, 1.0))
        # A last full pass, so a clean stop loses nothing, whether or not the watcher
        # has reported the last writes yet.
        self.engine.take_dirty()
        if self.engine.writable and self.final_pass:
            self._run(None, durable=True)

    def _step(self) -> None:
        """One turn of the loop: wait for news or a due time, then the pass it calls for."""
        engine = self.engine
        now = time.monotonic()
        due = [self._next_rescan]
        if self._retry_at is not None:
            due.append(self._retry_at)
        if self._next_prune is not None:
            due.append(self._next_prune)
        if self._settle_at is not None:
            due.append(self._settle_at)
        if not engine.writable and engine.lease.held:
            due.append(now + 1.0)  # taking over, or the lease awaits a renewal: look again soon
        self._wake.wait(max(0.0, min(due) - now))
        self._wake.clear()
        if self._stop.is_set():
            return
        now = time.monotonic()
        if self._need_takeover_work and self.on_takeover is not None and not engine.read_only:
            self._need_takeover_work = False
            self._safely(self.on_takeover)
        if not engine.writable:
            if self._need_rescan and not self._looked:
                self._looked = True  # what waits is pending, and said so, before the first pass
                self._safely(engine.look)
            return  # another runtime writes, or ours is not yet in force: changes wait
        if self._next_prune is not None and now >= self._next_prune:
            self._next_prune = now + PRUNE_EVERY
            self._safely(engine.prune_versions)
        if self._settle_at is not None and now >= self._settle_at:
            self._settle_at = None
            engine.mark_dirty(
                self._settling
            )  # files held back while written: settled by now, maybe
            self._settling = set()
        if self._retry_at is not None and now >= self._retry_at:
            self._retry_at = None
            if engine.store_down is not None:
                self._need_rescan = True  # the store may be back: look at everything once
            else:
                engine.mark_dirty(engine.pending_set.paths())  # everything that waits goes now
        if self._need_rescan or now >= self._next_rescan:
            self._need_rescan = False
            self._next_rescan = now + self.rescan_interval
            engine.take_dirty()
            self._after(self._run(None))
            return
        settle = self.debounce - (time.monotonic() - engine.last_change)
        if settle > 0 and not self._leading:
            # Let a burst of writes (a notebook saving, a checkpoint being written) settle; news
            # meanwhile (a change that may lead, a stop) looks again at once.
            self._wake.wait(settle)
            self._wake.set()
            return
        self._leading = False
        dirty = engine.take_dirty()
        if dirty:
            self._after(self._run(dirty))

    def _after(self, report: PassReport | None) -> None:
        """After a pass: a store that failed it is tried again by itself, sooner at first; the
        whole store's versions are pruned once the first pass is done."""
        engine = self.engine
        if self._next_prune is None and report is not None:
            self._next_prune = time.monotonic()
        if report is not None and report.settling:
            self._settling.update(report.settling)
            due = time.monotonic() + min(report.settling.values())
            self._settle_at = due if self._settle_at is None else min(self._settle_at, due)
        if (
            engine.store_down is not None
            or (report is not None and report.stopped)
            or (report is None and engine.state == "error" and engine.pending_set.paths())
        ):
            self._retry_delay = (
                min(RETRY_MAX, self._retry_delay * 2) if self._retry_delay else RETRY_FIRST
            )
            self._retry_at = time.monotonic() + self._retry_delay
        elif report is not None and report.errors and engine.pending_set.paths():
            self._retry_delay = RETRY_MAX  # a file failing for its own reason: not in a tight loop
            self._retry_at = time.monotonic() + self._retry_delay
        else:
            self._retry_delay = 0.0

    def _run(
        self,
        paths: set[str] | None,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
        raise_errors: bool = False,
        durable: bool = False,
    ) -> PassReport | None:
        """A pass; the watcher's and the rescan's leave the flush to the background, so that
        the next change is not kept waiting behind the disk."""
        try:
            report = self.engine.sync(paths, progress, cancel, durable=durable)
        except (SyncError, LeaseHeldError) as err:
            self._log_once(str(err))
            if self.on_pass:
                self.on_pass(None, str(err))
            if raise_errors:
                raise
            return None
        self.passes += 1
        self._log_once(report.errors[0] if report.errors else None)
        if self.on_pass:
            self.on_pass(report, report.errors[0] if report.errors else None)
        return report

    def _safely(self, action: Callable[[], object]) -> None:
        try:
            action()
        except SyncError as err:
            self._log_once(str(err))
        except Exception:  # noqa: BLE001 - the service thread must live on
            log.exception("Sync: %s failed", getattr(action, "__name__", "a step"))

    def _log_once(self, error: str | None) -> None:
        if error != self._last_logged:
            if error:
                log.warning("Sync: %s", error)
            elif self._last_logged:
                log.info("Sync: working again")
            self._last_logged = error
