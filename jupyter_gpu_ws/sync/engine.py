"""The sync engine: mirrors the work directory to the store, lossless and atomic.

A pass plans from the local record (no walk or listing when the changed paths are known),
uploads in parallel and records what reached the store. Where the store's writes are not durable
at once (a local folder), a pass that waits for the disk (Persist now, the command line, a
release) records its files once the flush at its end has made them durable; the watcher's
passes record them at once, listed as not yet durable until the flush that follows in the
background. An unclean stop before that flush makes the next start send those files again. A
reader of the store sees whole files only, either way.

Nothing is overwritten or deleted without a version (versions.py), also where this runtime has
no record of a path (a new machine, a lost record): the store's copy is compared first. Only the
lease holder writes, and every write is fenced (lease.py). A file that cannot be read here is a
problem of its own (pending.py), never the store's fault; a store that stops answering stops the
pass at once (not one timeout per file) and is asked again until it answers. Restore brings back
what the work directory lacks and never overwrites or deletes local work.

This module is the coordinator, read top to bottom: a pass is planned by plan.py, its files
go through transfer.py, status.py reports; restore.py brings files back.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..defaults import is_embedded_store
from ..store import Store, open_backend
from ..store.backend import PART_SUFFIX, Backend, RemoteFile
from ..store.crypto import Encryption, protect
from ..store.lease import LEASE_NAME, Lease, LeaseKeeper
from ..store.names import shown
from ..store.presence import check_store, keep_apart, make_anew
from ..store.versions import Versions
from ..store.workspaces import write_summary
from .errors import (
    CancelledError,
    LeaseCorruptError,
    LeaseHeldError,
    QuotaExceededError,
    StoreConfigError,
    StoreFullError,
    StoreMissingError,
    StoreUnavailableError,
    SyncError,
)
from .ignore import BYTECODE_LEFT_OUT, IgnoreRules, is_bytecode
from .index import Record, SyncIndex
from .links import LinkRestore, entry_of, is_link_item, items_of
from .pending import PendingSet
from .plan import PassReport, Planner, check_workdir, files_text, needs_listing
from .progress import Progress, RateLimiter
from .restore import (
    CHECKPOINTS_PREFIX,
    ENVIRONMENT_LEFT_OUT,
    RestoreJob,
    RestoreReport,
    RestoreState,
    environments,
    in_environment,
    newest_checkpoints,
    restore_phases,
)
from .scan import LocalFile, local_path, present, scan, stat_path
from .settle import LONGEST_WAIT, Settling
from .stall import StallWatch
from .status import engine_status, on_same_disk, stored_summary
from .transfer import PassTransfer

log = logging.getLogger(__name__)

# Temporary files of interrupted writes older than this are removed when the lease is taken.
STALE_PART_SECONDS = 3600.0
# Seconds between two rewrites of the workspace's summary (.gpuws/summary.json).
SUMMARY_EVERY = 30.0


@dataclass
class SyncSettings:
    """Plain values from the app's traits (or the command line)."""

    workdir: str
    store_url: str
    workspace: str
    state_dir: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    concurrency: int = 8
    max_file_size: int | None = None
    bandwidth_limit: int | None = None  # bytes per second, all transfers together
    quota_bytes: int | None = None
    max_delete_fraction: float = 0.5
    keep_versions: int = 10
    version_max_age: float = 30 * 86400.0
    lease_ttl: float = 20.0
    host: str | None = None  # this runtime's name in the lease (default: the host name)
    durable: bool = True
    retries: int = 4
    retry_backoff: float = 0.5
    # A file that fails after every retry stops the pass (the store is taken to be down) when
    # no write has succeeded for this long; otherwise it is that file's error, and others go on.
    store_down_after: float = 5.0
    excludes: list[str] = field(default_factory=list)
    # The encrypted store (store/crypto): None for a plain one. Holds the passphrase: never logged.
    encryption: Encryption | None = None
    # A missing store folder may be made (the embedded default, or the user's create_store);
    # otherwise only where its parent holds other things (store/presence.py).
    create_store: bool = False
    # A file still being written waits until it has not changed for this long (sync/settle.py).
    settle_interval: float = 2.0
    # One that never settles (a log kept open and appended to) goes as it is this often.
    partial_copy_every: float = LONGEST_WAIT
    # The record (a SyncIndex file) of the restore this work directory began from: a file as that
    # restore left it is not sent. A job run elsewhere sends only what it wrote to its own area
    # of the workspace (userjobs/elsewhere.py), not the workspace again.
    baseline: str | None = None


def index_path(state_dir: str, settings_workdir: str, backend: Backend, workspace: str) -> str:
    # surrogateescape: a folder whose own name is not UTF-8 (the same hash for any other)
    key = hashlib.sha1(
        f"{os.path.abspath(settings_workdir)}\0{backend.description}\0{workspace}".encode(
            "utf-8", "surrogateescape"
        )
    )
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in workspace)
    return os.path.join(state_dir, f"{safe}-{key.hexdigest()[:12]}.sqlite3")


class SyncEngine:
    def __init__(
        self,
        settings: SyncSettings,
        backend: Backend | None = None,
        clock: Callable[[], float] = time.time,
        restore_lock: threading.Lock | None = None,
    ) -> None:
        self.settings = settings
        self.workdir = os.path.abspath(os.path.expanduser(settings.workdir))
        self.clock = clock
        check_workdir(self.workdir)
        backend = backend or open_backend(
            settings.store_url, settings.storage_options, settings.durable, settings.concurrency
        )
        if settings.encryption is not None and settings.encryption.scratch is None:
            # The encrypted copy of a file being sent goes beside the engine's own state, on a
            # disk (a temporary folder may be memory, too small for a checkpoint).
            settings.encryption.scratch = settings.state_dir
        # The store and the work directory apart; this engine's own folders out of the mirror.
        own = keep_apart(
            backend, self.workdir, settings.state_dir, is_embedded_store(settings.store_url)
        )
        # The record first (its name is the store's, encrypted or not): whether this machine
        # synced the workspace before decides whether a missing store is gone or is to begin.
        self.index = SyncIndex(
            index_path(settings.state_dir, self.workdir, backend, settings.workspace)
        )
        if self.index.rebuilt:
            log.warning("Sync: %s", self.index.rebuilt)
        # Which folder, store and workspace this is: a command run in the folder finds them there.
        self.index.note_place(self.workdir, settings.store_url, settings.workspace)
        missing = None
        try:
            check_store(
                backend,
                settings.workspace,
                self.index.count_and_bytes()[0],
                self.index.last_pass() is not None,
                settings.create_store,
            )
        except StoreMissingError as err:
            missing = str(err)  # read-only until it is back (open() and the lease's thread)
        try:
            # Before anything else touches the store: a wrong passphrase, or a writer of the
            # other kind (plain against encrypted), stops here.
            self.backend = protect(backend, settings.workspace, settings.encryption)
        except StoreUnavailableError:
            if settings.encryption is not None:
                raise
            # The store is away: a plain engine starts as before (read-only until it answers);
            # the encryption marker is looked at again by the next engine.
            log.warning(
                "Sync: could not check whether the workspace is encrypted (the store is not answering)"
            )
            self.backend = backend
        self.store = Store(self.backend, settings.workspace)
        self.rules = IgnoreRules(self.workdir, settings.excludes + own)
        self.lease = Lease(self.store, settings.lease_ttl, clock, host=settings.host)
        self.keeper = LeaseKeeper(self.lease, self._lease_changed, self._store_back)
        self.kept_versions = Versions(
            self.store,
            settings.keep_versions,
            settings.version_max_age,
            clock,
            self.lease.fence,
            min_interval=settings.settle_interval,
        )
        self.pending_set = PendingSet(self.workdir, self.index.get)
        self.baseline = SyncIndex(settings.baseline) if settings.baseline else None
        self.planner = Planner(
            self.workdir, self.rules, self.index, self.pending_set, self.baseline
        )
        self.settling = Settling(settings.settle_interval, settings.partial_copy_every)
        # Paths whose copy in the store was sent while still being written: never kept as a version.
        self.partial = set(self.index.partial_paths())
        self.limiter = RateLimiter(settings.bandwidth_limit) if settings.bandwidth_limit else None
        self.read_only_reason: str | None = None
        # Files of the store the last restore did not bring, and why (relative path → why).
        self.left_out: dict[str, str] = {}
        self.lease_corrupt = False
        self.state = "idle"
        self.last_sync: float | None = None
        self.last_error: str | None = None
        self.quota_warning: str | None = None
        # Why the store is taken to be down (a file failed after every retry), or None: while set,
        # files are not retried one after another, and each pass first asks the store once.
        self.store_down: str | None = None
        # Why the store's folder (or this workspace's, synced here before) is taken to be missing,
        # or None: a drive that dropped is the store unavailable, never an empty store.
        self.store_missing: str | None = missing
        # The record is compared with the store before it is trusted: at the first pass, and after
        # any gap (the store away, the lease lost or taken over); what the store lacks goes again.
        self._reconcile_due = True
        # Told when the store answers again after a gap (the service then looks at everything).
        self.on_gap: Callable[[], None] | None = None
        self.failing_since: float | None = None  # monotonic: the first failure since a success
        # Paths whose last write here may not be durable (a failed flush, an unclean stop before
        # one): sent again as they are, without comparing (after a failed fsync the page cache can
        # hold bytes the disk lost) and without a version of our own undurable copy.
        self.resend: set[str] = set()
        # Told when this runtime becomes the writer (a take-over): the service restores and rescans.
        self.on_writable: Callable[[], None] | None = None
        self._pass_lock = threading.Lock()
        self.running: tuple[Progress, PassReport] | None = None  # the pass in progress
        # Files and bytes every pass of this engine put in the store, and files it found there
        # already: a persist tells what reached the store while it ran (sent_so_far()).
        self._sent = (0, 0, 0)
        self._sent_lock = threading.Lock()
        # Held while a restore writes into the work directory; the Git tier waits for it (a
        # restore may be writing `.git/`). Shared with the server, which makes it before us.
        self.restore_lock = restore_lock or threading.Lock()
        self._dirty: set[str] = set()
        self._dirty_lock = threading.Lock()
        self.last_change = 0.0  # monotonic time of the last change the watcher reported
        # Set for an emergency persist (SIGTERM, preemption): what is smallest and most needed
        # goes first, in case the machine is gone before the pass ends.
        self.urgent = False
        # With it, the monotonic time by which the emergency persist must be done: a file that
        # cannot be finished by then is not started, and one under way stops there.
        self.urgent_until: float | None = None
        # Housekeeping owed once the lease is taken or the store is back: temporaries of dead
        # writes, abandoned multipart uploads, the whole-store prune of versions.
        self._maintenance_due = False
        # The workspace's summary in the store (files, bytes, last write) for `workspaces`
        # listings: rewritten after passes that changed something, at most every SUMMARY_EVERY.
        self._summary_due = False
        self._summary_written = 0.0
        self._same_disk: bool | None = None
        # A store that stops answering mid-pass (a stalled drive) shows in the status meanwhile.
        self.stall_watch = StallWatch(lambda: self.backend.probe(), lambda: self.store_busy)
        # The background flush after a pass that did not wait for one.
        self._flush_wanted = threading.Condition()
        self._flush_requested = False
        self._flusher: threading.Thread | None = None
        self._closing = False
        # The restore in progress, for resume() (fetch_checkpoint); one restore at a time.
        self.restoring = RestoreState()

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self, take_over: bool = False) -> None:
        """Check that the store is there (store/presence.py), take the lease and start keeping
        it. A missing store, a lease held by another runtime, an unreadable lease or a store that
        does not answer leave the engine read-only, with the reason; the lease's thread keeps
        looking and makes it the writer as soon as it can."""
        if self.store_missing is not None:
            log.warning("Sync: %s", self.store_missing)
            self.store_down = self.store_missing
            self.read_only_reason = (
                self.store_missing
            )  # the lease's thread takes it once the store is back
            self.keeper.start()
            return
        try:
            self.lease.acquire(take_over=take_over)
        except LeaseCorruptError as err:
            self.read_only_reason, self.lease_corrupt = str(err), True
            log.warning("Sync: %s", err)
        except LeaseHeldError as err:
            self.read_only_reason = str(err)
            log.warning("Sync: %s", err)
        except StoreConfigError:
            raise
        except SyncError as err:
            self.read_only_reason = f"Cannot take the workspace lease: {err}"
            self.keeper.error = self.read_only_reason
            log.warning("Sync: %s", self.read_only_reason)
        else:
            self._acquired()
        self.keeper.start()
        self.same_disk()  # looked at now, while the store answers: the status never waits on it

    def take_over(self) -> None:
        """The user's Take over: the lease becomes ours even from a live holder (writes wait
        until it has stopped), replaces an unreadable lease, or, where the store's folder or
        this workspace went missing, starts them anew there from this machine's files."""
        if self.store_missing is not None or isinstance(self.keeper.cause, StoreMissingError):
            make_anew(self.backend, self.settings.workspace)
            log.warning(
                "Sync: the store %s/%s is made anew, at the user's word",
                self.backend.description,
                self.settings.workspace,
            )
        self.lease.acquire(take_over=True)
        self._lease_changed(True, None)

    def note_missing(self, why: str) -> None:
        """The store's folder, or this workspace's, is not there: unavailable, not empty."""
        if why != self.store_missing:
            log.warning("Sync: %s", why)
        self.store_missing = self.store_down = why

    def _store_back(self) -> None:
        """The store answers again after a gap: the record is checked against it first."""
        self._reconcile_due = True
        if self.store_missing is not None and self.store_down == self.store_missing:
            self.store_down = None
        self.store_missing = None
        callback = self.on_gap
        if callback is not None:
            callback()

    def _lease_changed(self, held: bool, reason: str | None) -> None:
        if not held:
            self.read_only_reason = reason or "Another runtime writes this workspace"
            return
        self.read_only_reason, self.lease_corrupt = None, False
        if self.store_missing is not None and self.store_down == self.store_missing:
            self.store_down = None
        self.store_missing = None
        self._reconcile_due = (
            True  # another runtime may have written, or the store may have lost files
        )
        if self.state in ("read-only", "error"):
            self.state, self.last_error = "idle", None
        self._acquired()
        callback = self.on_writable
        if callback is not None:
            callback()

    def _acquired(self) -> None:
        # The workspace's folder is there now (its lease is): should it vanish, it is missing.
        self.backend.expect(self.settings.workspace)
        # Recorded just before an unclean stop, maybe never made durable: send them again.
        forgotten = self.index.forget_unflushed()
        if forgotten:
            log.info(
                "Sync: %d files recorded just before an unclean stop will be sent again",
                len(forgotten),
            )
            self.resend.update(forgotten)
            self.mark_dirty(forgotten)
        self._maintenance_due = True

    def _maintain(self) -> None:
        """Housekeeping owed by the writer (run at the start of a pass, off the lease's thread)."""
        self._maintenance_due = False
        swept = self.backend.sweep_parts(self.settings.workspace, STALE_PART_SECONDS)
        if swept:
            log.info("Sync: removed %d temporary files left by interrupted writes", swept)
        aborted = self.backend.abort_uploads(f"{self.settings.workspace}/")
        if aborted:
            log.info("Sync: aborted %d multipart uploads left by interrupted writes", aborted)

    def prune_versions(self) -> int:
        """Prune the whole store's versions by count and age, and count what they hold."""
        if not self.writable:
            return 0
        with self._pass_lock:
            # Its listing waits on the store as a pass does, holding passes back meanwhile: a
            # store that stops answering under it is watched for, and named, in the same way.
            self.stall_watch.watch()
            return self.kept_versions.prune(None)

    def close(self) -> None:
        self.keeper.stop()
        with self._flush_wanted:
            self._closing = True
            self._flush_wanted.notify_all()
        if self._flusher is not None:
            self._flusher.join()
        try:
            if self.lease.held:
                try:
                    self.flush()
                except SyncError as err:
                    log.warning("Sync: %s", err)
                if self._summary_due:
                    self._write_summary()
            self.lease.release()
        finally:
            self.index.close()
            if self.baseline is not None:
                self.baseline.close()
            self.backend.close()

    @property
    def read_only(self) -> bool:
        return self.read_only_reason is not None

    @property
    def writable(self) -> bool:
        """Whether a pass may write now: the lease is ours and in force."""
        return not self.read_only and self.lease.valid()

    def why_not_writable(self) -> str | None:
        """None when a pass may write now; else why not, in the user's words."""
        if self.read_only:
            return self.read_only_reason
        try:
            self.lease.fence()
        except LeaseHeldError as err:
            return str(err)
        return None

    def write_state(self, name: str, value: Any) -> None:
        """A JSON file under .gpuws/ (a report for the next runtime), fenced like every write."""
        self.lease.fence()
        self.store.write_json(name, value)

    # -- what is pending ---------------------------------------------------------------------

    def mark_dirty(self, paths: Iterable[str]) -> None:
        """Paths (relative, '/'-separated) that may have changed, from the watcher. A folder
        that appeared stands for its files, each counted as pending at once, so the status
        is true before the pass that uploads them begins."""
        with self._dirty_lock:
            self.last_change = time.monotonic()
            for rel in paths:
                self._dirty.add(rel)
                for name in items_of(rel):  # a file, or a link
                    local = stat_path(self.workdir, name, self.rules, self.pending_set.problem)
                    exists = local is not None or present(self.workdir, name)
                    self.pending_set.note(name, local, self.index.get(name), exists)
                if (
                    os.path.isdir(self.abs(rel))
                    and not os.path.islink(self.abs(rel))
                    and not self.rules.ignored(rel, is_dir=True)
                ):
                    for f in scan(self.workdir, self.rules, rel):
                        self.pending_set.note(f.path, f, self.index.get(f.path), True)

    def look(self) -> None:
        """What differs from the record, noted as pending, without writing anything: for an
        engine that cannot write yet (the store unavailable, another runtime's lease), so that
        the status is true before its first pass."""
        changed, deleted, _, _ = self.plan()
        self.pending_set.replace(changed, deleted)

    def pending(self) -> tuple[int, int]:
        """Files and bytes not in the store (what the last look found; vanished paths dropped)."""
        return self.pending_set.totals()

    def take_dirty(self) -> set[str]:
        with self._dirty_lock:
            dirty, self._dirty = self._dirty, set()
            return dirty

    # -- sync --------------------------------------------------------------------------------

    def sync(
        self,
        paths: Iterable[str] | None = None,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
        durable: bool = True,
    ) -> PassReport:
        """One pass. `paths`: just these (from the watcher); None: a full rescan.

        `durable`: return once what the pass wrote is durable in the store; False: once it is
        in the store, whole, with the flush following in the background. A pass already
        running is waited for, and its work counts in this one's progress and report.
        """
        if self.read_only:
            raise LeaseHeldError(self.read_only_reason or "read-only")
        if not self.lease.held:
            raise LeaseHeldError(
                "This runtime does not hold the workspace lease: open the engine first"
            )
        progress = progress or Progress()
        paths = None if paths is None else list(paths)
        running = self.running
        if running is not None:
            running[0].attach(progress)
        with self._pass_lock:
            report = PassReport()
            self.running = (progress, report)
            self.state = "syncing"
            # Asked from the pass's start on, not from the first look at the status: a store
            # that stops answering is named within seconds, however seldom the status is read
            # (the panel's poll is seconds apart).
            self.stall_watch.watch()
            try:
                try:
                    self.lease.fence()
                    self._check_store()
                    if self._maintenance_due:
                        self._maintain()
                    try:
                        self._sync(paths, progress, cancel, durable, report)
                    finally:
                        with self._sent_lock:
                            files, nbytes, there = self._sent
                            self._sent = (
                                files + len(report.uploaded),
                                nbytes + report.bytes_uploaded,
                                there + report.found_in_store,
                            )
                    if self.backend.abandoned_uploads() and not report.stopped:
                        self.backend.abort_uploads(
                            f"{self.settings.workspace}/"
                        )  # cut by an outage
                finally:
                    self.running = None
                    if (
                        self.backend.flushes and self.lease.held
                    ):  # elsewhere a completed write is durable
                        if durable:
                            self.flush()
                        elif self.backend.unflushed() or self.index.unflushed_mark():
                            self._flush_soon()
            except Exception as err:
                if paths:  # not done: the watcher's news must not be lost with this pass
                    with self._dirty_lock:
                        self._dirty.update(paths)
                if isinstance(err, StoreMissingError):
                    self.note_missing(str(err))
                if isinstance(err, SyncError):
                    self.state, self.last_error = (
                        ("read-only" if self.read_only else "error"),
                        str(err),
                    )
                    self.pending_set.held(str(err))
                    raise
                self.state, self.last_error = "error", f"Sync failed: {err}"
                log.exception("Sync pass failed")
                raise SyncError(self.last_error) from err
            if report.errors:
                self.state, self.last_error = "error", report.errors[0]
                self.pending_set.held(report.stopped or report.errors[0])
            else:
                self.state, self.last_error = "idle", None
                self.last_sync = self.clock()
                self.index.record_pass(self.last_sync)  # for `jupyter gpuws status`, later
            self._summary_due = self._summary_due or bool(report.uploaded or report.deleted)
            if self._summary_due and (
                durable or time.monotonic() - self._summary_written >= SUMMARY_EVERY
            ):
                self._write_summary()
            if running is not None:
                report.include(running[1])
            return report

    def _write_summary(self) -> None:
        count, size = self.index.count_and_bytes()
        try:
            self.lease.fence()
            write_summary(self.store, count, size, self.lease.host, os.path.basename(self.workdir))
        except SyncError as err:
            log.debug("Sync: the workspace summary was not written: %s", err)
            return
        self._summary_due = False
        self._summary_written = time.monotonic()

    def _check_store(self) -> None:
        """A store taken to be down is asked once (a read) before a pass tries any file."""
        if self.store_down is None:
            return
        try:
            self.backend.stat(self.store.state_key(LEASE_NAME))  # StoreUnavailableError: still down
        except StoreMissingError as err:
            self.note_missing(str(err))
            raise
        log.info("Sync: the store answers again (%s before)", self.store_down)
        self.store_down = None
        self._maintenance_due = True  # uploads aborted during the outage are cleared
        self._store_back()

    def _reconcile(self) -> tuple[dict[str, RemoteFile] | None, list[str]]:
        """Compare the record with the store (one listing) before trusting it: a path recorded
        as synced that the store lacks, or holds with another size (the store lost it, came back
        older, was emptied, or another runtime wrote meanwhile), is forgotten, so that it is
        compared and sent again. Returns the listing (None when there was no record to check)
        for the pass to use, and the paths forgotten."""
        if not self.index.count_and_bytes()[0]:
            self._reconcile_due = False
            return None, []
        listing = self.store.list_files()
        records = self.index.all()
        lost = [
            rel
            for rel, record in records.items()
            if (stored := listing.get(rel)) is None or stored.size != record.size
        ]
        if lost:
            log.warning(
                "Sync: the store lacks %s this machine had recorded as synced (%s): they are sent again",
                files_text(len(lost)),
                ", ".join(sorted(lost)[:3]) + (" …" if len(lost) > 3 else ""),
            )
            self.index.delete_many(lost)
            self.mark_dirty(lost)
        self._reconcile_due = False
        return listing, lost

    def _sync(
        self,
        paths: Iterable[str] | None,
        progress: Progress,
        cancel: threading.Event | None,
        flush_soon: bool,
        report: PassReport,
    ) -> None:
        listing = None
        if self._reconcile_due:
            listing, lost = self._reconcile()
            if lost:
                paths = None  # the record was wrong: look at everything once
        changed, deleted, report.unchanged, total_records = self.plan(paths)
        if paths is None:
            self.pending_set.replace(changed, deleted)
        else:
            self.pending_set.include(changed, deleted)
        changed = self.pending_set.without_known_problems(changed)
        known = self.index.get_many([f.path for f in changed])  # each record looked up once
        self.planner.guard_deletions(deleted, total_records, self.settings.max_delete_fraction)
        quota = self.settings.quota_bytes
        changed, self.quota_warning = self.planner.apply_limits(
            changed,
            report,
            self.settings.max_file_size,
            quota,
            0 if quota is None else self.store_usage(),
        )
        if not flush_soon:  # a pass nobody waits for: what is still being written waits to settle
            changed = self.planner.hold_unsettled(changed, report, self.settling)
        # Only a file the store had before can gain a version in this pass.
        overwritten = {path for path, record in known.items() if record is not None}
        progress.plan(len(changed) + len(deleted), sum(f.size for f in changed), "uploading")
        if listing is None and needs_listing(changed, known):
            listing = self.store.list_files()
        transfer = PassTransfer(self, progress, cancel, report, flush_soon)
        for rel in in_the_way(deleted, changed):
            # A file replaced by a folder of its name (or a folder by a file): the old one goes
            # first, into versions, or the new one could not be written where it stands.
            transfer.delete_one(rel)
            progress.file_done(rel)
        records_done = transfer.upload_all(changed, known, listing)
        if flush_soon and self.backend.flushes:
            # A pass that waits for the disk records its files once they are durable: the record
            # never claims a file a power cut could take, and needs no unflushed list to undo.
            self.flush(records_done)
        else:
            # Listed as not yet durable whether or not a flush has started on them meanwhile:
            # only a flush that begins after this records them as durable.
            self.index.put_many(records_done, unflushed=self.backend.flushes)
        self.pending_set.done_many(record.path for record in records_done)
        if cancel is not None and cancel.is_set():
            raise CancelledError(f"Cancelled after {len(records_done)} of {len(changed)} files")
        if report.stopped:
            return  # deletions wait for a store that answers and a lease in force

        gone_first = set(report.deleted)
        transfer.delete_all([rel for rel in deleted if rel not in gone_first])
        self.index.delete_many([rel for rel in deleted if rel in report.deleted])
        self.pending_set.done_many(report.deleted)
        self.kept_versions.prune(overwritten | set(report.deleted))
        progress.set_phase("done")

    def flush(self, written: list[Record] | None = None) -> None:
        """Make everything written to the store durable, and the records say so; `written`: the
        records of files written but not recorded yet, recorded once they are durable. If the
        store fails to flush, the records since the last flush are dropped (those of `written`
        never made) and the files become pending."""
        upto = self.index.unflushed_mark()
        try:
            self.backend.flush()
        except SyncError as err:
            lost = self.index.forget_unflushed(upto) + [r.path for r in written or []]
            self.resend.update(lost)
            self.mark_dirty(lost)
            raise type(err)(
                f"{err}: the last writes may not be durable, so {files_text(len(lost))} will be "
                "sent again"
            ) from err
        if written:
            self.index.put_many(written)
        if upto:
            self.index.clear_unflushed(upto)

    def _flush_soon(self) -> None:
        with self._flush_wanted:
            if self._closing:
                return
            self._flush_requested = True
            if self._flusher is None:
                self._flusher = threading.Thread(
                    target=self._flush_loop, name="gpuws-flush", daemon=True
                )
                self._flusher.start()
            self._flush_wanted.notify()

    def _flush_loop(self) -> None:
        while True:
            with self._flush_wanted:
                while not self._flush_requested and not self._closing:
                    self._flush_wanted.wait()
                if self._closing:
                    return  # close() flushes what is left
                self._flush_requested = False
            try:
                self.flush()
            except SyncError as err:
                self.state, self.last_error = "error", str(err)
                self.pending_set.held(str(err))
                log.warning("Sync: %s", err)
            except Exception as err:  # noqa: BLE001 - the thread must live on to flush later
                self.state, self.last_error = "error", f"the flush failed: {err}"
                log.exception("Sync: the flush failed")

    def plan(
        self, paths: Iterable[str] | None = None
    ) -> tuple[list[LocalFile], list[str], int, int]:
        """What a pass would do: (files to upload, paths to delete, unchanged count, records)."""
        return self.planner.plan(paths)

    def sent_so_far(self) -> tuple[int, int, int]:
        """Files and bytes this engine's passes put in the store so far, and files they found
        there already (the store had the same bytes): a persist counts what came since it
        began, the background passes' work included."""
        with self._sent_lock:
            return self._sent

    def store_usage(self) -> int:
        """What this workspace takes in the store: the mirror and its previous versions."""
        return self.index.count_and_bytes()[1] + (self.kept_versions.bytes or 0)

    @property
    def restore_running(self) -> bool:
        """Whether a restore is under way (its requests wait on the store too)."""
        return self.restore_lock.locked()

    @property
    def store_busy(self) -> bool:
        """Whether work that waits on the store is under way: a pass, the versions' pruning
        (which holds passes back), a restore, a look at the lease (an idle runtime's renewal)."""
        return (
            self._pass_lock.locked() or self.restore_running or self.keeper.asking_since is not None
        )

    def note_partial(self, rel: str, partial: bool) -> None:
        """Whether the copy just sent may be partial (sent while the file was still being
        written, by a persist or after waiting too long): the record keeps it across restarts."""
        if partial:
            self.settling.sent_partial(rel)
        if partial == (rel in self.partial):
            return
        if partial:
            self.partial.add(rel)
        else:
            self.partial.discard(rel)
            self.settling.done(rel)
        self.index.set_partial(rel, partial)

    # -- restore -----------------------------------------------------------------------------

    def restore(
        self,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
        leave: Collection[str] = (),
    ) -> RestoreReport:
        """Bring back what the work directory lacks, most needed first (sync/restore.py); where
        both sides have a file and they differ, keep both. The paths in `leave` are not brought
        (another restore brings them: a job's own newer copies, userjobs/elsewhere.py).

        It does not hold the pass lock, so the watcher's passes and Persist now go on meanwhile.
        That is safe because a restore only adds files, each linked into place whole and never
        over a file that is there, and records each one soon after it lands: a pass that sees a
        restored file before its record sends the same bytes back at worst (with no record,
        the store's copy is not kept as a version, and nothing is lost); a pass that carries a
        local deletion to the store meanwhile makes the restore find that file gone (skipped,
        not an error); a file the user writes meanwhile stays, and the store's copy lands
        beside it. Two restores never run at once.
        """
        progress = progress or Progress()
        with self.restore_lock:  # one restore at a time; the Git tier waits for it too
            self.stall_watch.watch()  # from its start, as a pass's
            check_workdir(self.workdir)
            self.restoring.begin()
            try:
                remote = self.store.list_files()
                for rel in leave:
                    remote.pop(rel, None)
                # A Python environment in the store is never brought (restore.environments);
                # nor is a link where compiled Python would be (it would be loaded as such).
                roots = environments(remote)
                unwanted = {
                    rel: ENVIRONMENT_LEFT_OUT if in_environment(rel, roots) else BYTECODE_LEFT_OUT
                    for rel in remote
                    if in_environment(rel, roots)
                    or (is_link_item(rel) and is_bytecode(entry_of(rel)))
                }
                for rel in unwanted:
                    del remote[rel]
                links = {rel: remote.pop(rel) for rel in list(remote) if is_link_item(rel)}
                newest = newest_checkpoints(remote)
                self.restoring.plan(newest)
                report = self._restore_job(progress, cancel, self.restoring).run(
                    remote, restore_phases(remote, newest), newest
                )
                # Links last: no file of this restore is written through one it made.
                made = LinkRestore(self.workdir, self.backend, self.index, self.clock)
                if links and not (cancel is not None and cancel.is_set()):
                    made.run(links)
                    report.restored += made.restored
                    report.already_present += made.present
                    report.errors += made.errors
            finally:
                self.restoring.end()
        # Compiled Python in the store is never brought (ignore.is_bytecode): named, with the
        # links and special files of the store, in the status, until the next restore; so are
        # the store's links that cannot be made here (links.py).
        self.left_out = {rel: BYTECODE_LEFT_OUT for rel in sorted(report.bytecode)}
        self.left_out.update(made.left_out)
        self.left_out.update(unwanted)
        if unwanted:
            log.warning(
                "Restore: %d file(s) of the store not brought: %s",
                len(unwanted),
                "; ".join(f"{shown(rel)} ({why})" for rel, why in sorted(unwanted.items())[:5]),
            )
        if report.bytecode:
            log.warning(
                "Restore: %d compiled Python file(s) in the store not brought (%s): %s",
                len(report.bytecode),
                BYTECODE_LEFT_OUT,
                ", ".join(shown(rel) for rel in sorted(report.bytecode)[:5]),
            )
        if cancel is not None and cancel.is_set():
            raise CancelledError(f"Restore cancelled after {len(report.restored)} files")
        return report

    def fetch_checkpoint(
        self,
        run: str,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
        timeout: float | None = None,
    ) -> str | None:
        """The newest complete checkpoint of `run` (a run folder relative to the work directory,
        e.g. `.gpuws/checkpoints/train.ipynb`), complete here: its folder, relative to the work
        directory; None when the store has no complete checkpoint of that run.

        While a restore runs, it first waits until that restore has brought the run's newest
        checkpoint (it brings them first) or has ended. Then it lists the store's run folder,
        and if the newest complete checkpoint there is not complete here (a file missing or of
        another size), fetches what is missing, the manifest last, never over a different local
        file (the store's copy lands beside it). Neither the lease nor the pass lock is needed:
        passes go on meanwhile. StoreUnavailableError: the store cannot be read; SyncError: the
        timeout passed, or the checkpoint could not be made complete here.
        """
        run = self._run_folder(run)
        deadline = None if timeout is None else time.monotonic() + timeout

        def timed_out() -> SyncError:
            return SyncError(
                f"Timed out after {timeout:g} s while bringing the newest checkpoint of {run} "
                "from the store"
            )

        if not self.restoring.wait_for(run, deadline, cancel):
            raise timed_out()
        files = self.store.list_files(run)
        newest = newest_checkpoints(files).get(run)
        if newest is None:
            return None
        missing = {
            rel: f
            for rel, f in files.items()
            if rel.startswith(newest + "/")
            and not is_link_item(rel)
            and not self._same_size_here(rel, f)
        }
        if not missing:
            return newest
        stop = _Stop(cancel, deadline)
        job = self._restore_job(progress or Progress(), stop, None)
        report = job.run(missing, restore_phases(missing, {run: newest}), {})
        if not report.errors and all(self._same_size_here(rel, f) for rel, f in missing.items()):
            return newest  # complete here (even if the deadline passed just after)
        if cancel is not None and cancel.is_set():
            raise CancelledError(f"Cancelled while fetching {newest}")
        if stop.is_set():
            raise timed_out()
        why = report.errors[0] if report.errors else "some of its files did not arrive"
        raise SyncError(f"Could not bring {newest} from the store: {why}")

    def _restore_job(
        self, progress: Progress, cancel: Any, state: RestoreState | None
    ) -> RestoreJob:
        return RestoreJob(
            self.workdir,
            self.backend,
            self.index,
            concurrency=self.settings.concurrency,
            retries=self.settings.retries,
            retry_backoff=self.settings.retry_backoff,
            clock=self.clock,
            progress=progress,
            cancel=cancel,
            limiter=self.limiter,
            state=state,
        )

    def _run_folder(self, run: str) -> str:
        rel = run.strip().strip("/")
        name = rel[len(CHECKPOINTS_PREFIX) :] if rel.startswith(CHECKPOINTS_PREFIX) else ""
        if not name or "/" in name or name in (".", ".."):
            raise SyncError(f"{run!r} is not a run folder: expected {CHECKPOINTS_PREFIX}<run name>")
        return rel

    def _same_size_here(self, rel: str, remote: RemoteFile) -> bool:
        try:
            st = os.lstat(self.abs(rel))
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode) and st.st_size == remote.size

    # -- versions ----------------------------------------------------------------------------

    def versions(self, rel: str) -> list[dict[str, Any]]:
        return [
            {"path": p, "version": stamp, "size": f.size}
            for p, stamp, f in self.store.list_versions(rel)
        ]

    def restore_version(self, rel: str, version: str, target: str | None = None) -> str:
        """Write a kept version to `target` (default: beside the file, never over it)."""
        base, ext = os.path.splitext(rel)
        target = target or f"{base}.version-{version.split('.')[0]}{ext}"
        dest = self.abs(target)
        if os.path.lexists(dest):
            raise SyncError(f"{target} exists already; choose another name")
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        tmp = dest + PART_SUFFIX
        self.backend.get(self.store.version_key(rel, version), tmp)
        plain_data(tmp)
        os.rename(tmp, dest)
        return target

    # -- status ------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return engine_status(self)

    def same_disk(self) -> bool:
        """Whether the store is on the work directory's own disk (looked at once)."""
        if self._same_disk is None:
            self._same_disk = on_same_disk(self.backend, self.workdir)
        return self._same_disk

    def stored_summary(self) -> dict[str, Any]:
        """What is now in the store, as a persist ends (status.stored_summary)."""
        return stored_summary(self.workdir, self.index, self.kept_versions.bytes)

    def pending_list(self, limit: int = 200) -> dict[str, Any]:
        """The pending files with why (waiting, uploading, failing with the error) and the
        files that cannot be synced, for the panel's expandable list."""
        return self.pending_set.listing(limit)

    # -- helpers -----------------------------------------------------------------------------

    def abs(self, rel: str) -> str:
        return local_path(self.workdir, rel)


class _Stop:
    """Set once the caller cancels or the deadline (time.monotonic) passes: what a restore job
    checks to stop."""

    def __init__(self, cancel: threading.Event | None, deadline: float | None) -> None:
        self.cancel = cancel
        self.deadline = deadline

    def is_set(self) -> bool:
        return bool(
            (self.cancel is not None and self.cancel.is_set())
            or (self.deadline is not None and time.monotonic() > self.deadline)
        )


def plain_data(path: str) -> None:
    """Whatever the store or its backend says, what comes from it is never executable: a hook
    under `.git/hooks/` (or any script) needs the user's own chmod to run. Read and write bits
    stay as the file was created (the umask's)."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    os.chmod(path, mode & 0o666)


__all__ = [
    "PassReport",
    "Progress",
    "RestoreReport",
    "SyncEngine",
    "SyncSettings",
    "StoreConfigError",
    "StoreFullError",
    "QuotaExceededError",
]


def in_the_way(deleted: list[str], changed: list[LocalFile]) -> list[str]:
    """The deletions whose path a changed file needs: a file that became a folder of the same
    name (`a` deleted, `a/x` new), or a folder that became a file (`a/x` deleted, `a` new)."""
    paths = {f.path for f in changed}
    parents = {rel.rsplit("/", i)[0] for rel in paths for i in range(1, rel.count("/") + 1)}
    return [
        rel
        for rel in deleted
        if rel in parents
        or any(rel.rsplit("/", i)[0] in paths for i in range(1, rel.count("/") + 1))
    ]
