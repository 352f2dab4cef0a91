"""What can go wrong in a sync, as classes the app maps to HTTP codes and the CLI to one line: the
sync's own here, the store's (and their base SyncError) from store/errors.py, so that a caller
catches one family from one place."""

from __future__ import annotations

from ..store.errors import (
    LeaseCorruptError,
    LeaseHeldError,
    LeaseLostError,
    LocalDiskFullError,
    LocalFileError,
    StoreConfigError,
    StoreFullError,
    StoreMissingError,
    StoreUnavailableError,
    SyncError,
    UnsafeStoreEntryError,
    WorkspaceNotFoundError,
)

__all__ = [
    "CancelledError",
    "DeletionGuardError",
    "LeaseCorruptError",
    "LeaseHeldError",
    "LeaseLostError",
    "LocalDiskFullError",
    "LocalFileError",
    "QuotaExceededError",
    "StoreConfigError",
    "StoreFullError",
    "StoreMissingError",
    "StoreUnavailableError",
    "SyncError",
    "UnsafeStoreEntryError",
    "WorkdirError",
    "WorkspaceNotFoundError",
]


class WorkdirError(SyncError):
    """The work directory is missing or unreadable; nothing is deleted because of it."""


class QuotaExceededError(SyncError):
    """The upload would take the store past `quota_bytes`; the local file stays pending."""


class DeletionGuardError(SyncError):
    """A pass would delete more of the store than allowed; it stopped before deleting anything."""


class CancelledError(SyncError):
    """The user cancelled the job; what was done stays done, nothing is half-written."""
