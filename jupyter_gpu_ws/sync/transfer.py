"""Transferring a pass's files: uploads in parallel, each one fenced by the lease, checked
against the file as planned and versioned before it overwrites; deletions as moves into
versions. A full store, a store that stopped answering or a lease no longer in force stop the
pass at once instead of failing file after file.

One PassTransfer serves one pass of the engine (engine.py). It reads the engine's parts (the
store, the lease, the versions, the record) and keeps the engine's view of the store's health
(`store_down`, `failing_since`, the state shown) up to date as files succeed and fail.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from ..checkpoints.files import MANIFEST
from ..diskio import waits_on_disk
from ..store import Store
from ..store.backend import Backend, RemoteFile, SourceChangedError
from ..store.hashing import file_hash
from ..store.lease import Lease
from ..store.versions import Versions
from .errors import (
    CancelledError,
    LeaseHeldError,
    LocalDiskFullError,
    LocalFileError,
    StoreFullError,
    StoreMissingError,
    StoreUnavailableError,
    SyncError,
)
from .index import Record
from .links import entry_of, is_link_item, link_target
from .pending import PendingSet
from .plan import URGENT_SMALL, PassReport, Planner, left_behind, size_text, upload_phases
from .progress import Progress, RateLimiter
from .scan import LocalFile
from .settle import Settling

# Files from this size go one to a worker; smaller ones SMALL_BATCH to a worker (few hand-offs).
LARGE_FILE = 1 << 20
SMALL_BATCH = 64
# Files from this size report their bytes as they go (the panel's progress within one file).
REPORTS_AS_IT_GOES = 64 << 20


class TransferSettings(Protocol):
    """The settings a transfer reads (engine.py's SyncSettings)."""

    @property
    def concurrency(self) -> int: ...
    @property
    def retries(self) -> int: ...
    @property
    def retry_backoff(self) -> float: ...
    @property
    def store_down_after(self) -> float: ...


class EngineParts(Protocol):
    """What a transfer reads of the engine (engine.py's SyncEngine), and the store's health it
    keeps there; a protocol, so that this module does not import the engine that imports it."""

    failing_since: float | None
    store_down: str | None
    state: str
    last_error: str | None

    @property
    def settings(self) -> TransferSettings: ...
    @property
    def backend(self) -> Backend: ...
    @property
    def store(self) -> Store: ...
    @property
    def lease(self) -> Lease: ...
    @property
    def kept_versions(self) -> Versions: ...
    @property
    def pending_set(self) -> PendingSet: ...
    @property
    def planner(self) -> Planner: ...
    @property
    def settling(self) -> Settling: ...
    @property
    def limiter(self) -> RateLimiter | None: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def partial(self) -> set[str]: ...
    @property
    def resend(self) -> set[str]: ...
    @property
    def urgent(self) -> bool: ...
    @property
    def urgent_until(self) -> float | None: ...

    workdir: str

    def abs(self, rel: str) -> str: ...
    def note_missing(self, why: str) -> None: ...
    def note_partial(self, rel: str, partial: bool) -> None: ...


class PassTransfer:
    def __init__(
        self,
        engine: EngineParts,
        progress: Progress,
        cancel: threading.Event | None,
        report: PassReport,
        flush_soon: bool,
    ) -> None:
        self.engine = engine
        self.progress = progress
        self.cancel = cancel
        self.report = report
        self.flush_soon = flush_soon

    def _cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    # -- uploads -----------------------------------------------------------------------------

    def upload_all(
        self,
        files: list[LocalFile],
        known: dict[str, Record | None],
        in_store: dict[str, RemoteFile] | None,
    ) -> list[Record]:
        """Upload in parallel, in the plan's phases (plan.upload_phases). A checkpoint folder's
        manifest goes only once the folder's other files are in the store. `known`: each file's
        record before this pass; `in_store`: the store's files from one listing, when the pass
        made one. Returns the records of what reached the store (or was there already)."""
        if not files:
            return []
        engine, report, progress = self.engine, self.report, self.progress
        pending = engine.pending_set
        done: list[Record] = []
        lock = threading.Lock()
        stop = threading.Event()
        failed_folders: set[str] = set()
        tried: set[str] = set()

        def fail(f: LocalFile, message: str, into: list[str], entry: str) -> None:
            pending.failing(f.path, f.size, message)
            with lock:
                into.append(entry)
                failed_folders.add(f.path.rpartition("/")[0])  # no manifest without its data

        manifest = "/" + MANIFEST

        def run(batch: list[LocalFile]) -> None:
            for f in batch:
                if self._cancelled() or stop.is_set():
                    return
                if f.path.endswith(manifest) and f.path.rpartition("/")[0] in failed_folders:
                    continue  # its data did not all reach the store: no manifest without it
                with lock:
                    tried.add(f.path)
                until = engine.urgent_until
                if until is not None:  # an emergency with a deadline: does this file fit in it?
                    speed = progress.snapshot().get("speed") or 0
                    behind = left_behind(
                        f, until, time.monotonic(), speed, engine.backend.round_trips
                    )
                    if behind is not None:
                        fail(f, behind, report.left_behind, f"{f.path}: {behind}")
                        continue
                pending.uploading(f.path, self._holes_note(f))
                try:
                    record, sent, uncounted = self.upload_one(f, known.get(f.path), in_store)
                except LocalFileError as err:
                    pending.problem(f.path, str(err), f)
                    with lock:
                        report.problems.append(f"{f.path}: {err}")
                    continue
                except FileNotFoundError:
                    pending.done(f.path)
                    continue  # deleted meanwhile: the next pass carries the deletion
                except SyncError as err:
                    if isinstance(err, CancelledError) and engine.urgent_until is not None:
                        fail(
                            f, str(err), report.left_behind, f"{f.path}: {err}"
                        )  # nothing of it became visible
                        continue
                    fail(f, str(err), report.errors, str(err))
                    if (
                        isinstance(err, (StoreFullError, LocalDiskFullError, LeaseHeldError))
                        or engine.store_down is not None
                    ):
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
                        report.found_in_store += 1
                progress.file_done(f.path, uncounted)

        for phase in upload_phases(files, engine.urgent):
            if stop.is_set() or self._cancelled():
                break
            self._run_batches(phase, run)
        pending.waiting(f.path for f in files if f.path not in tried)
        return done

    def _run_batches(self, files: list[LocalFile], run: Callable[[list[LocalFile]], None]) -> None:
        """Large files one to a worker, small ones SMALL_BATCH to a batch: few thread hand-offs."""
        batches: list[list[LocalFile]] = [[f] for f in files if f.size >= LARGE_FILE]
        small = [f for f in files if f.size < LARGE_FILE]
        if self.engine.urgent:  # in the order planned: smallest first
            batches += [small[i : i + SMALL_BATCH] for i in range(0, len(small), SMALL_BATCH)]
        else:
            batches += batches_by_folder(small)
        if not batches:
            return
        workers = max(1, min(self.engine.settings.concurrency, len(batches)))
        if workers == 1:
            for batch in batches:
                run(batch)
            return
        here: list[list[LocalFile]] = []
        if not self.engine.backend.round_trips:
            # Into a local disk, small files one after the other in this thread, as `cp -r`
            # does, until they are seen to wait on the disk (diskio.waits_on_disk).
            here = [batch for batch in batches if batch[0].size < LARGE_FILE]
            batches = [batch for batch in batches if batch[0].size >= LARGE_FILE]
        with ThreadPoolExecutor(workers, thread_name_prefix="gpuws-sync") as pool:
            running = [pool.submit(run, batch) for batch in batches]
            for n, batch in enumerate(here):
                started = time.monotonic()
                run(batch)
                nbytes = sum(f.size for f in batch)
                if waits_on_disk(time.monotonic() - started, len(batch), nbytes):
                    running += [pool.submit(run, rest) for rest in here[n + 1 :]]
                    break
            for future in running:
                future.result()

    def upload_one(
        self, f: LocalFile, record: Record | None, in_store: dict[str, RemoteFile] | None
    ) -> tuple[Record, bool, int]:
        """`record`: the path's record before this pass. The scan's stat, taken just before, is
        the state the copy is checked against; after a change mid-copy the file is stat'ed again.
        Returns the new record, whether bytes were sent (not when the store had them already),
        and how many of them the progress has yet to count (a small file's, at its end)."""
        engine = self.engine
        if is_link_item(f.path):
            return self._upload_link(f, record, in_store)
        path = engine.abs(f.path)
        key = engine.store.file_key(f.path)
        attempt = 0
        versioned = False
        before = (f.size, f.mtime_ns)
        sent = [0]  # bytes the progress counted for this attempt's copy
        while True:
            if attempt:
                self.progress.take_back(sent[0])
                sent[0] = 0
                st = os.stat(path)  # FileNotFoundError: deleted meanwhile, the caller skips it
                if st.st_size != before[0]:
                    self.progress.resize(st.st_size - before[0])
                before = (st.st_size, st.st_mtime_ns)
            if record is not None and record.size == before[0] and record.hash is not None:
                # Touched but maybe not changed: a hash settles it without an upload.
                digest = _local_hash(path)
                if digest == record.hash:
                    return Record(f.path, before[0], before[1], digest, engine.clock()), False, 0

            def unchanged(before: tuple[int, int] = before) -> bool:
                engine.lease.fence()  # the last moment before the copy becomes visible
                try:
                    now = os.stat(path)
                except FileNotFoundError:
                    return False
                return (now.st_size, now.st_mtime_ns) == before

            try:
                if not versioned and f.path in engine.resend:
                    versioned = True  # the store's copy is our own write that may not have lasted
                if not versioned and record is not None and f.path in engine.partial:
                    versioned = (
                        True  # the store's copy was sent while still being written: not a version
                    )
                if not versioned:
                    engine.lease.fence()
                    # Nothing is overwritten without a version, whether or not we recorded it;
                    # with no record, the store's copy may even be this very file already.
                    if record is None:
                        existing = (
                            in_store.get(f.path)
                            if in_store is not None
                            else engine.backend.stat(key)
                        )
                        if existing is not None:
                            if existing.size == before[0] and engine.backend.same_content(
                                key, path, existing
                            ):
                                return (
                                    Record(f.path, before[0], before[1], None, engine.clock()),
                                    False,
                                    0,
                                )
                            engine.kept_versions.keep(f.path, existing)
                    else:
                        engine.kept_versions.keep(f.path)
                    versioned = True
                per_chunk = self._per_chunk(before[0], sent)
                engine.backend.put(
                    path, key, per_chunk, check=unchanged, flush_soon=self.flush_soon
                )
                engine.failing_since = None
                engine.resend.discard(f.path)
                same = before == (f.size, f.mtime_ns)
                engine.note_partial(
                    f.path, engine.settling.partial(f if same else LocalFile(f.path, *before))
                )
                uncounted = before[0] if per_chunk is None else 0
                return Record(f.path, before[0], before[1], None, engine.clock()), True, uncounted
            except SourceChangedError:
                attempt += 1  # it changed while we read it: read it again, never store it torn
                if attempt > 20:
                    self.progress.take_back(sent[0])  # not sent: its bytes are not counted
                    raise SyncError(
                        f"{f.path} keeps changing; it will be synced once it settles"
                    ) from None
            except StoreMissingError as err:
                engine.note_missing(str(err))  # no retry brings a missing folder back
                raise
            except StoreUnavailableError as err:
                attempt += 1
                self._unavailable(f.path, err, attempt)

    def _upload_link(
        self, f: LocalFile, record: Record | None, in_store: dict[str, RemoteFile] | None
    ) -> tuple[Record, bool, int]:
        """A symbolic link: its target, as the small file of its name (scan.LINK_SUFFIX), kept
        as a version before it is overwritten like any file's copy."""
        engine = self.engine
        key = engine.store.file_key(f.path)
        attempt = 0
        while True:
            link = entry_of(f.path)
            try:
                st = os.lstat(engine.abs(link))
            except OSError:
                raise FileNotFoundError(link) from None
            data, _ = link_target(engine.workdir, link)
            if data is None:
                raise FileNotFoundError(link)  # no longer a link inside: the next pass says so
            done = Record(f.path, len(data), st.st_mtime_ns, None, engine.clock())
            try:
                engine.lease.fence()
                if record is None:
                    existing = (
                        in_store.get(f.path) if in_store is not None else engine.backend.stat(key)
                    )
                    if existing is not None:
                        if existing.size == len(data) and engine.backend.read_bytes(key) == data:
                            return done, False, 0
                        engine.kept_versions.keep(f.path, existing)
                elif f.path not in engine.resend:
                    engine.kept_versions.keep(f.path)
                engine.lease.fence()
                engine.backend.write_bytes(key, data)
                engine.failing_since = None
                engine.resend.discard(f.path)
                return done, True, len(data)
            except StoreMissingError as err:
                engine.note_missing(str(err))
                raise
            except StoreUnavailableError as err:
                attempt += 1
                self._unavailable(f.path, err, attempt)

    def _per_chunk(self, size: int, sent: list[int]) -> Callable[[int], None] | None:
        """What the backend calls with each chunk's size as it sends a file: the bandwidth limit,
        the emergency persist's deadline (looked at between 1 MiB slices) and the progress
        within a large file; None where none of those applies (progress counts it at the end)."""
        limiter = self.engine.limiter
        until = self.engine.urgent_until
        if limiter is None and size < REPORTS_AS_IT_GOES and (until is None or size < URGENT_SMALL):
            return None
        progress = self.progress

        def per_chunk(n: int) -> None:
            for part in range(0, n, 1 << 20) if limiter is not None or until is not None else ():
                if until is not None and time.monotonic() > until:
                    raise CancelledError("cut off: the emergency persist's time was up")
                if limiter is not None:
                    limiter.take(min(1 << 20, n - part))
            progress.add_bytes(n)
            sent[0] += n

        return per_chunk

    def _unavailable(self, rel: str, err: StoreUnavailableError, attempt: int) -> None:
        """A write the store did not answer: wait and let the caller retry, or raise once the
        retries are spent (the store taken to be down when nothing was written for a while)."""
        engine = self.engine
        now = time.monotonic()
        if engine.failing_since is None:
            engine.failing_since = now
        if engine.store_down is not None:
            raise err  # another file found the store down: no retries one after another
        # Seen at once in the status, while the retries go on. A fault the store answered (a
        # 503, a refused certificate) in its own line, its cause and fix: wrapped in "not
        # answering" it would name a cause that is not the one.
        engine.state = "error"
        engine.last_error = (
            str(err) if err.kind is not None else f"The store is not answering ({err}); retrying"
        )
        if attempt > engine.settings.retries:
            if now - engine.failing_since >= engine.settings.store_down_after:
                engine.store_down = str(err)
                if err.kind is not None:
                    raise err  # it answers, with a fault of its own: that line, never "not answering"
                raise StoreUnavailableError(
                    f"The store is not answering: {err} (nothing written for "
                    f"{now - engine.failing_since:.0f} s). Pending files go as soon as it answers again."
                ) from err
            raise StoreUnavailableError(f"{rel}: {err} (after {attempt} attempts)") from err
        time.sleep(min(engine.settings.retry_backoff * 2 ** (attempt - 1), 10.0))

    def _holes_note(self, f: LocalFile) -> str | None:
        """For a large file with holes, where the store keeps every byte: its two sizes."""
        if f.size < URGENT_SMALL or getattr(self.engine.backend, "keeps_holes", False):
            return None
        try:
            st = os.stat(self.engine.abs(f.path))
        except OSError:
            return None
        on_disk = st.st_blocks * 512
        if on_disk >= st.st_size:
            return None
        return (
            f"a sparse file: {size_text(st.st_size)}, of which {size_text(on_disk)} on disk; this store "
            f"keeps every byte, holes too"
        )

    # -- deletions ---------------------------------------------------------------------------

    def delete_all(self, deleted: list[str]) -> None:
        self.progress.set_phase("deleting")
        for rel in deleted:
            self.delete_one(rel)
            self.progress.file_done(rel)

    def delete_one(self, rel: str) -> None:
        """A deletion reaches the store as a move into versions; a checkpoint that the run's
        retention removed (a newer complete one is here) is deleted outright, else versions
        would keep every checkpoint ever written."""
        engine, report = self.engine, self.report
        key = engine.store.file_key(rel)
        attempt = 0
        while True:
            try:
                engine.lease.fence()
                if engine.planner.retired_checkpoint(rel):
                    engine.backend.delete(key)
                else:
                    engine.kept_versions.retire(rel)
                report.deleted.append(rel)
                return
            except StoreUnavailableError as err:
                attempt += 1
                if attempt > engine.settings.retries or engine.store_down is not None:
                    report.errors.append(f"{rel}: {err} (after {attempt} attempts)")
                    engine.pending_set.failing(rel, 0, str(err))
                    return
                time.sleep(min(engine.settings.retry_backoff * 2 ** (attempt - 1), 10.0))
            except SyncError as err:
                report.errors.append(f"{rel}: {err}")
                engine.pending_set.failing(rel, 0, str(err))
                return


def _local_hash(path: str) -> str:
    try:
        return file_hash(path)
    except PermissionError as err:
        raise LocalFileError(f"cannot be read: {err.strerror}") from None


def batches_by_folder(files: list[LocalFile]) -> list[list[LocalFile]]:
    """Small files in batches of SMALL_BATCH from one folder each, the folders taking turns: the
    batches that run at the same time write into different folders, where each new name would
    otherwise wait for the others' (a file system adds one name to a folder at a time)."""
    folders: dict[str, list[LocalFile]] = {}
    for f in files:
        folders.setdefault(f.path.rpartition("/")[0], []).append(f)
    chunked = [
        [batch[i : i + SMALL_BATCH] for i in range(0, len(batch), SMALL_BATCH)]
        for batch in folders.values()
    ]
    return [
        chunks[turn]
        for turn in range(max((len(c) for c in chunked), default=0))
        for chunks in chunked
        if turn < len(chunks)
    ]
