"""What can go wrong in a sync, as classes the app maps to HTTP codes and the CLI to one line."""

from __future__ import annotations


class SyncError(Exception):
    """Base: the message is one clear line for the user."""


class StoreConfigError(SyncError):
    """The store URL is malformed, its fsspec package is missing, or credentials are missing."""


class StoreUnavailableError(SyncError):
    """The store cannot be reached or refuses us right now; nothing was changed."""


class StoreFullError(SyncError):
    """The store's disk is full."""


class WorkdirError(SyncError):
    """The work directory is missing or unreadable; nothing is deleted because of it."""


class QuotaExceededError(SyncError):
    """The upload would take the store past `quota_bytes`; the local file stays pending."""


class LeaseHeldError(SyncError):
    """Another runtime holds the workspace's lease: this one is read-only."""


class DeletionGuardError(SyncError):
    """A pass would delete more of the store than allowed; it stopped before deleting anything."""


class CancelledError(SyncError):
    """The user cancelled the job; what was done stays done, nothing is half-written."""


class UnsafeStoreEntryError(SyncError):
    """The store holds a symbolic link or a special file (FIFO, socket, device) where the sync
    needs a file or a folder: it is never followed, opened or written through."""
