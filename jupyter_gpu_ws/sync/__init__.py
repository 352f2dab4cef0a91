"""The storage sync engine: mirrors the work directory to a store through fsspec."""

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
from .backend import Backend
from .local import LocalBackend
from .remote import FsspecBackend
from .store import Store, open_backend

__all__ = [
    "Backend", "CancelledError", "DeletionGuardError", "FsspecBackend", "LeaseHeldError",
    "LocalBackend", "PassReport", "Progress", "QuotaExceededError", "RestoreReport", "Store",
    "StoreConfigError", "StoreFullError", "StoreUnavailableError", "SyncEngine", "SyncError",
    "SyncSettings", "UnsafeStoreEntryError", "WorkdirError", "open_backend",
]
