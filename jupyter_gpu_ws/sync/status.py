"""Reporting the engine's status: the Sync section's figures and state (what the panel, the
magic and the CLI show), and what a persist leaves in the store.

Read-only: nothing here writes to the store or changes the engine.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from ..checkpoints.files import MANIFEST, folder_order
from ..store import Store
from ..store.backend import Backend
from ..store.faults import recall
from ..store.lease import Lease, LeaseKeeper, lease_status
from ..store.local import LocalBackend
from ..store.names import shown
from ..store.redact import redact
from ..store.versions import Versions
from .errors import StoreMissingError
from .ignore import IgnoreRules
from .index import SyncIndex
from .pending import PendingSet
from .plan import PassReport
from .progress import Progress
from .restore import CHECKPOINTS_PREFIX
from .scan import local_path
from .stall import StallWatch

# Faults the store answers with, whose fix is the user's: never called "store down".
USERS_TO_FIX = frozenset({"certificate", "bucket-missing", "credentials", "access-denied", "full"})
# The status names at most this many of the work directory's own ignore patterns.
SHOWN_RULES = 20
# The status names at most this many entries of the store that are skipped (and counts them all).
SHOWN_SKIPPED = 100


class StatusSettings(Protocol):
    @property
    def quota_bytes(self) -> int | None: ...


class EngineView(Protocol):
    """What the status reads of the engine (engine.py's SyncEngine); a protocol, so that this
    module does not import the engine that imports it."""

    @property
    def settings(self) -> StatusSettings: ...
    @property
    def backend(self) -> Backend: ...
    @property
    def store(self) -> Store: ...
    @property
    def index(self) -> SyncIndex: ...
    @property
    def lease(self) -> Lease: ...
    @property
    def keeper(self) -> LeaseKeeper: ...
    @property
    def kept_versions(self) -> Versions: ...
    @property
    def pending_set(self) -> PendingSet: ...
    @property
    def rules(self) -> IgnoreRules: ...
    @property
    def stall_watch(self) -> StallWatch: ...
    @property
    def running(self) -> tuple[Progress, PassReport] | None: ...
    @property
    def state(self) -> str: ...
    @property
    def last_sync(self) -> float | None: ...
    @property
    def last_error(self) -> str | None: ...
    @property
    def quota_warning(self) -> str | None: ...
    @property
    def left_out(self) -> dict[str, str]: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def read_only_reason(self) -> str | None: ...
    @property
    def lease_corrupt(self) -> bool: ...
    @property
    def store_down(self) -> str | None: ...
    @property
    def store_missing(self) -> str | None: ...
    @property
    def store_busy(self) -> bool: ...

    def same_disk(self) -> bool: ...


def engine_status(engine: EngineView) -> dict[str, Any]:
    """The engine's state in one dictionary (GET /gpuws/api/sync, `jupyter gpuws status`)."""
    files, size = engine.pending_set.totals()
    count, used = engine.index.count_and_bytes()
    running = engine.running
    lease = lease_status(engine.lease, engine.keeper)
    missing = engine.store_missing
    if missing is None and isinstance(engine.keeper.cause, StoreMissingError):
        missing = str(engine.keeper.cause)  # seen by the lease's thread before any pass
    if (
        missing is not None
        or engine.lease_corrupt
        or (lease["lease_error"] and not engine.lease.held)
    ):
        state = "error"
    elif engine.read_only:
        state = "read-only"
    elif engine.lease.held and lease["writes_start_in"]:
        state = "taking-over"  # whatever a pass tries meanwhile: it cannot write yet
    elif engine.lease.held and not engine.lease.valid() and engine.state != "syncing":
        state = "error"  # the lease could not be renewed in time: writes paused
    else:
        state = engine.state
    # The store is asked while a pass, the versions' pruning or a restore waits on it (the
    # start's restore too).
    stalled = engine.stall_watch.stalled_for(engine.store_busy)
    stall = None
    if stalled is not None and missing is None:
        state = "error"
        where = redact(engine.backend.description)
        stall = (
            f"The store {where} has not answered for {stalled:.0f} s: is the drive it is "
            "on still mounted and reachable? The sync waits for it and goes on by itself once it "
            "answers (remount the drive if it stays stuck; on Colab: "
            "drive.mount(..., force_remount=True))"
            if isinstance(engine.backend, LocalBackend)
            else f"The store at {where} is not answering ({stalled:.0f} s): the sync waits for "
            "it and goes on by itself once it answers"
        )
    problems = engine.pending_set.listing(0)
    # Links and special files of the store (store keys), and the files the last restore left
    # out (paths: compiled Python).
    skipped = {**engine.backend.skipped, **engine.left_out}

    def told(text: str | None) -> str | None:  # never a password or token of a URL
        return redact(text) if text else text

    paused = (
        "The workspace lease could not be renewed in time: writing is paused until the store "
        "answers again"
        if state == "error"
        and engine.lease.held
        and not engine.lease.valid()
        and not lease["writes_start_in"]
        else None
    )
    last_error = told(missing or stall or engine.last_error or lease["lease_error"] or paused)
    fault = recall(last_error)
    if fault is not None and last_error and last_error.endswith(fault.line):
        # The store's fault is the line, whatever met it first ("Cannot read the workspace
        # lease: …", "a.txt: …"): the same words as everywhere else it shows.
        last_error = told(fault.line)

    return {
        "state": state,
        "pending_files": files,
        "pending_bytes": size,
        "problem_files": problems["problems_total"],
        "progress": running[0].snapshot() if running is not None else None,
        "last_sync": engine.last_sync,
        "last_error": last_error,
        # What kind of store fault it is (store/faults.py: bucket-missing, credentials, …) and
        # the store's own words, for "Details"; null where it is not one.
        "error_kind": fault.kind if fault else ("stalled" if stall else None),
        "error_detail": fault.detail if fault else None,
        "read_only_reason": told(engine.read_only_reason),
        # Not while the store itself fails (a refused connection, wrong credentials): taking
        # over cannot write there either.
        "can_take_over": (engine.read_only or engine.lease_corrupt or missing is not None)
        and fault is None,
        # Down: not there, not answering or failing; not a fault whose fix is the user's (the
        # credentials, a certificate, a bucket), which the summary calls a sync error.
        "store_down": told(engine.store_down or missing or stall)
        if fault is None or fault.kind not in USERS_TO_FIX
        else None,
        # The store's folder (or this workspace's, synced here before) is not there: unavailable.
        "store_missing": missing is not None,
        "synced_files": count,
        "store_bytes": used,
        "versions_bytes": engine.kept_versions.bytes,
        "versions_count": engine.kept_versions.count,
        "quota_bytes": engine.settings.quota_bytes,
        "quota_warning": engine.quota_warning,
        "record_rebuilt": engine.index.rebuilt,
        "ignore_problems": list(engine.rules.problems),
        # The .gpuwsignore's patterns in force (the first SHOWN_RULES; their number).
        "ignore_rules": [shown(p) for p in engine.rules.own[:SHOWN_RULES]],
        "ignore_rules_count": len(engine.rules.own),
        "store": redact(engine.backend.description),
        # A store on the work directory's own disk goes with the machine: "saved" there is
        # not saved somewhere that outlives it, and the panel says so.
        "store_same_disk": engine.same_disk(),
        "workspace": engine.store.workspace,
        # The cipher and whether names are encrypted; never a key (null: a plain store).
        "encryption": getattr(engine.backend, "encryption", None),
        # Links and special files found in the store, never followed nor read (key → why).
        "store_skipped": {key: skipped[key] for key in sorted(skipped)[:SHOWN_SKIPPED]},
        "store_skipped_count": len(skipped),
        **lease,
    }


def stored_summary(workdir: str, index: SyncIndex, versions_bytes: int | None) -> dict[str, Any]:
    """What is now in the store, as a persist ends: files and bytes of the mirror and of the
    versions, and the newest checkpoint of each run whose manifest (written last) is there."""
    count, used = index.count_and_bytes()
    runs = []
    root = local_path(workdir, CHECKPOINTS_PREFIX.rstrip("/"))
    try:
        run_dirs = sorted(
            entry.name for entry in os.scandir(root) if entry.is_dir(follow_symlinks=False)
        )
    except OSError:
        run_dirs = []
    for run in run_dirs:
        try:
            orders = {
                e.name: order
                for e in os.scandir(os.path.join(root, run))
                if (order := folder_order(e.name)) is not None
            }
            folders = sorted(orders, key=orders.__getitem__, reverse=True)
        except OSError:
            continue
        for folder in folders:
            rel = f"{CHECKPOINTS_PREFIX}{run}/{folder}/{MANIFEST}"
            record = index.get(rel)
            try:
                st = os.stat(local_path(workdir, rel))
            except OSError:
                continue
            if record is not None and (record.size, record.mtime_ns) == (
                st.st_size,
                st.st_mtime_ns,
            ):
                runs.append({"run": run, "step": int(folder.split("-")[1]), "folder": folder})
                break
    return {"files": count, "bytes": used, "versions_bytes": versions_bytes, "checkpoints": runs}


def on_same_disk(backend: Backend, workdir: str) -> bool:
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
