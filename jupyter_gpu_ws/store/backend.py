"""The interface every store backend offers the engine, and what backends share.

A backend makes each write atomic (a reader never sees a partial file) and each read land
complete or not at all. Keys are '/'-separated and relative to the backend's root.
"""

from __future__ import annotations

import builtins  # the class defines a method `list`: its annotations say builtins.list
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from .errors import SyncError

# The mark of a temporary name: never listed, never restored, swept when stale.
PART_SUFFIX = ".gpuws-part"
# A folder at a backend's root for its own short-lived objects (a probe, a write in progress).
TEMP_FOLDER = ".gpuws-tmp"
CHUNK = 8 * 2**20


@dataclass
class RemoteFile:
    key: str  # relative to the backend's root, '/' separated
    size: int
    mtime: float | None
    etag: str | None = None  # where the store has one (S3: the MD5 of a single PUT), unquoted


def md5_of(etag: str | None) -> str | None:
    """The MD5 an S3 ETag names (quoted or not), where it is one (a single PUT's); None for a
    multipart upload's ("<md5>-<parts>") or any other tag."""
    tag = (etag or "").strip('"')
    return tag if len(tag) == 32 and "-" not in tag else None


class Backend(Protocol):
    """The operations the engine needs from any storage; keys are '/'-separated."""

    description: str
    supports_rename: bool

    # Read-only here, so that a backend may answer either with a plain attribute or a property.
    @property
    def round_trips(self) -> bool:
        """Whether each request waits for a network round trip: a restore then keeps many small
        requests in flight at once (a local folder answers at disk speed: a few suffice)."""
        ...

    @property
    def flushes(self) -> bool:
        """Whether a write becomes durable only at flush() (a local folder), not once it
        completes."""
        ...

    def put(
        self,
        local: str,
        key: str,
        progress: Callable[[int], None] | None = None,
        check: Callable[[], bool] | None = None,
        flush_soon: bool = False,
    ) -> int:
        """Make `key` hold the local file, whole or not at all. `flush_soon`: the caller will
        wait for a flush right after, so the write may as well head for the disk at once."""
        ...

    def copy(self, src: str, dst: str) -> None: ...
    def get(self, key: str, local: str, progress: Callable[[int], None] | None = None) -> int: ...

    def read_into(
        self,
        key: str,
        fd: int,
        offset: int = 0,
        length: int | None = None,
        progress: Callable[[int], None] | None = None,
        etag: str | None = None,
    ) -> int:
        """Write `key` into the open file `fd`: the whole of it from offset 0, or with `length`
        its bytes offset..offset+length-1 at the same offsets (so that parts of one file can
        come in parallel). Returns the bytes written. FileNotFoundError: the key is gone;
        ChangedInStoreError: `etag` (from the listing) no longer names the stored object.
        `progress` gets each chunk's size as it lands and may raise to stop."""
        ...

    # Optional (plain S3): read_many(items, landed, in_flight, stop) fetches whole small objects
    # many at once from one thread where reads_many() is true (FsspecBackend.read_many); other
    # backends get read_into.
    def stat(self, key: str) -> RemoteFile | None: ...
    def move(self, src: str, dst: str) -> None: ...
    def delete(self, key: str) -> None: ...
    def list(self, prefix: str) -> Iterator[RemoteFile]: ...

    def folders(self, prefix: str) -> builtins.list[str]:
        """The names of the folders (common prefixes) right under `prefix` ('' for the root)."""
        ...

    def sweep_parts(self, prefix: str, older_than: float) -> int:
        """Remove temporary files of writes that died (a killed process) older than that many
        seconds; return how many. Younger ones may be another writer's, in flight."""
        ...

    def abort_uploads(self, prefix: str) -> int:
        """Abort multipart uploads under `prefix` that this process does not have in flight
        (left by a killed writer or by an abort that failed during an outage); only the lease
        holder calls it, so no other writer can be using them. Returns how many."""
        ...

    def abandoned_uploads(self) -> int:
        """How many uploads this process failed to abort (the store was away): abort_uploads()
        is owed once it answers."""
        ...

    def read_bytes(self, key: str) -> bytes | None: ...
    def write_bytes(self, key: str, data: bytes) -> None: ...

    # -- one small object written by compare-and-swap (the lease) ------------------------------

    def read_tagged(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and a tag that changes with every write (an ETag), or None."""
        ...

    def write_if(self, key: str, data: bytes, tag: str | None) -> str:
        """Write only if the object is still the one read with `tag` (or, with None, absent);
        return the new tag. Raises PreconditionFailed when another writer got there first."""
        ...

    # -- whether the store is there at all (a mounted drive may drop) ------------------------

    def present(self, prefix: str) -> bool:
        """Whether the store's folder (prefix '') or a folder in it is there; True where the
        store has no folders (an object store)."""
        ...

    def probe(self) -> object:
        """The cheapest question that makes the store answer (the stall watch asks it in a thread
        of its own while a pass or a restore waits on the store, sync/stall.py)."""
        ...

    def expect(self, prefix: str) -> None:
        """From now on `prefix` must be there: no write makes it, and missing it is
        StoreMissingError (the root always is)."""
        ...

    def make(self, prefix: str) -> None:
        """An explicit first use: make the store's folder (and `prefix` in it), then expect them."""
        ...

    def missing(self, prefix: str) -> str:
        """The message for a missing root (prefix '') or expected folder."""
        ...

    def conditional_writes(self) -> str | None:
        """None where write_if is a true compare-and-swap against other machines; otherwise the
        reason it is not (the lease is then advisory). May ask the store once."""
        ...

    def same_content(self, key: str, local: str, remote: RemoteFile | None = None) -> bool | None:
        """Whether the store's object holds the same bytes as the local file: True or False
        where the store lets us tell (a hash, an MD5 ETag), None where it does not. `remote`:
        what a listing said of the object, if the caller has it."""
        ...

    def flush(self) -> None:
        """Make what was written so far durable (a no-op where a completed write already is);
        safe to call from several threads: it returns once everything written before the call
        is durable."""
        ...

    def unflushed(self) -> bool:
        """Whether writes since the last flush are not yet durable."""
        ...

    @property
    def skipped(self) -> dict[str, str]:
        """Entries of the store left alone because they are not regular files (key → why):
        symbolic links, FIFOs, sockets, devices in a local folder; empty where the store holds
        objects only. What the last look at each found; gone once the entry is."""
        ...

    def close(self) -> None: ...


class NoFolders:
    """What a store of objects (no folders of its own to lose) answers about its presence and
    durability: a prefix is there once an object is, a missing bucket or refused access fails
    every request instead, and a completed write is durable."""

    flushes = False
    description: str

    def present(self, prefix: str) -> bool:
        return True

    def probe(self) -> object:
        # A request that goes to the store and back (a missing key is an answer too).
        return self.stat(f"{TEMP_FOLDER}/probe")  # type: ignore[attr-defined]

    def expect(self, prefix: str) -> None:
        pass

    def make(self, prefix: str) -> None:
        pass

    def missing(self, prefix: str) -> str:
        return f"{prefix or 'The store'} is missing from {self.description}"

    def flush(self) -> None:
        pass

    def unflushed(self) -> bool:
        return False


class SourceChangedError(Exception):
    """The local file changed while it was read: nothing was made visible; try again."""


class PreconditionFailed(Exception):
    """A conditional write found the object changed since it was read: another writer won."""


class ChangedInStoreError(SyncError):
    """The stored object changed while it was being fetched: what came is not kept."""
