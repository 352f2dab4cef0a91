"""The storage sync engine: mirrors the work directory to a store (jupyter_gpu_ws.store). The
store's backends are re-exported here so that a caller of the engine needs one import."""

from ..store import Backend, FsspecBackend, LocalBackend, Store, open_backend
from .engine import PassReport, Progress, RestoreReport, SyncEngine, SyncSettings
from .errors import (
    CancelledError,
    DeletionGuardError,
    LeaseHeldError,
    QuotaExceededError,
    StoreConfigError,
    StoreFullError,
    StoreUnavailableError,
    SyncError,
    UnsafeStoreEntryError,
    WorkdirError,
)

__all__ = [
    "Backend",
    "CancelledError",
    "DeletionGuardError",
    "FsspecBackend",
    "LeaseHeldError",
    "LocalBackend",
    "PassReport",
    "Progress",
    "QuotaExceededError",
    "RestoreReport",
    "Store",
    "StoreConfigError",
    "StoreFullError",
    "StoreUnavailableError",
    "SyncEngine",
    "SyncError",
    "SyncSettings",
    "UnsafeStoreEntryError",
    "WorkdirError",
    "open_backend",
]
