"""The sync engine: mirrors the work directory to the store, lossless and atomic.

A pass plans from the local record (no walk or listing when the changed paths are known),
uploads in parallel and records what reached the store. Where the store's writes are not durable
at once (a local folder), the records say so until a flush has made them durable: at the end of
the pass (Persist now, the command line, a release) or just after it in the background (the
watcher's passes). An unclean stop before that flush makes the next start send those files
again. A reader of the store sees whole files only, either way.

Nothing is overwritten or deleted without a version (versions.py), also where this runtime has
no record of a path (a new machine, a lost record): the store's copy is compared first. Only the
lease holder writes, and every write is fenced (lease.py). A file that cannot be read here is a
problem of its own (pending.py), never the store's fault; a store that stops answering stops the
pass at once (not one timeout per file) and is asked again until it answers. Restore brings back
what the work directory lacks and never overwrites or deletes local work.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..store.backend import PART_SUFFIX, Backend, RemoteFile, SourceChangedError
from .errors import (
    CancelledError,
    DeletionGuardError,
    LeaseCorruptError,
    LeaseHeldError,
    LocalDiskFullError,
    LocalFileError,
    QuotaExceededError,
    StoreConfigError,
    StoreFullError,
    StoreMissingError,
    StoreUnavailableError,
    SyncError,
    WorkdirError,
)
from ..store.hashing import file_hash
from .ignore import IGNORE_FILE, IgnoreRules
from .index import Record, SyncIndex
from ..store.lease import LEASE_NAME, Lease, LeaseKeeper, lease_status
from .pending import PendingSet
from ..store.presence import check_store, keep_apart, make_anew
from .progress import Progress, RateLimiter
from .settle import Settling
from .scan import LocalFile, scan, stat_path
from ..checkpoints.files import MANIFEST, folder_order
from .restore import (
    CHECKPOINTS_PREFIX,
    RestoreJob,
    RestoreReport,
    RestoreState,
    newest_checkpoints,
    restore_phases,
)
from ..defaults import is_embedded_store
from ..store.crypto import Encryption, protect
from ..store import Store, open_backend
from ..store.versions import Versions
from ..store.workspaces import write_summary

log = logging.getLogger(__name__)

# Below this many deletions the share guard does not apply (deleting 2 of 3 files is normal).
GUARD_MIN_DELETIONS = 10
# Temporary files of interrupted writes older than this are removed when the lease is taken.
STALE_PART_SECONDS = 3600.0
# In an emergency pass, files under this size (outside checkpoints) go first.
URGENT_SMALL = 1 << 20
# The speed an emergency pass counts on before it has measured one (bytes/s): a local folder,
# and a store across a network. A larger file than fits in the time left is not started.
URGENT_GUESS_LOCAL = 200 * 2**20
URGENT_GUESS_REMOTE = 20 * 2**20
# From this many unrecorded files in a pass, one listing of the store answers "is it there
# already?" instead of a request per file.
LIST_INSTEAD_OF_STAT = 32
# The status names at most this many entries of the store that are skipped (and counts them all).
SHOWN_SKIPPED = 100
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


@dataclass
class PassReport:
    uploaded: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0
    bytes_uploaded: int = 0
    errors: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # too large, ignored
    problems: list[str] = field(default_factory=list)  # "path: reason", files that cannot be synced
    stopped: str | None = None  # why the pass stopped before trying every file
    # Files still being written, held back (path → seconds until they may settle).
    settling: dict[str, float] = field(default_factory=dict)
    # "path: why" of files an emergency persist did not start: they could not end in its time.
    left_behind: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def include(self, other: PassReport) -> None:
        """Count what an earlier pass (one a Persist now waited for) put in the store."""
        self.uploaded = list(dict.fromkeys(other.uploaded + self.uploaded))
        self.deleted = list(dict.fromkeys(other.deleted + self.deleted))
        self.bytes_uploaded += other.bytes_uploaded


def index_path(state_dir: str, settings_workdir: str, backend: Backend, workspace: str) -> str:
    # surrogateescape: a folder whose own name is not UTF-8 (the same hash for any other)
    key = hashlib.sha1(f"{os.path.abspath(settings_workdir)}\0{backend.description}\0{workspace}"
                       .encode("utf-8", "surrogateescape"))
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in workspace)
    return os.path.join(state_dir, f"{safe}-{key.hexdigest()[:12]}.sqlite3")


class SyncEngine:
    def __init__(self, settings: SyncSettings, backend: Backend | None = None,
                 clock: Callable[[], float] = time.time, restore_lock: threading.Lock | None = None) -> None:
        self.settings = settings
        self.workdir = os.path.abspath(os.path.expanduser(settings.workdir))
        self.clock = clock
        check_workdir(self.workdir)
        backend = backend or open_backend(settings.store_url, settings.storage_options,
                                          settings.durable, settings.concurrency)
        if settings.encryption is not None and settings.encryption.scratch is None:
            # The encrypted copy of a file being sent goes beside the engine's own state, on a
            # disk (a temporary folder may be memory, too small for a checkpoint).
            settings.encryption.scratch = settings.state_dir
        # The store and the work directory apart; this engine's own folders out of the mirror.
        own = keep_apart(backend, self.workdir, settings.state_dir, is_embedded_store(settings.store_url))
        # The record first (its name is the store's, encrypted or not): whether this machine
        # synced the workspace before decides whether a missing store is gone or is to begin.
        self.index = SyncIndex(index_path(settings.state_dir, self.workdir, backend, settings.workspace))
        if self.index.rebuilt:
            log.warning("Sync: %s", self.index.rebuilt)
        missing = None
        try:
            check_store(backend, settings.workspace, self.index.count_and_bytes()[0],
                        self.index.last_pass() is not None, settings.create_store)
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
            log.warning("Sync: could not check whether the workspace is encrypted (the store is not answering)")
            self.backend = backend
        self.store = Store(self.backend, settings.workspace)
        self.rules = IgnoreRules(self.workdir, settings.excludes + own)
        self.lease = Lease(self.store, settings.lease_ttl, clock, host=settings.host)
        self.keeper = LeaseKeeper(self.lease, self._lease_changed, self._store_back)
        self.kept_versions = Versions(self.store, settings.keep_versions, settings.version_max_age, clock,
                                      self.lease.fence, min_interval=settings.settle_interval)
        self.pending_set = PendingSet(self.workdir, self.index.get)
        self.settling = Settling(settings.settle_interval)
        # Paths whose copy in the store was sent while still being written: never kept as a version.
        self._partial = set(self.index.partial_paths())
        self.limiter = RateLimiter(settings.bandwidth_limit) if settings.bandwidth_limit else None
        self.read_only_reason: str | None = None
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
        self._failing_since: float | None = None  # monotonic: the first failure since a success
        # Paths whose last write here may not be durable (a failed flush, an unclean stop before
        # one): sent again as they are, without comparing (after a failed fsync the page cache can
        # hold bytes the disk lost) and without a version of our own undurable copy.
        self._resend: set[str] = set()
        # Told when this runtime becomes the writer (a take-over): the service restores and rescans.
        self.on_writable: Callable[[], None] | None = None
        self._pass_lock = threading.Lock()
        self._running: tuple[Progress, PassReport] | None = None  # the pass in progress
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
            self.read_only_reason = self.store_missing  # the lease's thread takes it once the store is back
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

    def take_over(self) -> None:
        """The user's Take over: the lease becomes ours even from a live holder (writes wait
        until it has stopped), replaces an unreadable lease, or, where the store's folder or
        this workspace went missing, starts them anew there from this machine's files."""
        if self.store_missing is not None or isinstance(self.keeper.cause, StoreMissingError):
            make_anew(self.backend, self.settings.workspace)
            log.warning("Sync: the store %s/%s is made anew, at the user's word", self.backend.description,
                        self.settings.workspace)
        self.lease.acquire(take_over=True)
        self._lease_changed(True, None)

    def _missing(self, why: str) -> None:
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
        self._reconcile_due = True  # another runtime may have written, or the store may have lost files
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
            log.info("Sync: %d files recorded just before an unclean stop will be sent again", len(forgotten))
            self._resend.update(forgotten)
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
                local = stat_path(self.workdir, rel, self.rules)
                exists = local is not None or os.path.lexists(self._abs(rel))
                self.pending_set.note(rel, local, self.index.get(rel), exists)
                if local is None and exists and os.path.isdir(self._abs(rel)) and not os.path.islink(self._abs(rel)) \
                        and not self.rules.ignored(rel, is_dir=True):
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

    def sync(self, paths: Iterable[str] | None = None, progress: Progress | None = None,
             cancel: threading.Event | None = None, durable: bool = True) -> PassReport:
        """One pass. `paths`: just these (from the watcher); None: a full rescan.

        `durable`: return once what the pass wrote is durable in the store; False: once it is
        in the store, whole, with the flush following in the background. A pass already
        running is waited for, and its work counts in this one's progress and report.
        """
        if self.read_only:
            raise LeaseHeldError(self.read_only_reason or "read-only")
        if not self.lease.held:
            raise LeaseHeldError("This runtime does not hold the workspace lease: open the engine first")
        progress = progress or Progress()
        paths = None if paths is None else list(paths)
        running = self._running
        if running is not None:
            running[0].attach(progress)
        with self._pass_lock:
            report = PassReport()
            self._running = (progress, report)
            self.state = "syncing"
            try:
                try:
                    self.lease.fence()
                    self._check_store()
                    if self._maintenance_due:
                        self._maintain()
                    self._sync(paths, progress, cancel, durable, report)
                    if self.backend.abandoned_uploads() and not report.stopped:
                        self.backend.abort_uploads(f"{self.settings.workspace}/")  # cut by an outage
                finally:
                    self._running = None
                    if self.backend.flushes and self.lease.held:  # elsewhere a completed write is durable
                        if durable:
                            self.flush()
                        elif self.backend.unflushed() or self.index.unflushed_mark():
                            self._flush_soon()
            except Exception as err:
                if paths:  # not done: the watcher's news must not be lost with this pass
                    with self._dirty_lock:
                        self._dirty.update(paths)
                if isinstance(err, StoreMissingError):
                    self._missing(str(err))
                if isinstance(err, SyncError):
                    self.state, self.last_error = ("read-only" if self.read_only else "error"), str(err)
                    raise
                self.state, self.last_error = "error", f"Sync failed: {err}"
                log.exception("Sync pass failed")
                raise SyncError(self.last_error) from err
            if report.errors:
                self.state, self.last_error = "error", report.errors[0]
            else:
                self.state, self.last_error = "idle", None
                self.last_sync = self.clock()
                self.index.record_pass(self.last_sync)  # for `jupyter gpuws status`, later
            self._summary_due = self._summary_due or bool(report.uploaded or report.deleted)
            if self._summary_due and (durable or time.monotonic() - self._summary_written >= SUMMARY_EVERY):
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
            self._missing(str(err))
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
        lost = [rel for rel, record in records.items()
                if (stored := listing.get(rel)) is None or stored.size != record.size]
        if lost:
            log.warning("Sync: the store lacks %s this machine had recorded as synced (%s): they are sent again",
                        _files(len(lost)), ", ".join(sorted(lost)[:3]) + (" …" if len(lost) > 3 else ""))
            self.index.delete_many(lost)
            self.mark_dirty(lost)
        self._reconcile_due = False
        return listing, lost

    def _sync(self, paths: Iterable[str] | None, progress: Progress, cancel: threading.Event | None,
              flush_soon: bool, report: PassReport) -> None:
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
        changed = [f for f in changed if not self.pending_set.known_problem(f)]
        known = {f.path: self.index.get(f.path) for f in changed}  # each record looked up once
        # Checkpoints that their run's retention replaced are no sign of a vanished work directory.
        guarded = [rel for rel in deleted if not self._retired_checkpoint(rel)] if deleted else []
        if len(guarded) >= GUARD_MIN_DELETIONS and len(guarded) > self.settings.max_delete_fraction * total_records:
            raise DeletionGuardError(
                f"This pass would remove {len(guarded)} of the {total_records} files in the store "
                f"(more than {self.settings.max_delete_fraction:.0%}): stopped, nothing was deleted. "
                "Check the work directory and .gpuwsignore; previous versions stay in the store."
            )

        changed = self._apply_limits(changed, report)
        if not flush_soon:  # a pass nobody waits for: what is still being written waits to settle
            changed = self._hold_unsettled(changed, report)
        # Only a file the store had before can gain a version in this pass.
        overwritten = {path for path, record in known.items() if record is not None}
        progress.plan(len(changed) + len(deleted), sum(f.size for f in changed), "uploading")
        in_store = listing if listing is not None else self._store_listing(changed, known)
        records_done = self._upload_all(changed, known, in_store, progress, cancel, report, flush_soon)
        # Listed as not yet durable whether or not a flush has started on them meanwhile: only
        # a flush that begins after this records them as durable.
        self.index.put_many(records_done, unflushed=self.backend.flushes)
        for record in records_done:
            self.pending_set.done(record.path)
        if cancel is not None and cancel.is_set():
            raise CancelledError(f"Cancelled after {len(records_done)} of {len(changed)} files")
        if report.stopped:
            return  # deletions wait for a store that answers and a lease in force

        progress.set_phase("deleting")
        for rel in deleted:
            self._delete_in_store(rel, report)
            progress.file_done(rel)
        self.index.delete_many([rel for rel in deleted if rel in report.deleted])
        for rel in report.deleted:
            self.pending_set.done(rel)
        self.kept_versions.prune(overwritten | set(report.deleted))
        progress.set_phase("done")

    def _hold_unsettled(self, changed: list[LocalFile], report: PassReport) -> list[LocalFile]:
        """The files that may go now; those still being written wait (pending, saying so)."""
        ready = []
        for f in changed:
            wait = self.settling.wait(f)
            if wait > 0:
                report.settling[f.path] = wait
                self.pending_set.writing(f.path, f.size, self.settling.interval)
            else:
                ready.append(f)
        return ready

    def _store_listing(self, changed: list[LocalFile], known: dict[str, Record | None]) -> dict[str, RemoteFile] | None:
        """For a pass with many files this runtime has no record of (a new machine, a lost
        record), what the store holds, from one listing; None: ask per file."""
        unknown = sum(1 for f in changed if known.get(f.path) is None)
        if unknown < LIST_INSTEAD_OF_STAT:
            return None
        return self.store.list_files()

    def flush(self) -> None:
        """Make everything written to the store durable, and the records say so. If the store
        fails to, the records since the last flush are dropped and the files become pending."""
        upto = self.index.unflushed_mark()
        try:
            self.backend.flush()
        except SyncError as err:
            lost = self.index.forget_unflushed(upto)
            self._resend.update(lost)
            self.mark_dirty(lost)
            raise type(err)(f"{err}: the last writes may not be durable, so {_files(len(lost))} will be "
                            "sent again") from err
        if upto:
            self.index.clear_unflushed(upto)

    def _flush_soon(self) -> None:
        with self._flush_wanted:
            if self._closing:
                return
            self._flush_requested = True
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_loop, name="gpuws-flush", daemon=True)
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
                log.warning("Sync: %s", err)

    def plan(self, paths: Iterable[str] | None = None) -> tuple[list[LocalFile], list[str], int, int]:
        """What a pass would do: (files to upload, paths to delete, unchanged count, records).

        Refuses an emptied work directory outright: that is a vanished mount, not a cleanup.
        """
        check_workdir(self.workdir)
        self.rules.reload()
        changed: list[LocalFile] = []
        deleted: list[str] = []
        unchanged = 0
        if paths is None:
            unreadable: dict[str, str] = {}
            local = {f.path: f for f in scan(self.workdir, self.rules, problems=unreadable.__setitem__)}
            for folder, reason in unreadable.items():
                self.pending_set.problem(folder, reason)
            records = self.index.all()
            for f in local.values():
                if _same(f, records.get(f.path)):
                    unchanged += 1
                else:
                    changed.append(f)
            deleted = [p for p in records if p not in local and not os.path.lexists(self._abs(p))]
            total_records = len(records)
            if records and not local:
                if _has_files(self.workdir):
                    raise DeletionGuardError(
                        f"Nothing in the work directory is mirrored any more (every file is excluded by "
                        f"{IGNORE_FILE} or the defaults), but the store mirrors {len(records)} files: nothing "
                        f"was deleted. Check {IGNORE_FILE}."
                    )
                raise DeletionGuardError(
                    f"The work directory {self.workdir} is empty but the store mirrors {len(records)} "
                    "files: nothing was deleted. Restore it, or delete the files from the store by hand."
                )
        else:
            total_records = self.index.count_and_bytes()[0]
            for rel in sorted(self._expand(paths)):
                f = stat_path(self.workdir, rel, self.rules)
                record = self.index.get(rel)
                if f is not None:
                    if _same(f, record):
                        unchanged += 1
                    else:
                        changed.append(f)
                elif record is not None and not os.path.lexists(self._abs(rel)):
                    deleted.append(rel)
        return changed, deleted, unchanged, total_records

    def _expand(self, paths: Iterable[str]) -> set[str]:
        """A folder event stands for every file in it: created or moved in (scan it), or
        deleted or moved away (the recorded files under it)."""
        out: set[str] = set()
        for rel in paths:
            rel = rel.strip("/")
            if not rel:
                continue
            path = self._abs(rel)
            if os.path.isdir(path) and not os.path.islink(path):
                if not self.rules.ignored(rel, is_dir=True):
                    out.update(f.path for f in scan(self.workdir, self.rules, rel))
                out.update(p for p in self.index.paths_under(rel) if not os.path.lexists(self._abs(p)))
            else:
                out.add(rel)
                if not os.path.lexists(path):
                    out.update(self.index.paths_under(rel))
        return out

    def _apply_limits(self, changed: list[LocalFile], report: PassReport) -> list[LocalFile]:
        """Leave out files over max_file_size; refuse what would exceed the quota."""
        keep = []
        limit = self.settings.max_file_size
        for f in changed:
            if limit is not None and f.size > limit:
                reason = f"larger than max_file_size ({_size(f.size)} > {_size(limit)}): not synced"
                report.skipped.append(f.path)
                report.problems.append(f"{f.path}: {reason}")
                self.pending_set.problem(f.path, reason, f)
                continue
            keep.append(f)
        quota = self.settings.quota_bytes
        if quota is None:
            return keep
        used = self.store_usage()
        allowed = []
        for f in sorted(keep, key=lambda item: item.size):
            record = self.index.get(f.path)
            after = used - (record.size if record else 0) + f.size
            if after > quota:
                error = (f"Quota exceeded: {f.path} ({_size(f.size)}) would take the store to {_size(after)} "
                         f"of its {_size(quota)} quota (previous versions included). The file stays here, pending.")
                report.errors.append(error)
                self.pending_set.failing(f.path, f.size, error)
                continue
            used = after
            allowed.append(f)
        self.quota_warning = (
            f"The store is {used / quota:.0%} full ({_size(used)} of {_size(quota)}, previous versions included)"
            if used >= 0.9 * quota else None
        )
        return allowed

    def store_usage(self) -> int:
        """What this workspace takes in the store: the mirror and its previous versions."""
        return self.index.count_and_bytes()[1] + (self.kept_versions.bytes or 0)

    def _upload_all(self, files: list[LocalFile], known: dict[str, Record | None],
                    in_store: dict[str, RemoteFile] | None, progress: Progress,
                    cancel: threading.Event | None, report: PassReport, flush_soon: bool) -> list[Record]:
        """Upload in parallel. A checkpoint folder's manifest goes only once the folder's other
        files are in the store (a reader elsewhere never finds a manifest without its data); a
        full store, a store that stopped answering or a lease no longer in force stop the pass
        at once instead of failing file after file."""
        if not files:
            return []
        done: list[Record] = []
        lock = threading.Lock()
        stop = threading.Event()
        failed_folders: set[str] = set()
        tried: set[str] = set()

        def run(batch: list[LocalFile]) -> None:
            for f in batch:
                if (cancel is not None and cancel.is_set()) or stop.is_set():
                    return
                if f.path.endswith("/" + MANIFEST) and f.path.rpartition("/")[0] in failed_folders:
                    continue  # its data did not all reach the store: no manifest without it
                with lock:
                    tried.add(f.path)
                left = self._left_behind(f, progress)
                if left is not None:
                    self.pending_set.failing(f.path, f.size, left)
                    with lock:
                        report.left_behind.append(f"{f.path}: {left}")
                        failed_folders.add(f.path.rpartition("/")[0])  # no manifest without its data
                    continue
                self.pending_set.uploading(f.path, self._holes_note(f))
                try:
                    record, sent = self._upload_one(f, known.get(f.path), in_store, progress, flush_soon)
                except LocalFileError as err:
                    self.pending_set.problem(f.path, str(err), f)
                    with lock:
                        report.problems.append(f"{f.path}: {err}")
                    continue
                except FileNotFoundError:
                    self.pending_set.done(f.path)
                    continue  # deleted meanwhile: the next pass carries the deletion
                except SyncError as err:
                    if isinstance(err, CancelledError) and self.urgent_until is not None:
                        self.pending_set.failing(f.path, f.size, str(err))  # nothing of it became visible
                        with lock:
                            report.left_behind.append(f"{f.path}: {err}")
                            failed_folders.add(f.path.rpartition("/")[0])
                        continue
                    self.pending_set.failing(f.path, f.size, str(err))
                    with lock:
                        report.errors.append(str(err))
                        failed_folders.add(f.path.rpartition("/")[0])
                    if (isinstance(err, (StoreFullError, LocalDiskFullError, LeaseHeldError))
                            or self.store_down is not None):
                        with lock:
                            report.stopped = report.stopped or str(err)
                        stop.set()
                        return
                    continue
                with lock:
                    done.append(record)
                    if sent:
                        report.uploaded.append(f.path)
                        report.bytes_uploaded += record.size
                    else:
                        report.unchanged += 1  # the store had these bytes already
                progress.file_done(f.path)

        ordered = sorted(files, key=_urgent_order(files) if self.urgent else _normal_order)
        is_manifest = [_checkpoint_manifest(f.path) for f in ordered]
        phases = [
            [f for f, m in zip(ordered, is_manifest) if not m and f.path.startswith(CHECKPOINTS_PREFIX)],
            [f for f, m in zip(ordered, is_manifest) if m],
            [f for f in ordered if not f.path.startswith(CHECKPOINTS_PREFIX)],
        ]
        if self.urgent:  # small files first, then the checkpoints (data, then manifests), then the rest
            small = [f for f in phases[2] if f.size < URGENT_SMALL]
            phases = [small, phases[0], phases[1], [f for f in phases[2] if f.size >= URGENT_SMALL]]
        for phase in phases:
            if stop.is_set() or (cancel is not None and cancel.is_set()):
                break
            self._run_batches(phase, run)
        self.pending_set.waiting(f.path for f in files if f.path not in tried)
        return done

    def _left_behind(self, f: LocalFile, progress: Progress) -> str | None:
        """In an emergency persist with a deadline (`urgent_until`): why `f` is not started, if it
        cannot be finished in time at the speed this pass has shown (a guess before it has shown
        one); None: it goes."""
        until = self.urgent_until
        if until is None:
            return None
        left = until - time.monotonic()
        if f.size < URGENT_SMALL and left > 0:
            return None
        speed = progress.snapshot().get("speed") or 0
        speed = speed if speed > 0 else (URGENT_GUESS_REMOTE if self.backend.round_trips else URGENT_GUESS_LOCAL)
        need = f.size / speed
        if need <= left:
            return None
        return (f"left behind by the emergency persist: it would take about {need:.0f} s at "
                f"{_size(speed)}/s, and {max(0.0, left):.0f} s were left")

    def _holes_note(self, f: LocalFile) -> str | None:
        """For a large file with holes, where the store keeps every byte: its two sizes."""
        if f.size < URGENT_SMALL or getattr(self.backend, "keeps_holes", False):
            return None
        try:
            st = os.stat(self._abs(f.path))
        except OSError:
            return None
        on_disk = st.st_blocks * 512
        if on_disk >= st.st_size:
            return None
        return (f"a sparse file: {_size(st.st_size)}, of which {_size(on_disk)} on disk; this store keeps "
                f"every byte, holes too")

    def _run_batches(self, files: list[LocalFile], run: Callable[[list[LocalFile]], None]) -> None:
        """Large files one to a worker, small ones 64 to a batch: few thread hand-offs."""
        batches: list[list[LocalFile]] = []
        small: list[LocalFile] = []
        for f in files:
            if f.size >= 1 << 20:
                batches.append([f])
            else:
                small.append(f)
                if len(small) == 64:
                    batches.append(small)
                    small = []
        if small:
            batches.append(small)
        if not batches:
            return
        workers = max(1, min(self.settings.concurrency, len(batches)))
        if workers == 1:
            for batch in batches:
                run(batch)
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="gpuws-sync") as pool:
                list(pool.map(run, batches))

    def _upload_one(self, f: LocalFile, record: Record | None, in_store: dict[str, RemoteFile] | None,
                    progress: Progress, flush_soon: bool) -> tuple[Record, bool]:
        """`record`: the path's record before this pass. The scan's stat, taken just before, is
        the state the copy is checked against; after a change mid-copy the file is stat'ed again.
        `in_store`: the store's files from one listing, when the pass made one. Returns the new
        record, and whether bytes were sent (not when the store had them already)."""
        path = self._abs(f.path)
        key = self.store.file_key(f.path)
        attempt = 0
        versioned = False
        before = (f.size, f.mtime_ns)
        while True:
            if attempt:
                st = os.stat(path)  # FileNotFoundError: deleted meanwhile, the caller skips it
                before = (st.st_size, st.st_mtime_ns)
            if record is not None and record.size == before[0] and record.hash is not None:
                # Touched but maybe not changed: a hash settles it without an upload.
                digest = _local_hash(path)
                if digest == record.hash:
                    return Record(f.path, before[0], before[1], digest, self.clock()), False

            def unchanged() -> bool:
                self.lease.fence()  # the last moment before the copy becomes visible
                try:
                    now = os.stat(path)
                except FileNotFoundError:
                    return False
                return (now.st_size, now.st_mtime_ns) == before

            try:
                if not versioned and f.path in self._resend:
                    versioned = True  # the store's copy is our own write that may not have lasted
                if not versioned and record is not None and f.path in self._partial:
                    versioned = True  # the store's copy was sent while still being written: not a version
                if not versioned:
                    self.lease.fence()
                    # Nothing is overwritten without a version, whether or not we recorded it;
                    # with no record, the store's copy may even be this very file already.
                    if record is None:
                        existing = self._in_store(f.path, key, in_store)
                        if existing is not None:
                            if existing.size == before[0] and self.backend.same_content(key, path, existing):
                                return Record(f.path, before[0], before[1], None, self.clock()), False
                            self.kept_versions.keep(f.path, existing)
                    else:
                        self.kept_versions.keep(f.path)
                    versioned = True
                per_chunk = None
                until = self.urgent_until
                if self.limiter is not None or before[0] >= 64 << 20 or (until is not None and before[0] >= URGENT_SMALL):
                    limiter = self.limiter

                    def per_chunk(n: int) -> None:
                        for part in range(0, n, 1 << 20) if limiter is not None or until is not None else ():
                            if until is not None and time.monotonic() > until:
                                raise CancelledError("cut off: the emergency persist's time was up")
                            if limiter is not None:
                                limiter.take(min(1 << 20, n - part))  # slices: the deadline is looked at between
                        progress.add_bytes(n)

                self.backend.put(path, key, per_chunk, check=unchanged, flush_soon=flush_soon)
                self._failing_since = None
                self._resend.discard(f.path)
                self._note_partial(f.path, self.settling.partial(LocalFile(f.path, *before)))
                if per_chunk is None:
                    progress.add_bytes(before[0])
                return Record(f.path, before[0], before[1], None, self.clock()), True
            except SourceChangedError:
                attempt += 1  # it changed while we read it: read it again, never store it torn
                if attempt > 20:
                    raise SyncError(f"{f.path} keeps changing; it will be synced once it settles") from None
            except StoreMissingError as err:
                self._missing(str(err))  # no retry brings a missing folder back
                raise
            except StoreUnavailableError as err:
                attempt += 1
                now = time.monotonic()
                if self._failing_since is None:
                    self._failing_since = now
                if self.store_down is not None:
                    raise  # another file found the store down: no retries one after another
                # Seen at once in the status, while the retries go on.
                self.state, self.last_error = "error", f"The store is not answering ({err}); retrying"
                if attempt > self.settings.retries:
                    if now - self._failing_since >= self.settings.store_down_after:
                        self.store_down = str(err)
                        raise StoreUnavailableError(
                            f"The store is not answering: {err} (nothing written for "
                            f"{now - self._failing_since:.0f} s). Pending files go as soon as it answers again."
                        ) from err
                    raise StoreUnavailableError(f"{f.path}: {err} (after {attempt} attempts)") from err
                time.sleep(min(self.settings.retry_backoff * 2 ** (attempt - 1), 10.0))

    def _note_partial(self, rel: str, partial: bool) -> None:
        """Whether the copy just sent may be partial (sent while the file was still being
        written, by a persist or after waiting too long): the record keeps it across restarts."""
        if partial == (rel in self._partial):
            return
        if partial:
            self._partial.add(rel)
        else:
            self._partial.discard(rel)
            self.settling.done(rel)
        self.index.set_partial(rel, partial)

    def _in_store(self, rel: str, key: str, in_store: dict[str, RemoteFile] | None) -> RemoteFile | None:
        """What the store holds at a path this runtime has no record of: from the pass's one
        listing when it made one, else asked."""
        if in_store is not None:
            return in_store.get(rel)
        return self.backend.stat(key)

    def _delete_in_store(self, rel: str, report: PassReport) -> None:
        """A deletion reaches the store as a move into versions; a checkpoint that the run's
        retention removed (a newer complete one is here) is deleted outright, else versions
        would keep every checkpoint ever written."""
        key = self.store.file_key(rel)
        attempt = 0
        while True:
            try:
                self.lease.fence()
                if self._retired_checkpoint(rel):
                    self.backend.delete(key)
                else:
                    self.kept_versions.retire(rel)
                report.deleted.append(rel)
                return
            except StoreUnavailableError as err:
                attempt += 1
                if attempt > self.settings.retries or self.store_down is not None:
                    report.errors.append(f"{rel}: {err} (after {attempt} attempts)")
                    self.pending_set.failing(rel, 0, str(err))
                    return
                time.sleep(min(self.settings.retry_backoff * 2 ** (attempt - 1), 10.0))
            except SyncError as err:
                report.errors.append(f"{rel}: {err}")
                self.pending_set.failing(rel, 0, str(err))
                return

    def _retired_checkpoint(self, rel: str) -> bool:
        """A file of a checkpoint folder whose run still has a complete checkpoint here."""
        if not rel.startswith(CHECKPOINTS_PREFIX):
            return False
        parts = rel[len(CHECKPOINTS_PREFIX):].split("/")
        if len(parts) != 3 or not folder_order(parts[1]) is not None:
            return False
        run = self._abs(CHECKPOINTS_PREFIX + parts[0])
        try:
            return any(folder_order(entry.name) is not None and entry.is_dir(follow_symlinks=False)
                       and os.path.isfile(os.path.join(entry.path, MANIFEST)) for entry in os.scandir(run))
        except OSError:
            return False

    # -- restore -----------------------------------------------------------------------------

    def restore(self, progress: Progress | None = None, cancel: threading.Event | None = None) -> RestoreReport:
        """Bring back what the work directory lacks, most needed first (sync/restore.py); where
        both sides have a file and they differ, keep both.

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
            check_workdir(self.workdir)
            self.restoring.begin()
            try:
                remote = self.store.list_files()
                newest = newest_checkpoints(remote)
                self.restoring.plan(newest)
                report = self._restore_job(progress, cancel, self.restoring).run(
                    remote, restore_phases(remote, newest), newest)
            finally:
                self.restoring.end()
        if cancel is not None and cancel.is_set():
            raise CancelledError(f"Restore cancelled after {len(report.restored)} files")
        return report

    def fetch_checkpoint(self, run: str, progress: Progress | None = None, cancel: threading.Event | None = None,
                         timeout: float | None = None) -> str | None:
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
            return SyncError(f"Timed out after {timeout:g} s while bringing the newest checkpoint of {run} "
                             "from the store")

        if not self.restoring.wait_for(run, deadline, cancel):
            raise timed_out()
        files = self.store.list_files(run)
        newest = newest_checkpoints(files).get(run)
        if newest is None:
            return None
        missing = {rel: f for rel, f in files.items()
                   if rel.startswith(newest + "/") and not self._same_size_here(rel, f)}
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

    def _restore_job(self, progress: Progress, cancel: Any, state: RestoreState | None) -> RestoreJob:
        return RestoreJob(self.workdir, self.backend, self.index,
                          concurrency=self.settings.concurrency, retries=self.settings.retries,
                          retry_backoff=self.settings.retry_backoff, clock=self.clock, progress=progress,
                          cancel=cancel, limiter=self.limiter, state=state)

    def _run_folder(self, run: str) -> str:
        rel = run.strip().strip("/")
        name = rel[len(CHECKPOINTS_PREFIX):] if rel.startswith(CHECKPOINTS_PREFIX) else ""
        if not name or "/" in name or name in (".", ".."):
            raise SyncError(f"{run!r} is not a run folder: expected {CHECKPOINTS_PREFIX}<run name>")
        return rel

    def _same_size_here(self, rel: str, remote: RemoteFile) -> bool:
        try:
            st = os.lstat(self._abs(rel))
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode) and st.st_size == remote.size

    # -- versions ----------------------------------------------------------------------------

    def versions(self, rel: str) -> list[dict[str, Any]]:
        return [{"path": p, "version": stamp, "size": f.size} for p, stamp, f in self.store.list_versions(rel)]

    def restore_version(self, rel: str, version: str, target: str | None = None) -> str:
        """Write a kept version to `target` (default: beside the file, never over it)."""
        base, ext = os.path.splitext(rel)
        target = target or f"{base}.version-{version.split('.')[0]}{ext}"
        dest = self._abs(target)
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
        files, size = self.pending_set.totals()
        count, used = self.index.count_and_bytes()
        running = self._running
        lease = lease_status(self.lease, self.keeper)
        missing = self.store_missing
        if missing is None and isinstance(self.keeper.cause, StoreMissingError):
            missing = str(self.keeper.cause)  # seen by the lease's thread before any pass
        if missing is not None or self.lease_corrupt or (lease["lease_error"] and not self.lease.held):
            state = "error"
        elif self.read_only:
            state = "read-only"
        elif self.lease.held and lease["writes_start_in"]:
            state = "taking-over"  # whatever a pass tries meanwhile: it cannot write yet
        elif self.lease.held and not self.lease.valid() and self.state != "syncing":
            state = "error"  # the lease could not be renewed in time: writes paused
        else:
            state = self.state
        problems = self.pending_set.listing(0)
        skipped = self.backend.skipped
        if self._same_disk is None:
            self._same_disk = _same_disk(self.backend, self.workdir)
        return {
            "state": state,
            "pending_files": files,
            "pending_bytes": size,
            "problem_files": problems["problems_total"],
            "progress": running[0].snapshot() if running is not None else None,
            "last_sync": self.last_sync,
            "last_error": missing or self.last_error or lease["lease_error"],
            "read_only_reason": self.read_only_reason,
            "can_take_over": self.read_only or self.lease_corrupt or missing is not None,
            "store_down": self.store_down or missing,
            # The store's folder (or this workspace's, synced here before) is not there: unavailable.
            "store_missing": missing is not None,
            "synced_files": count,
            "store_bytes": used,
            "versions_bytes": self.kept_versions.bytes,
            "versions_count": self.kept_versions.count,
            "quota_bytes": self.settings.quota_bytes,
            "quota_warning": self.quota_warning,
            "record_rebuilt": self.index.rebuilt,
            "ignore_problems": list(self.rules.problems),
            "store": self.backend.description,
            # A store on the work directory's own disk goes with the machine: "saved" there is
            # not saved somewhere that outlives it, and the panel says so.
            "store_same_disk": self._same_disk,
            "workspace": self.store.workspace,
            # The cipher and whether names are encrypted; never a key (null: a plain store).
            "encryption": getattr(self.backend, "encryption", None),
            # Links and special files found in the store, never followed nor read (key → why).
            "store_skipped": {key: skipped[key] for key in sorted(skipped)[:SHOWN_SKIPPED]},
            "store_skipped_count": len(skipped),
            **lease,
        }

    def stored_summary(self) -> dict[str, Any]:
        """What is now in the store, as a persist ends: files and bytes of the mirror and of the
        versions, and the newest checkpoint of each run whose manifest (written last) is there."""
        count, used = self.index.count_and_bytes()
        runs = []
        root = self._abs(CHECKPOINTS_PREFIX.rstrip("/"))
        try:
            run_dirs = sorted(entry.name for entry in os.scandir(root) if entry.is_dir(follow_symlinks=False))
        except OSError:
            run_dirs = []
        for run in run_dirs:
            try:
                folders = sorted((e.name for e in os.scandir(os.path.join(root, run))
                                  if folder_order(e.name) is not None), key=folder_order, reverse=True)
            except OSError:
                continue
            for folder in folders:
                rel = f"{CHECKPOINTS_PREFIX}{run}/{folder}/{MANIFEST}"
                record = self.index.get(rel)
                try:
                    st = os.stat(self._abs(rel))
                except OSError:
                    continue
                if record is not None and (record.size, record.mtime_ns) == (st.st_size, st.st_mtime_ns):
                    runs.append({"run": run, "step": int(folder.split("-")[1]), "folder": folder})
                    break
        return {"files": count, "bytes": used, "versions_bytes": self.kept_versions.bytes, "checkpoints": runs}

    def pending_list(self, limit: int = 200) -> dict[str, Any]:
        """The pending files with why (waiting, uploading, failing with the error) and the
        files that cannot be synced, for the panel's expandable list."""
        return self.pending_set.listing(limit)

    # -- helpers -----------------------------------------------------------------------------

    def _abs(self, rel: str) -> str:
        return os.path.join(self.workdir, *rel.split("/"))


class _Stop:
    """Set once the caller cancels or the deadline (time.monotonic) passes: what a restore job
    checks to stop."""

    def __init__(self, cancel: threading.Event | None, deadline: float | None) -> None:
        self.cancel = cancel
        self.deadline = deadline

    def is_set(self) -> bool:
        return bool((self.cancel is not None and self.cancel.is_set())
                    or (self.deadline is not None and time.monotonic() > self.deadline))


def _same(local: LocalFile, record: Record | None) -> bool:
    return record is not None and record.size == local.size and record.mtime_ns == local.mtime_ns


def _same_disk(backend: Backend, workdir: str) -> bool:
    """Whether the store is a folder on the work directory's file system (the embedded default)."""
    backend = getattr(backend, "inner", backend)  # an encrypted store: where its objects really are
    root = getattr(backend, "root", None)
    if not isinstance(root, str) or getattr(backend, "fs", None) is not None:
        return False  # an object store, or another fsspec file system
    folder = root
    while folder and not os.path.exists(folder):  # not made yet: where it will be
        folder = os.path.dirname(folder)
    try:
        return os.stat(folder or "/").st_dev == os.stat(workdir).st_dev
    except OSError:
        return False


def _local_hash(path: str) -> str:
    try:
        return file_hash(path)
    except PermissionError as err:
        raise LocalFileError(f"cannot be read: {err.strerror}") from None


def _checkpoint_manifest(rel: str) -> bool:
    return rel.startswith(CHECKPOINTS_PREFIX) and rel.endswith("/" + MANIFEST)


def _has_files(folder: str) -> bool:
    """Whether any regular file lies below `folder` (stops at the first one found)."""
    for _, _, files in os.walk(folder):
        if files:
            return True
    return False


def plain_data(path: str) -> None:
    """Whatever the store or its backend says, what comes from it is never executable: a hook
    under `.git/hooks/` (or any script) needs the user's own chmod to run. Read and write bits
    stay as the file was created (the umask's)."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    os.chmod(path, mode & 0o666)


def _inside(root: str, path: str) -> bool:
    return os.path.commonpath([root, os.path.abspath(path)]) == root


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def check_workdir(workdir: str) -> None:
    if not os.path.isdir(workdir):
        raise WorkdirError(f"The work directory {workdir} does not exist (or is not a directory)")
    if not os.access(workdir, os.R_OK | os.X_OK):
        raise WorkdirError(f"The work directory {workdir} is not readable")


__all__ = [
    "PassReport", "Progress", "RestoreReport", "SyncEngine", "SyncSettings", "StoreConfigError",
    "StoreFullError", "QuotaExceededError",
]


def _normal_order(f: LocalFile) -> tuple[bool, int]:
    """Checkpoints first, newest first (what a preempted run needs most), then large files:
    they set the pass's length; small ones fill the gaps."""
    if f.path.startswith(CHECKPOINTS_PREFIX):
        return (False, -f.mtime_ns)
    return (True, -f.size)


def _urgent_order(files: list[LocalFile]) -> Callable[[LocalFile], tuple[int, int, int, int]]:
    """Small files (code, notebooks, configuration) first, then the checkpoints, newest folder
    first and each folder's manifest after its data, then the rest, small before large."""
    newest: dict[str, int] = {}
    for f in files:
        if f.path.startswith(CHECKPOINTS_PREFIX):
            folder = f.path.rpartition("/")[0]
            newest[folder] = max(newest.get(folder, 0), f.mtime_ns)

    def key(f: LocalFile) -> tuple[int, int, int, int]:
        if f.path.startswith(CHECKPOINTS_PREFIX):
            return (1, -newest[f.path.rpartition("/")[0]], f.path.endswith("/manifest.json"), 0)
        if f.size < URGENT_SMALL:
            return (0, 0, 0, f.size)
        return (2, 0, 0, f.size)

    return key
