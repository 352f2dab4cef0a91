"""What can go wrong with a store, as classes the app maps to HTTP codes and the CLI to one line.
SyncError is the base of these and of the sync's own (sync/errors.py)."""

from __future__ import annotations


class SyncError(Exception):
    """Base: the message is one clear line for the user. A store's fault (store/faults.py) also
    says its `kind` and the library's own words, `detail`, for the log and "Details"."""

    kind: str | None = None
    detail: str | None = None

    def with_fault(self, kind: str, detail: str) -> SyncError:
        self.kind, self.detail = kind, detail
        return self


class StoreConfigError(SyncError):
    """The store URL is malformed, its fsspec package is missing, or credentials are missing."""


class StoreUnavailableError(SyncError):
    """The store cannot be reached or refuses us right now; nothing was changed."""


class StoreMissingError(StoreUnavailableError):
    """The store's folder (or a workspace this machine synced to it) is not there: a drive that is
    not mounted, a folder renamed or emptied. Never taken for an empty store: nothing is written
    until it is back, or until the user makes it anew."""


class StoreFullError(SyncError):
    """The store's disk is full."""


class LocalDiskFullError(SyncError):
    """This machine's own disk is full where the sync needs room (the encrypted copy of a file
    to send): nothing of that file was sent."""


class LocalFileError(SyncError):
    """A file of the work directory cannot be synced for a reason of its own (unreadable, a name
    the store refuses): it is listed as such, and the rest of the pass goes on."""


class LeaseHeldError(SyncError):
    """Another runtime holds the workspace's lease: this one is read-only."""


class LeaseLostError(LeaseHeldError):
    """This runtime lost the lease (taken over, or not renewed in time): it writes nothing more."""


class LeaseCorruptError(SyncError):
    """The lease in the store is unreadable: only an explicit take-over replaces it."""


class WorkspaceNotFoundError(SyncError):
    """The named workspace does not exist in the store (the message names those that do)."""


class UnsafeStoreEntryError(SyncError):
    """The store holds a symbolic link or a special file (FIFO, socket, device) where the sync
    needs a file or a folder: it is never followed, opened or written through."""
