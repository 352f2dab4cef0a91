"""The sync engine: mirrors the work directory to the store, lossless and atomic.

A pass plans from the local record (no walk or listing when the changed paths are known),
uploads in parallel and records what reached the store. Where the store's writes are not durable
at once (a local folder), the records say so until a flush has made them durable: at the end of
the pass (Persist now, the command line, a release) or just after it in the background (the
watcher's passes). An unclean stop before that flush makes the next start send those files
again. A reader of the store sees whole files only, either way. Previous versions of
overwritten or deleted files are kept under .gpuws/versions/. Restore brings back what the work
directory lacks and never overwrites or deletes local work.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat as stat_module
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable

from .errors import (
    CancelledError,
    DeletionGuardError,
    LeaseHeldError,
    QuotaExceededError,
    StoreConfigError,
    StoreFullError,
    StoreUnavailableError,
    SyncError,
    WorkdirError,
)
from .hashing import file_hash
from .ignore import IgnoreRules
from .index import Record, SyncIndex
from .lease import Lease
from .scan import LocalFile, scan, stat_path
from .backend import PART_SUFFIX, Backend, RemoteFile, SourceChangedError
from .restore import (
    CHECKPOINTS_PREFIX,
    RestoreJob,
    RestoreReport,
    RestoreState,
    newest_checkpoints,
    restore_phases,
)
from .store import Store, open_backend, version_stamp

log = logging.getLogger(__name__)

# Below this many deletions the share guard does not apply (deleting 2 of 3 files is normal).
GUARD_MIN_DELETIONS = 10
# Temporary files of interrupted writes older than this are removed when the lease is taken.
STALE_PART_SECONDS = 3600.0
# In an emergency pass, files under this size (outside checkpoints) go first.
URGENT_SMALL = 1 << 20


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
    lease_ttl: float = 60.0
    durable: bool = True
    retries: int = 4
    retry_backoff: float = 0.5
    excludes: list[str] = field(default_factory=list)


class Progress:
    """Files and bytes done of total; one instance per job, updated from worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.files_total = 0
        self.files_done = 0
        self.bytes_total = 0
        self.bytes_done = 0
        self.phase = "planning"
        self.current: str | None = None

    def plan(self, files: int, size: int, phase: str) -> None:
        with self._lock:
            self.files_total += files
            self.bytes_total += size
            self.phase = phase

    def set_items(self, done: int, total: int, current: str | None, phase: str) -> None:
        """Progress counted in items other than files (packages of an environment restore)."""
        with self._lock:
            self.files_done, self.files_total, self.current, self.phase = done, total, current, phase

    def add_bytes(self, n: int) -> None:
        with self._lock:
            self.bytes_done += n

    def file_done(self, path: str) -> None:
        with self._lock:
            self.files_done += 1
            self.current = path

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "phase": self.phase,
                "files_done": self.files_done,
                "files_total": self.files_total,
                "bytes_done": self.bytes_done,
                "bytes_total": self.bytes_total,
                "current": self.current,
            }


class RateLimiter:
    """A token bucket shared by every transfer thread."""

    def __init__(self, bytes_per_second: int) -> None:
        self.rate = float(bytes_per_second)
        self._lock = threading.Lock()
        self._allowance = self.rate
        self._last = time.monotonic()

    def take(self, n: int) -> None:
        with self._lock:
            now = time.monotonic()
            self._allowance = min(self.rate, self._allowance + (now - self._last) * self.rate)
            self._last = now
            self._allowance -= n
            wait = -self._allowance / self.rate if self._allowance < 0 else 0.0
        if wait > 0:
            time.sleep(wait)


@dataclass
class PassReport:
    uploaded: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0
    bytes_uploaded: int = 0
    errors: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # too large, ignored

    @property
    def ok(self) -> bool:
        return not self.errors


def index_path(state_dir: str, settings_workdir: str, backend: Backend, workspace: str) -> str:
    key = hashlib.sha1(f"{os.path.abspath(settings_workdir)}\0{backend.description}\0{workspace}".encode())
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in workspace)
    return os.path.join(state_dir, f"{safe}-{key.hexdigest()[:12]}.sqlite3")


class SyncEngine:
    def __init__(self, settings: SyncSettings, backend: Backend | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.workdir = os.path.abspath(os.path.expanduser(settings.workdir))
        self.clock = clock
        check_workdir(self.workdir)
        self.backend = backend or open_backend(settings.store_url, settings.storage_options,
                                               settings.durable, settings.concurrency)
        self.store = Store(self.backend, settings.workspace)
        self.index = SyncIndex(index_path(settings.state_dir, self.workdir, self.backend, settings.workspace))
        self.rules = IgnoreRules(self.workdir, settings.excludes)
        self.lease = Lease(self.store, settings.lease_ttl, clock)
        self.limiter = RateLimiter(settings.bandwidth_limit) if settings.bandwidth_limit else None
        self.read_only_reason: str | None = None
        self.state = "idle"
        self.last_sync: float | None = None
        self.last_error: str | None = None
        self.quota_warning: str | None = None
        self._pass_lock = threading.Lock()
        self._dirty: set[str] = set()
        self._dirty_lock = threading.Lock()
        self._pending: dict[str, int] = {}  # path → size, known to differ from the store
        self.last_change = 0.0  # monotonic time of the last change the watcher reported
        # Set for an emergency persist (SIGTERM, preemption): what is smallest and most needed
        # goes first, in case the machine is gone before the pass ends.
        self.urgent = False
        # The background flush after a pass that did not wait for one.
        self._flush_wanted = threading.Condition()
        self._flush_requested = False
        self._flusher: threading.Thread | None = None
        self._closing = False
        # The restore in progress, for resume() (fetch_checkpoint); one restore at a time.
        self.restoring = RestoreState()
        self._restore_lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self, take_over: bool = False) -> None:
        """Reach the store and take the lease; a held lease leaves the engine read-only."""
        try:
            self.lease.acquire(take_over=take_over)
            self.read_only_reason = None
        except LeaseHeldError as err:
            self.read_only_reason = str(err)
            self.state = "read-only"
            log.warning("Sync: %s", err)
            return
        # Recorded just before an unclean stop, maybe never made durable: send them again.
        forgotten = self.index.forget_unflushed()
        if forgotten:
            log.info("Sync: %d files recorded just before an unclean stop will be sent again", len(forgotten))
        swept = self.backend.sweep_parts(self.settings.workspace, STALE_PART_SECONDS)
        if swept:
            log.info("Sync: removed %d temporary files left by interrupted writes", swept)

    def heartbeat(self) -> None:
        if self.read_only_reason is None and self.lease.held:
            try:
                self.lease.renew()
            except LeaseHeldError as err:
                self.read_only_reason = str(err)
                self.state = "read-only"

    def close(self) -> None:
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
            self.lease.release()
        finally:
            self.index.close()
            self.backend.close()

    @property
    def read_only(self) -> bool:
        return self.read_only_reason is not None

    # -- what is pending ---------------------------------------------------------------------

    def mark_dirty(self, paths: Iterable[str]) -> None:
        """Paths (relative, '/'-separated) that may have changed, from the watcher."""
        with self._dirty_lock:
            self.last_change = time.monotonic()
            for rel in paths:
                self._dirty.add(rel)
                local = stat_path(self.workdir, rel, self.rules)
                record = self.index.get(rel)
                if local is not None and not _same(local, record):
                    self._pending[rel] = local.size
                elif local is None and record is not None and not os.path.lexists(self._abs(rel)):
                    self._pending[rel] = 0  # a deletion to carry to the store
                else:
                    self._pending.pop(rel, None)

    def pending(self) -> tuple[int, int]:
        with self._dirty_lock:
            return len(self._pending), sum(self._pending.values())

    def take_dirty(self) -> set[str]:
        with self._dirty_lock:
            dirty, self._dirty = self._dirty, set()
            return dirty

    # -- sync --------------------------------------------------------------------------------

    def sync(self, paths: Iterable[str] | None = None, progress: Progress | None = None,
             cancel: threading.Event | None = None, durable: bool = True) -> PassReport:
        """One pass. `paths`: just these (from the watcher); None: a full rescan.

        `durable`: return once what the pass wrote is durable in the store; False: once it is
        in the store, whole, with the flush following in the background.
        """
        if self.read_only:
            raise LeaseHeldError(self.read_only_reason or "read-only")
        if not self.lease.held:
            raise LeaseHeldError("This runtime does not hold the workspace lease: open the engine first")
        progress = progress or Progress()
        with self._pass_lock:
            self.state = "syncing"
            try:
                try:
                    report = self._sync(paths, progress, cancel, durable)
                finally:
                    if self.backend.flushes:  # elsewhere a write is durable once it completes
                        if durable:
                            self.flush()
                        elif self.backend.unflushed() or self.index.unflushed_mark():
                            self._flush_soon()
            except SyncError as err:
                self.state, self.last_error = "error", str(err)
                raise
            except Exception as err:
                self.state, self.last_error = "error", f"Sync failed: {err}"
                log.exception("Sync pass failed")
                raise SyncError(self.last_error) from err
            if report.errors:
                self.state, self.last_error = "error", report.errors[0]
            else:
                self.state, self.last_error = "idle", None
                self.last_sync = self.clock()
            return report

    def _sync(self, paths: Iterable[str] | None, progress: Progress,
              cancel: threading.Event | None, flush_soon: bool) -> PassReport:
        report = PassReport()
        changed, deleted, report.unchanged, total_records = self.plan(paths)
        known = {f.path: self.index.get(f.path) for f in changed}  # each record looked up once
        if len(deleted) >= GUARD_MIN_DELETIONS and len(deleted) > self.settings.max_delete_fraction * total_records:
            raise DeletionGuardError(
                f"This pass would remove {len(deleted)} of the {total_records} files in the store "
                f"(more than {self.settings.max_delete_fraction:.0%}): stopped, nothing was deleted. "
                "Check the work directory; previous versions stay in the store."
            )

        changed = self._apply_limits(changed, report)
        # Only a file the store had before can gain a version in this pass (see _keep_version).
        overwritten = {path for path, record in known.items() if record is not None}
        progress.plan(len(changed) + len(deleted), sum(f.size for f in changed), "uploading")
        records_done = self._upload_all(changed, known, progress, cancel, report, flush_soon)
        # Listed as not yet durable whether or not a flush has started on them meanwhile: only
        # a flush that begins after this records them as durable.
        self.index.put_many(records_done, unflushed=self.backend.flushes)
        for record in records_done:
            self._clear_pending(record.path)
        if cancel is not None and cancel.is_set():
            raise CancelledError(f"Cancelled after {len(records_done)} of {len(changed)} files")

        progress.phase = "deleting"
        for rel in deleted:
            self._delete_in_store(rel, report)
            progress.file_done(rel)
        self.index.delete_many([rel for rel in deleted if rel in report.deleted])
        for rel in report.deleted:
            self._clear_pending(rel)
        self._prune_versions(overwritten | set(report.deleted))
        progress.phase = "done"
        return report

    def flush(self) -> None:
        """Make everything written to the store durable, and the records say so. If the store
        fails to, the records since the last flush are dropped and the files become pending."""
        upto = self.index.unflushed_mark()
        try:
            self.backend.flush()
        except SyncError as err:
            lost = self.index.forget_unflushed(upto)
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
            local = {f.path: f for f in scan(self.workdir, self.rules)}
            records = self.index.all()
            for f in local.values():
                if _same(f, records.get(f.path)):
                    unchanged += 1
                else:
                    changed.append(f)
            deleted = [p for p in records if p not in local and not os.path.lexists(self._abs(p))]
            total_records = len(records)
            if records and not local:
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
                report.skipped.append(f.path)
                continue
            keep.append(f)
        quota = self.settings.quota_bytes
        if quota is None:
            return keep
        _, used = self.index.count_and_bytes()
        allowed = []
        for f in sorted(keep, key=lambda item: item.size):
            record = self.index.get(f.path)
            after = used - (record.size if record else 0) + f.size
            if after > quota:
                report.errors.append(
                    f"Quota exceeded: {f.path} ({_mb(f.size)}) would take the store to {_mb(after)} "
                    f"of its {_mb(quota)} quota. The file stays here, pending."
                )
                continue
            used = after
            allowed.append(f)
        self.quota_warning = (
            f"The store is {used / quota:.0%} full ({_mb(used)} of {_mb(quota)})" if used >= 0.9 * quota else None
        )
        return allowed

    def _upload_all(self, files: list[LocalFile], known: dict[str, Record | None], progress: Progress,
                    cancel: threading.Event | None, report: PassReport, flush_soon: bool) -> list[Record]:
        if not files:
            return []
        done: list[Record] = []
        lock = threading.Lock()
        ordered = sorted(files, key=_urgent_order(files) if self.urgent else _normal_order)
        batches: list[list[LocalFile]] = []
        small: list[LocalFile] = []
        for f in ordered:
            if f.size >= 1 << 20:
                batches.append([f])
            else:
                small.append(f)
                if len(small) == 64:
                    batches.append(small)
                    small = []
        if small:
            batches.append(small)

        full = threading.Event()  # a full store fails every file: stop at the first

        def run(batch: list[LocalFile]) -> None:
            for f in batch:
                if (cancel is not None and cancel.is_set()) or full.is_set():
                    return
                try:
                    record = self._upload_one(f, known.get(f.path), progress, flush_soon)
                except StoreFullError as err:
                    full.set()
                    with lock:
                        report.errors.append(str(err))
                    return
                except SyncError as err:
                    with lock:
                        report.errors.append(str(err))
                    continue
                except FileNotFoundError:
                    continue  # deleted meanwhile: the next pass carries the deletion
                with lock:
                    if record is not None:
                        done.append(record)
                        report.uploaded.append(f.path)
                        report.bytes_uploaded += record.size
                progress.file_done(f.path)

        workers = max(1, min(self.settings.concurrency, len(batches)))
        if workers == 1:
            for batch in batches:
                run(batch)
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="gpuws-sync") as pool:
                list(pool.map(run, batches))
        return done

    def _upload_one(self, f: LocalFile, record: Record | None, progress: Progress,
                    flush_soon: bool) -> Record | None:
        """`record`: the path's record before this pass. The scan's stat, taken just before, is
        the state the copy is checked against; after a change mid-copy the file is stat'ed again."""
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
                digest = file_hash(path)
                if digest == record.hash:
                    return Record(f.path, before[0], before[1], digest, self.clock())

            def unchanged() -> bool:
                try:
                    now = os.stat(path)
                except FileNotFoundError:
                    return False
                return (now.st_size, now.st_mtime_ns) == before

            try:
                if record is not None and not versioned:
                    self._keep_version(f.path)
                    versioned = True
                per_chunk = None
                if self.limiter is not None or before[0] >= 64 << 20:
                    limiter = self.limiter

                    def per_chunk(n: int) -> None:
                        if limiter is not None:
                            limiter.take(n)
                        progress.add_bytes(n)

                self.backend.put(path, key, per_chunk, check=unchanged, flush_soon=flush_soon)
                if per_chunk is None:
                    progress.add_bytes(before[0])
                return Record(f.path, before[0], before[1], None, self.clock())
            except SourceChangedError:
                attempt += 1  # it changed while we read it: read it again, never store it torn
                if attempt > 20:
                    raise SyncError(f"{f.path} keeps changing; it will be synced once it settles") from None
            except StoreUnavailableError as err:
                attempt += 1
                if attempt > self.settings.retries:
                    raise StoreUnavailableError(f"{f.path}: {err} (after {attempt} attempts)") from err
                time.sleep(min(self.settings.retry_backoff * 2 ** (attempt - 1), 10.0))

    def _keep_version(self, rel: str) -> None:
        """Before an overwrite: the store's current copy becomes a version."""
        key = self.store.file_key(rel)
        if self.backend.stat(key) is not None:
            self.backend.copy(key, self.store.version_key(rel, version_stamp(self.clock())))

    def _delete_in_store(self, rel: str, report: PassReport) -> None:
        """A deletion reaches the store only as a move into versions."""
        key = self.store.file_key(rel)
        attempt = 0
        while True:
            try:
                # Looked up again on a retry: a move whose reply was lost may have happened.
                if self.backend.stat(key) is not None:
                    self.backend.move(key, self.store.version_key(rel, version_stamp(self.clock())))
                report.deleted.append(rel)
                return
            except StoreUnavailableError as err:
                attempt += 1
                if attempt > self.settings.retries:
                    report.errors.append(f"{rel}: {err} (after {attempt} attempts)")
                    return
                time.sleep(min(self.settings.retry_backoff * 2 ** (attempt - 1), 10.0))
            except SyncError as err:
                report.errors.append(f"{rel}: {err}")
                return

    def _prune_versions(self, paths: set[str]) -> None:
        if not paths:
            return
        keep, max_age = self.settings.keep_versions, self.settings.version_max_age
        cutoff = version_stamp(self.clock() - max_age)
        for rel in paths:
            try:
                versions = self.store.list_versions(rel)
            except SyncError:
                continue
            stamps = [stamp for _, stamp, _ in versions]
            doomed = stamps[: max(0, len(stamps) - keep)] + [s for s in stamps[-keep:] if s < cutoff]
            for stamp in set(doomed):
                self.backend.delete(self.store.version_key(rel, stamp))

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
        with self._restore_lock:
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
        if cancel is not None and cancel.is_set():
            raise CancelledError(f"Cancelled while fetching {newest}")
        if stop.is_set():
            raise timed_out()
        if report.errors:
            raise SyncError(f"Could not bring {newest} from the store: {report.errors[0]}")
        return newest

    def _restore_job(self, progress: Progress, cancel: Any, state: RestoreState | None) -> RestoreJob:
        return RestoreJob(self.workdir, self.backend, self.store.file_key, self.index,
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
        return stat_module.S_ISREG(st.st_mode) and st.st_size == remote.size

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
        os.rename(tmp, dest)
        return target

    # -- status ------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        files, size = self.pending()
        count, used = self.index.count_and_bytes()
        lease = None
        try:
            current = self.lease.current()
            lease = asdict(current) if current else None
        except SyncError:
            pass
        return {
            "state": "read-only" if self.read_only else self.state,
            "pending_files": files,
            "pending_bytes": size,
            "last_sync": self.last_sync,
            "last_error": self.last_error,
            "read_only_reason": self.read_only_reason,
            "synced_files": count,
            "store_bytes": used,
            "quota_bytes": self.settings.quota_bytes,
            "quota_warning": self.quota_warning,
            "store": self.backend.description,
            "workspace": self.store.workspace,
            "lease": lease,
            "lease_held": self.lease.held,
        }

    # -- helpers -----------------------------------------------------------------------------

    def _abs(self, rel: str) -> str:
        return os.path.join(self.workdir, *rel.split("/"))

    def _clear_pending(self, rel: str) -> None:
        with self._dirty_lock:
            self._pending.pop(rel, None)


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


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def _mb(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


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
