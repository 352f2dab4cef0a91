"""Restore: the store's files brought into the work directory, most needed first, many at once.

The order is what a fresh machine needs first, each group done before the next starts:
1. for each run folder under `.gpuws/checkpoints/`, its newest complete checkpoint in the store
   (the `ckpt-*` folder with the highest step, then stamp, whose `manifest.json` is there), the
   manifest only once every other file of the folder is in place: a training kernel's
   `resume()` finds that checkpoint whole or not at all;
2. notebooks and code (`*.ipynb`, `*.py`) and small text (configuration, notes);
3. the rest, smallest first, so the largest come last (older checkpoints among them, each
   manifest again after the rest of its folder).

Speed: `concurrency` workers as for uploads, and on stores where each request waits for a
network round trip, many more small requests in flight (SMALL_IN_FLIGHT per worker), on
kept-alive connections; on plain S3, small files many at once (MANY_IN_FLIGHT per worker) from
at most MANY_LOOPS threads (backend.read_many: obstore's async reads), what that does not bring handed
to every worker again;
files from PARTS_FROM in parts of PART_SIZE fetched in parallel and written at their offsets into
one file: `concurrency` parts at once to begin with, and on stores reached over the network more
while the throughput keeps growing (parts_in_flight.py), at most MOST_PARTS_IN_FLIGHT.
Each file lands whole: written unnamed (or under a hidden temporary name), its size checked (and
its MD5 where the store's ETag is one), then linked under its name, never over a file that is
there: a local file that differs stays, and the store's copy lands beside it as
`name.conflict-<time>.ext`.

`RestoreState` says, while a restore runs, which checkpoint of each run it brings and whether
that one is complete here yet, for `SyncEngine.fetch_checkpoint` (the server's side of a
kernel's `resume()`) to wait on.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..checkpoints.files import MANIFEST, folder_order
from ..diskio import pwrite_all, waits_on_disk
from ..store.backend import PART_SUFFIX, Backend, RemoteFile, md5_of
from ..store.hashing import fd_hash, file_hash
from ..store.names import shown
from .errors import CancelledError, StoreUnavailableError, SyncError
from .ignore import is_bytecode
from .index import Record, SyncIndex
from .landing import IncomingFile, conflict_name
from .parts_in_flight import PartsInFlight

log = logging.getLogger(__name__)

# Where kernels write their checkpoints, relative to the work directory (checkpoints/tracker.py).
CHECKPOINTS_PREFIX = ".gpuws/checkpoints/"
# Notebooks and code, whatever their size; small text files of these kinds go with them.
CODE_SUFFIXES = (".ipynb", ".py")
TEXT_SUFFIXES = (".md", ".txt", ".json", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".rst", ".sh")
SMALL_TEXT = 1 << 20
# Files from this size come in parts of PART_SIZE, several at once, written at their offsets.
PART_SIZE = 32 << 20
PARTS_FROM = 2 * PART_SIZE
# Parts of large files in flight at most, however the throughput grows (on a store reached over
# the network; a local-folder store keeps `concurrency`). 32 connections at S3's ~100 MB/s each
# are ~3.2 GB/s, more than a 25 Gbit/s link carries; each is a connection and a thread here.
MOST_PARTS_IN_FLIGHT = 32
# On stores where each request waits for a round trip, small requests in flight per worker:
# a small file costs one round trip and little bandwidth, so latency, not bandwidth, sets
# their pace (measured: 2,000 files with 20 ms added took 6.4 s at 8 in flight, 1.4 s at 64).
SMALL_IN_FLIGHT = 8
# Files under this size report their bytes once they are in, not chunk by chunk.
QUIET_BELOW = 1 << 20
# Small files are handed to the workers in batches of at most this many (fewer hand-overs
# between threads); where each request waits for a round trip, in smaller ones, so that the
# requests in flight are spread over the files still to come.
BATCH_LOCAL = 32
BATCH_ROUND_TRIPS = 4
# Restored files are recorded in batches of this many (and each large one at once), so that a
# pass running meanwhile finds them recorded instead of sending them back (a larger batch
# rewrites fewer of the record's pages: 256 cost 15,000 page writes for 20,000 files).
RECORD_BATCH = 1024
# Where the backend fetches small files many at once from one thread (plain S3: read_many),
# at most this many workers do so at a time, each with its share of the concurrency x
# MANY_IN_FLIGHT requests in flight, in batches of at most MANY_BATCH files (the others wait:
# with a thread per request, handing the GIL from thread to thread at every system call cost
# a quarter of the client's CPU). There a request in flight costs a connection, not a thread,
# so more are: with 20 ms added to each round trip, 5,000 small files took 2.9-3.4 s at 64 in
# flight, 2.2 s at 128 (`s5cmd cp`, 256 workers: 2.6-2.7 s); bare, 1.6-1.7 s and 1.5 s.
MANY_LOOPS = 2
MANY_BATCH = 256
MANY_IN_FLIGHT = 16
# Mode bits a restored file never keeps: execute, set-id, sticky.
NOT_DATA = 0o7111


@dataclass
class RunCheckpoint:
    """One run folder's newest complete checkpoint in the store, as a restore brings it."""

    checkpoint: str  # its folder, relative to the work directory
    local: bool = False  # complete here: every file in place, the manifest last
    error: str | None = None  # why the restore could not make it complete here


class RestoreState:
    """The restore in progress, as `resume()` needs it: per run folder (relative to the work
    directory, e.g. `.gpuws/checkpoints/train.ipynb`) its newest complete checkpoint in the store
    and whether that one is complete here. Every change is announced on `changed`."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.running = False
        self.planned = (
            False  # the store is listed: `runs` holds every checkpoint this restore brings
        )
        self.runs: dict[str, RunCheckpoint] = {}

    def begin(self) -> None:
        with self.changed:
            self.running, self.planned, self.runs = True, False, {}
            self.changed.notify_all()

    def plan(self, newest: dict[str, str]) -> None:
        with self.changed:
            self.runs = {run: RunCheckpoint(folder) for run, folder in newest.items()}
            self.planned = True
            self.changed.notify_all()

    def settle(self, run: str, error: str | None = None) -> None:
        """`run`'s checkpoint is complete here (or, with `error`, cannot be made so)."""
        with self.changed:
            entry = self.runs.get(run)
            if entry is not None:
                entry.local, entry.error = error is None, error
            self.changed.notify_all()

    def settle_rest(self, reason: str) -> None:
        """Every checkpoint not yet settled will not come: say why."""
        with self.changed:
            for entry in self.runs.values():
                if not entry.local and entry.error is None:
                    entry.error = reason
            self.changed.notify_all()

    def end(self) -> None:
        with self.changed:
            self.running = False
            self.changed.notify_all()

    def wait_for(self, run: str, deadline: float | None, cancel: threading.Event | None) -> bool:
        """Wait while a restore runs that is still bringing `run`'s newest checkpoint. False
        when `deadline` (time.monotonic) passed first; CancelledError when `cancel` is set."""
        with self.changed:
            while self.running:
                if self.planned:
                    entry = self.runs.get(run)
                    if entry is None or entry.local or entry.error:
                        return True  # none to bring, or it is here (or cannot come)
                if cancel is not None and cancel.is_set():
                    raise CancelledError("Cancelled while waiting for the restore")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                # A cancel is not announced on `changed`: look again at least every 0.2 s.
                self.changed.wait(0.2 if left is None else min(left, 0.2))
            return True

    def describe(self) -> dict[str, Any]:
        with self.changed:
            return {
                "running": self.running,
                "runs": {
                    run: {"checkpoint": e.checkpoint, "local": e.local, "error": e.error}
                    for run, e in self.runs.items()
                },
            }


# -- what comes first ---------------------------------------------------------------------------


def checkpoint_folder(rel: str) -> tuple[str, str] | None:
    """(run folder, checkpoint folder) of a file inside a `ckpt-*` folder, else None."""
    if not rel.startswith(CHECKPOINTS_PREFIX):
        return None
    parts = rel[len(CHECKPOINTS_PREFIX) :].split("/")
    if len(parts) < 3 or folder_order(parts[1]) is None:
        return None
    run = CHECKPOINTS_PREFIX + parts[0]
    return run, f"{run}/{parts[1]}"


def newest_checkpoints(paths: Iterable[str]) -> dict[str, str]:
    """Per run folder, its newest complete checkpoint among `paths`: the `ckpt-*` folder with the
    highest (step, stamp, n) whose manifest is one of the paths."""
    best: dict[str, tuple[tuple[int, str, int], str]] = {}
    for rel in paths:
        found = checkpoint_folder(rel)
        if found is None or rel != f"{found[1]}/{MANIFEST}":
            continue
        run, folder = found
        order = folder_order(folder.rpartition("/")[2])
        assert order is not None
        if run not in best or order > best[run][0]:
            best[run] = (order, folder)
    return {run: folder for run, (_, folder) in best.items()}


def is_code(rel: str, size: int) -> bool:
    """Notebooks, code and small text: what a user opens first on a fresh machine."""
    if rel.startswith(CHECKPOINTS_PREFIX):
        return False
    name = rel.lower()
    return name.endswith(CODE_SUFFIXES) or (name.endswith(TEXT_SUFFIXES) and size <= SMALL_TEXT)


def restore_phases(files: dict[str, RemoteFile], newest: dict[str, str]) -> list[list[str]]:
    """The paths in the order of the module's docstring: newest checkpoints (largest first, so
    their parts keep every worker busy), notebooks and code, the rest (smallest first)."""
    first_folders = set(newest.values())
    checkpoints, code, rest = [], [], []
    for rel, remote in files.items():
        found = checkpoint_folder(rel)
        if found is not None and found[1] in first_folders:
            checkpoints.append(rel)
        elif is_code(rel, remote.size):
            code.append(rel)
        else:
            rest.append(rel)
    checkpoints.sort(key=lambda rel: (-files[rel].size, rel))
    code.sort(key=lambda rel: (files[rel].size, rel))
    rest.sort(key=lambda rel: (files[rel].size, rel))
    return [phase for phase in (checkpoints, code, rest) if phase]


# -- the job --------------------------------------------------------------------------------------


@dataclass
class RestoreReport:
    restored: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)  # the conflict copies written
    already_present: int = 0
    bytes_restored: int = 0
    errors: list[str] = field(default_factory=list)
    bytecode: list[str] = field(default_factory=list)  # compiled Python in the store, not brought


class _Folder:
    """A checkpoint folder being restored: its manifest waits until the rest is in place."""

    def __init__(self, path: str, run: str | None) -> None:
        self.path = path
        self.run = run  # set when it is the run's newest: RestoreState follows it
        self.manifest: _Download | None = None
        self.left = 0  # its other files not yet settled
        self.failed: str | None = None  # why one of them is not in place


class _Download:
    """One file coming from the store: whole, or in parts that several workers fetch at once."""

    def __init__(
        self, rel: str, remote: RemoteFile, target: str, key: str, folder: _Folder | None
    ) -> None:
        self.rel = rel
        self.remote = remote
        self.target = target
        self.key = key
        self.folder = folder
        self.parts = max(1, -(-remote.size // PART_SIZE)) if remote.size >= PARTS_FROM else 1
        self.left = self.parts
        self.lock = threading.Lock()
        self.started = False
        self.skip: str | None = None  # "present": nothing to fetch; "gone": not in the store
        self.incoming: IncomingFile | None = None
        self.written = 0
        self.counted = 0  # bytes reported to the progress
        self.error: str | None = None
        self.ordinary = False  # not for read_many (it was given back by it once)

    def fail(self, message: str) -> None:
        with self.lock:
            self.error = self.error or message


class _Work:
    """The job's workers and what they have to do: batches of (file, part) taken in order,
    a released manifest put in front; `wait()` returns once every batch handed in is done."""

    def __init__(self, workers: int, run: Callable[[list[tuple[_Download, int]]], None]) -> None:
        self._run = run
        self._queue: deque[list[tuple[_Download, int]] | None] = deque()
        self._changed = threading.Condition()
        self._outstanding = 0
        self._threads = [
            threading.Thread(target=self._work, name=f"gpuws-restore-{n}", daemon=True)
            for n in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def add(self, batch: list[tuple[_Download, int]], first: bool = False) -> None:
        with self._changed:
            self._outstanding += 1
            if first:
                self._queue.appendleft(batch)
            else:
                self._queue.append(batch)
            self._changed.notify()

    def wait(self) -> None:
        with self._changed:
            while self._outstanding:
                self._changed.wait()

    def close(self) -> None:
        with self._changed:
            self._queue.extend([None] * len(self._threads))
            self._changed.notify_all()
        for thread in self._threads:
            thread.join()

    def _work(self) -> None:
        while True:
            with self._changed:
                while not self._queue:
                    self._changed.wait()
                batch = self._queue.popleft()
            if batch is None:
                return
            try:
                self._run(batch)
            except BaseException:  # noqa: BLE001 - a bug must not stop the worker or hang the phase
                log.exception("Restore of %s failed", ", ".join(d.rel for d, _ in batch[:3]))
            with self._changed:
                self._outstanding -= 1
                if not self._outstanding:
                    self._changed.notify_all()


class _PartsGate:
    """Lets in at most `controller.limit` parts at once, a limit that may change while they run;
    the bytes they receive are fed to the controller, each with whether parts were waiting."""

    def __init__(
        self, controller: PartsInFlight, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.controller = controller
        self._clock = clock
        self._changed = threading.Condition()
        self._in_flight = 0
        self._waiting = 0

    def __enter__(self) -> None:
        with self._changed:
            self._waiting += 1
            while self._in_flight >= self.controller.limit:
                self._changed.wait()
            self._waiting -= 1
            self._in_flight += 1

    def __exit__(self, *_: object) -> None:
        with self._changed:
            self._in_flight -= 1
            self._changed.notify()

    def received(self, n: int) -> None:
        if self.controller.settled:
            return
        with self._changed:
            before = self.controller.limit
            after = self.controller.add(n, self._clock(), saturated=self._waiting > 0)
            if after > before:
                self._changed.notify(after - before)

    def describe(self) -> str:
        controller = self.controller
        state = "settled" if controller.settled else "still growing"
        levels = (
            ", ".join(f"{level}: {rate / 1e6:.0f}" for level, rate in controller.history)
            or "none judged"
        )
        return f"{controller.limit} parts in flight at the end, {state} (MB/s measured per level: {levels})"


class RestoreJob:
    """Brings a set of the store's files into the work directory (see the module's docstring)."""

    def __init__(
        self,
        workdir: str,
        backend: Backend,
        index: SyncIndex,
        *,
        concurrency: int,
        retries: int,
        retry_backoff: float,
        clock: Callable[[], float],
        progress: Any,
        cancel: threading.Event | None = None,
        limiter: Any = None,
        state: RestoreState | None = None,
    ) -> None:
        self.workdir = workdir
        self.backend = backend
        self.index = index
        self.concurrency = max(1, concurrency)
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.clock = clock
        self.progress = progress
        self.cancel = cancel or threading.Event()
        self.limiter = limiter
        self.state = state
        self.stop = threading.Event()  # set on cancel, or on a full local disk
        self.stop_reason: str | None = None
        self.report = RestoreReport()
        self._lock = threading.Lock()
        self._records: list[Record] = []
        self._folders_made: set[str] = set()
        self._parts: _PartsGate | None = None  # made in run(), once the number of workers is known
        self._stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock()))
        self._work: _Work | None = None
        self._many = False
        self._in_flight = 1
        self._loops = threading.Semaphore(MANY_LOOPS)
        self._here = False  # whole files copied by the restore's own thread (see _hand_in)
        self._recorded = index.count_and_bytes()[0] > 0

    # -- running -------------------------------------------------------------------------------

    def run(
        self, files: dict[str, RemoteFile], phases: list[list[str]], newest: dict[str, str]
    ) -> RestoreReport:
        """Restore `files` phase by phase; in each, a checkpoint folder's manifest comes once the
        rest of its folder is in place. `newest`: run folder → its newest checkpoint folder, whose
        progress `state` follows."""
        self.progress.plan(len(files), sum(f.size for f in files.values()), "restoring")
        tracked = {folder: run for run, folder in newest.items()}
        folders: dict[str, _Folder] = {}
        downloads: dict[str, _Download] = {}
        for rel, remote in files.items():
            found = checkpoint_folder(rel)
            folder = None
            if found is not None:
                folder = folders.get(found[1])
                if folder is None:
                    folder = folders[found[1]] = _Folder(found[1], tracked.get(found[1]))
            # Read by the key the listing gave: another program may have written a name raw
            # that this codec would escape (store/names.py).
            download = downloads[rel] = _Download(
                rel, remote, self._target(rel), remote.key, folder
            )
            if folder is not None:
                if rel == f"{folder.path}/{MANIFEST}":
                    folder.manifest = download
                else:
                    folder.left += 1
        # Manifests that wait for the rest of their folder, decided before any file is handed
        # in (a folder's count falls as its files land, while the phase is still being handed in).
        held = {id(f.manifest) for f in folders.values() if f.manifest is not None and f.left}
        round_trips = getattr(self.backend, "round_trips", True)
        tasks = sum(d.parts for d in downloads.values())
        workers = min(self.concurrency * (SMALL_IN_FLIGHT if round_trips else 1), max(1, tasks))
        cap = BATCH_ROUND_TRIPS if round_trips else BATCH_LOCAL
        # Small files many at once from one thread where the backend can (plain S3).
        reads_many = getattr(self.backend, "reads_many", None)
        self._many = (
            round_trips and self.limiter is None and reads_many is not None and reads_many()
        )
        self._here = not round_trips
        if self._many:
            cap = MANY_BATCH
            self._in_flight = max(1, self.concurrency * MANY_IN_FLIGHT // MANY_LOOPS)
        # Where each request crosses a network, parts in flight grow with throughput, up to as
        # many as there are workers to fetch them.
        most = (
            max(self.concurrency, min(MOST_PARTS_IN_FLIGHT, workers))
            if round_trips
            else self.concurrency
        )
        self._parts = _PartsGate(PartsInFlight(self.concurrency, most))
        self._work = work = _Work(workers, self._fetch_batch)
        try:
            for phase in phases:
                if self._stopped():
                    break
                # Batches small enough that every worker (every loop) gets several, a short phase too.
                size = max(1, min(cap, len(phase) // ((MANY_LOOPS if self._many else workers) * 4)))
                batch: list[tuple[_Download, int]] = []
                for rel in phase:
                    download = downloads[rel]
                    if id(download) in held:
                        continue  # handed in once the rest of its folder is in place
                    if download.parts > 1:
                        if batch:  # what comes before it goes first
                            work.add(batch)
                            batch = []
                        for part in range(download.parts):
                            work.add([(download, part)])  # every worker may take a part
                        continue
                    batch.append((download, 0))
                    if len(batch) == size:
                        self._hand_in(batch)
                        batch = []
                if batch:
                    self._hand_in(batch)
                work.wait()
                self._flush_records()
        finally:
            work.close()
        if any(d.parts > 1 for d in downloads.values()):
            log.info("Restore: %s", self._parts.describe())
        self._flush_records()
        if self.state is not None:
            self.state.settle_rest(self.stop_reason or "the restore ended without it")
        self.progress.phase = "done"
        return self.report

    def _hand_in(self, batch: list[tuple[_Download, int]]) -> None:
        """A batch of whole files: to the workers, or on a local disk copied here and now, one
        after the other, while the workers fetch the large files' parts, until the files are
        seen to wait on the disk (diskio.waits_on_disk); then to the workers from there on."""
        if self._here:
            started = time.monotonic()
            self._fetch_batch(batch)
            nbytes = sum(d.remote.size for d, _ in batch)
            if waits_on_disk(time.monotonic() - started, len(batch), nbytes):
                self._here = False
        else:
            assert self._work is not None
            self._work.add(batch)

    def _target(self, rel: str) -> str:
        if os.sep == "/":
            return f"{self.workdir}/{rel}"  # a path join per file costs more than the copy of a small one
        return os.path.join(self.workdir, *rel.split("/"))

    def _stopped(self) -> bool:
        if self.cancel.is_set() and not self.stop.is_set():
            self.stop_reason = self.stop_reason or "cancelled"
            self.stop.set()
        return self.stop.is_set()

    def _release(self, manifest: _Download) -> None:
        """A manifest whose folder is in place: next in line, before anything else waiting."""
        assert self._work is not None
        self._work.add([(manifest, 0)], first=True)

    # -- a batch -------------------------------------------------------------------------------

    def _fetch_batch(self, batch: list[tuple[_Download, int]]) -> None:
        """One worker's batch: where the backend can, its small whole files many at once from
        this thread (backend.read_many), and what that did not bring, and the rest, one by one."""
        if not self._many or len(batch) == 1 or batch[0][0].ordinary:
            for d, part in batch:
                self._fetch_part(d, part)
            return
        small: list[tuple[str, str | None, _Download]] = []
        landed: set[int] = set()

        def land(d: _Download, body: bytes) -> None:
            landed.add(id(d))
            self._landed(d, body)

        other: list[tuple[_Download, int]] = []
        with self._loops:  # the batch's turn: only then are its files looked at
            for d, part in batch:
                if (
                    d.parts == 1
                    and d.remote.size < QUIET_BELOW
                    and not d.ordinary
                    and not self._stopped()
                ):
                    self._start(d, open_file=False)
                    if d.skip is None and d.error is None:
                        small.append((d.key, d.remote.etag, d))
                        continue
                other.append((d, part))
            if small:
                try:
                    self.backend.read_many(small, land, self._in_flight, self._stopped)  # type: ignore[attr-defined]
                except Exception:  # noqa: BLE001 - a bug there must not lose the batch: the rest goes the ordinary way
                    log.exception("Restore: fetching many at once failed")
        left = [d for _, _, d in small if id(d) not in landed]
        if len(left) > BATCH_ROUND_TRIPS and self._work is not None and not self._stopped():
            # Many not brought (a store that went silent or refuses): the ordinary way, spread
            # over every worker again, not one after the other here.
            for d in left:
                d.ordinary = True
            for n in range(0, len(left), BATCH_ROUND_TRIPS):
                self._work.add([(d, 0) for d in left[n : n + BATCH_ROUND_TRIPS]])
            left = []
        other.extend((d, 0) for d in left)
        for d, part in other:
            self._fetch_part(
                d, part
            )  # skipped, large, or not brought above: the ordinary way (or stopped)

    def _landed(self, d: _Download, body: bytes) -> None:
        """A small file's whole body, from read_many: written, counted, done."""
        self._start(d)
        if d.incoming is not None and d.error is None:
            try:
                pwrite_all(d.incoming.fd, memoryview(body), 0)
                d.written = len(body)
            except OSError as err:
                d.fail(self._local_error(err))
        self._count(d, len(body))
        self._part_done(d)

    # -- one part of one file ------------------------------------------------------------------

    def _start(self, d: _Download, open_file: bool = True) -> None:
        """Before the first part of `d` is fetched, once: see _prepare; then, unless it is
        skipped or `open_file` is False (read_many opens it when its body is in: a batch
        waiting for its turn holds no open file), the file it is written into."""
        with d.lock:
            try:
                if not d.started:
                    d.started = True
                    self._prepare(d)
                if open_file and d.incoming is None and d.skip is None and d.error is None:
                    self._open(d)
            except OSError as err:
                d.error = d.error or self._local_error(err)
            except Exception as err:  # noqa: BLE001 - this file's error, reported
                log.exception("Restore of %s failed", d.rel)
                d.error = d.error or str(err)

    def _fetch_part(self, d: _Download, part: int) -> None:
        if self._stopped():
            d.fail(self.stop_reason or "stopped")
            return self._part_done(d)
        self._start(d)
        if d.skip is None and d.error is None:
            offset = part * PART_SIZE
            length = None if d.parts == 1 else min(PART_SIZE, d.remote.size - offset)
            try:
                if length is not None:
                    assert self._parts is not None
                    with self._parts:  # large files: as many parts at once as the gate lets in
                        n = self._fetch(d, offset, length, self._parts.received)
                else:
                    n = self._fetch(d, 0, None)
                with d.lock:
                    d.written += n
            except FileNotFoundError:
                with d.lock:
                    d.skip = d.skip or "gone"
            except CancelledError:
                d.fail("cancelled")
            except OSError as err:
                d.fail(self._local_error(err))
            except SyncError as err:
                d.fail(str(err))
            except Exception as err:  # noqa: BLE001 - any other failure is this file's error, reported
                log.exception("Restore of %s failed", d.rel)
                d.fail(str(err) or type(err).__name__)
        self._part_done(d)

    def _prepare(self, d: _Download) -> None:
        """Before the first byte (under the file's lock): skip a file recorded as synced and
        unchanged here; else make its folder and the file it is written into."""
        if PART_SUFFIX in d.rel or is_bytecode(d.rel):
            # A temporary name of an interrupted write, or bytecode (each machine compiles its
            # own: ignore.py): never a file of the user's that a restore brings.
            d.skip = "outside"
            if PART_SUFFIX not in d.rel:
                with self._lock:
                    self.report.bytecode.append(d.rel)
            return
        unfit = _unfit(d.rel)
        if unfit is not None:
            d.error = unfit  # listed with the reason; the other files go on
            return
        st = None
        if self._recorded:  # with no record at all (a fresh machine) no file here can be skipped
            try:
                st = os.lstat(d.target)
            except (FileNotFoundError, NotADirectoryError):
                st = None  # missing, or a file where its folder should be: the link below says so
        if st is not None and _regular(st):
            record = self.index.get(d.rel)
            if record is not None and (record.size, record.mtime_ns) == (
                st.st_size,
                st.st_mtime_ns,
            ):
                d.skip = "present"
                return
        folder = os.path.dirname(d.target)
        if folder not in self._folders_made:
            why = self._make_folder(os.path.dirname(d.rel))
            if why is not None:
                d.error = why  # listed with the reason; nothing is written through a link
                return
            self._folders_made.add(folder)

    def _make_folder(self, rel: str) -> str | None:
        """Make the folder `rel` (relative) one part at a time, each a real folder: never
        through a link (the user's own, to a disk elsewhere, or one a restore made), so no file
        of the store lands outside the work directory or anywhere but under its own name. Why
        not, or None. (As in LocalBackend, a link swapped in between this look and the write
        is the race accepted.)"""
        path = self.workdir
        for part in rel.split("/") if rel else []:
            path = os.path.join(path, part)
            if path in self._folders_made:
                continue
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                try:
                    os.mkdir(path)
                except FileExistsError:
                    st = os.lstat(path)  # made meanwhile (another worker): looked at below
                else:
                    self._folders_made.add(path)
                    continue
            if stat.S_ISLNK(st.st_mode):
                return (
                    f"{shown(os.path.relpath(path, self.workdir))} is a symbolic link here: "
                    "the store's file is not written through it"
                )
            if not stat.S_ISDIR(st.st_mode):
                return (
                    f"{shown(os.path.relpath(path, self.workdir))} is a file here, where the "
                    "store has a folder: the store's file is not restored"
                )
            self._folders_made.add(path)
        return None

    def _open(self, d: _Download) -> None:
        """The file `d` is written into, unnamed until it is whole."""
        d.incoming = IncomingFile(d.target, shared=d.parts > 1)
        if d.parts > 1:
            os.ftruncate(d.incoming.fd, d.remote.size)  # parts land at their offsets, in any order

    def _fetch(
        self,
        d: _Download,
        offset: int,
        length: int | None,
        received: Callable[[int], None] | None = None,
    ) -> int:
        """One read_into with retries (doubling back-off) on a store that fails for now; bytes
        reported by a failed attempt are taken back. `received` is told of each chunk (a part's
        bytes, for the gate that judges the throughput)."""
        assert d.incoming is not None
        if length is None and d.remote.size < QUIET_BELOW:
            return self._fetch_small(d)
        attempt = 0
        while True:
            counted = 0

            def progress(n: int) -> None:
                nonlocal counted
                if self.stop.is_set() or self.cancel.is_set():
                    raise CancelledError("cancelled")
                if self.limiter is not None and n > 0:
                    self.limiter.take(n)
                counted += n
                self._count(d, n)
                if received is not None:
                    received(n)

            try:
                return self.backend.read_into(
                    d.key, d.incoming.fd, offset, length, progress, d.remote.etag
                )
            except StoreUnavailableError as err:
                self._count(d, -counted)
                attempt += 1
                if attempt > self.retries:
                    raise StoreUnavailableError(f"{err} (after {attempt} attempts)") from err
                time.sleep(min(self.retry_backoff * 2 ** (attempt - 1), 10.0))
            except BaseException:
                self._count(d, -counted)
                raise

    def _fetch_small(self, d: _Download) -> int:
        """A small file: the same with its bytes counted once it is done (no callback per
        chunk, and the cancel looked at before it starts: it is over in a moment)."""
        assert d.incoming is not None
        attempt = 0
        while True:
            if self.stop.is_set() or self.cancel.is_set():
                raise CancelledError("cancelled")
            if self.limiter is not None:
                self.limiter.take(d.remote.size)
            try:
                n = self.backend.read_into(d.key, d.incoming.fd, 0, None, None, d.remote.etag)
            except StoreUnavailableError as err:
                attempt += 1
                if attempt > self.retries:
                    raise StoreUnavailableError(f"{err} (after {attempt} attempts)") from err
                time.sleep(min(self.retry_backoff * 2 ** (attempt - 1), 10.0))
                continue
            return n  # counted once the file is done (_part_done): one call, not two

    def _count(self, d: _Download, n: int) -> None:
        with d.lock:
            d.counted += n
        self.progress.add_bytes(n)

    def _part_done(self, d: _Download) -> None:
        with d.lock:
            d.left -= 1
            last = d.left == 0
        if last:
            try:
                ok = self._finish(d)
            except Exception as err:  # noqa: BLE001 - reported as this file's error, never lost
                if isinstance(err, OSError):
                    message = self._local_error(err)
                else:
                    message = str(err)
                    if not isinstance(err, SyncError):
                        log.exception("Restore of %s failed", d.rel)
                ok = False
                d.fail(message)
                with self._lock:
                    self.report.errors.append(f"{d.rel}: {message}")
            finally:
                if d.incoming is not None:
                    d.incoming.close()
                # Its bytes not counted yet (a small file's, all of them): the bar ends full,
                # whatever happened.
                self.progress.file_done(d.rel, d.remote.size - d.counted)
            self._settled(d, ok)

    # -- a complete file -----------------------------------------------------------------------

    def _finish(self, d: _Download) -> bool:
        """Put a complete file in place; True when the store's copy is now here under its name."""
        if d.skip == "present":
            with self._lock:
                self.report.already_present += 1
            return True
        if d.skip is not None:
            return False  # a temporary name, or gone from the store since the listing
        if d.error is not None:
            if d.error != "cancelled":
                with self._lock:
                    self.report.errors.append(f"{d.rel}: {d.error}")
            return False
        assert d.incoming is not None
        fd = d.incoming.fd
        if d.written != d.remote.size:
            raise StoreUnavailableError(f"got {d.written} of {d.remote.size} bytes")
        if d.parts > 1:
            tag = md5_of(d.remote.etag)
            if tag is not None and _md5(fd, d.remote.size) != tag:
                raise StoreUnavailableError("the bytes received do not match the store's checksum")
        if d.remote.mtime:
            os.utime(fd, (d.remote.mtime, d.remote.mtime))
        st = os.fstat(fd)
        if st.st_mode & NOT_DATA:
            # Data, never a program: no execute (nor set-id) bit, whatever a backend may have
            # kept (one that copies the stored mode onto the file, as shutil.copy2 or rsync
            # would); a hook under .git/hooks/ needs the user's own chmod to run
            # (docs/security.md). A chmod leaves the size and mtime recorded below as they are.
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o666)
        try:
            d.incoming.link(
                d.target
            )  # fails if a file of that name is there (or was made meanwhile)
        except FileExistsError:
            return self._beside(d, st)
        with self._lock:
            self._records.append(Record(d.rel, st.st_size, st.st_mtime_ns, None, self.clock()))
            due = d.parts > 1 or len(self._records) >= RECORD_BATCH
            self.report.restored.append(d.rel)
            self.report.bytes_restored += st.st_size
        if due:
            self._flush_records()
        return True

    def _beside(self, d: _Download, st: os.stat_result) -> bool:
        """A file is there already: the same bytes are recorded as synced; different ones stay,
        and the store's copy lands beside them as name.conflict-<time>.ext."""
        assert d.incoming is not None
        try:
            local = os.lstat(d.target)
        except FileNotFoundError:
            local = None
        if local is not None and _regular(local) and local.st_size == st.st_size:
            digest = fd_hash(d.incoming.fd)
            if file_hash(d.target) == digest:
                self._record(Record(d.rel, local.st_size, local.st_mtime_ns, digest, self.clock()))
                with self._lock:
                    self.report.already_present += 1
                return True
        n = 1
        while True:
            name = conflict_name(d.target, self._stamp, n)
            try:
                d.incoming.link(name)
                break
            except FileExistsError:
                n += 1
        with self._lock:
            self.report.conflicts.append(os.path.relpath(name, self.workdir).replace(os.sep, "/"))
        return False

    def _settled(self, d: _Download, ok: bool) -> None:
        """A file of a checkpoint folder is done: the last of them releases the manifest, or,
        if one is not in place, holds it back for good (a folder never looks complete here
        unless it is); the manifest done, the run's checkpoint is complete here."""
        folder = d.folder
        if folder is None:
            return
        if d is folder.manifest:
            if folder.run is not None and self.state is not None:
                if ok:
                    self.state.settle(folder.run)
                else:
                    self.state.settle(
                        folder.run, self._why(d) or "its manifest could not be restored"
                    )
            return
        with self._lock:
            folder.left -= 1
            if not ok and folder.failed is None:
                folder.failed = self._why(d) or f"{d.rel} was not restored"
            release = folder.left == 0 and folder.manifest is not None
        if not release:
            return
        manifest = folder.manifest
        assert manifest is not None
        if folder.failed is None and not self._stopped():
            self._release(manifest)
            return
        # Held back: the folder stays without its manifest, an incomplete checkpoint.
        reason = folder.failed or self.stop_reason or "stopped"
        if folder.failed is not None:
            with self._lock:
                self.report.errors.append(f"{manifest.rel}: not restored, because {folder.failed}")
        self.progress.file_done(manifest.rel, manifest.remote.size)
        if folder.run is not None and self.state is not None:
            self.state.settle(folder.run, reason)

    def _why(self, d: _Download) -> str | None:
        if d.error is not None:
            return f"{d.rel}: {d.error}"
        if d.skip == "gone":
            return f"{d.rel} is no longer in the store"
        if d.skip is None and d.incoming is not None:
            return f"{d.rel} differs here (the store's copy is beside it)"
        return None

    def _local_error(self, err: OSError) -> str:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            # Every next file would fail alike: stop at the first.
            self.stop_reason = "the work directory's disk is full"
            self.stop.set()
            return "the work directory's disk is full"
        return f"cannot write here: {err.strerror or err}"

    # -- records -------------------------------------------------------------------------------

    def _record(self, record: Record, large: bool = False) -> None:
        with self._lock:
            self._records.append(record)
            due = large or len(self._records) >= RECORD_BATCH
        if due:
            self._flush_records()

    def _flush_records(self) -> None:
        with self._lock:
            records, self._records = self._records, []
        if records:
            self.index.put_many(records)


ENVIRONMENT_LEFT_OUT = (
    "in a Python environment in the store, never restored: environments are rebuilt from "
    "the environment snapshot"
)


def environments(paths: Iterable[str]) -> set[str]:
    """The folders of `paths` (the store's listing) that hold a Python virtual environment or
    a conda environment (a `pyvenv.cfg`, a `conda-meta/` folder): the sync never sends one (it
    is rebuilt from the environment snapshot), so one in the store was put there by someone
    else, and its `.pth` files and scripts would run: never restored."""
    roots = set()
    for rel in paths:
        folder, _, name = rel.rpartition("/")
        if name == "pyvenv.cfg" and folder:
            roots.add(folder)
        elif "/conda-meta/" in f"/{rel}":
            root = f"/{rel}".split("/conda-meta/")[0].lstrip("/")
            if root:
                roots.add(root)
    return roots


def in_environment(rel: str, roots: set[str]) -> bool:
    parts = rel.split("/")
    return any("/".join(parts[:depth]) in roots for depth in range(1, len(parts)))


def _unfit(rel: str) -> str | None:
    """Why a path from the store cannot be a file of the work directory (None: it can). An
    empty, `.` or `..` part would lead elsewhere (checked by parts: far cheaper per file than
    normalising the path), and no file name holds a NUL byte. Whatever else the file system
    here refuses (a name too long for it) fails when the file is written, as that file's error."""
    framed = f"/{rel}/"
    if "//" in framed or "/./" in framed or "/../" in framed:
        return "not restored: its name in the store is not a path inside the work directory"
    if "\0" in rel:
        return "not restored: its name in the store holds a NUL byte, which no file name can"
    return None


def _regular(st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode)


def _md5(fd: int, size: int) -> str:
    digest = hashlib.md5()
    offset = 0
    while offset < size:
        chunk = os.pread(fd, min(PART_SIZE, size - offset), offset)
        if not chunk:
            break
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()
