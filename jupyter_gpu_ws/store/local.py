"""A store in a folder on a mounted disk (the embedded default, NFS, a FUSE mount of a bucket).

Writes go to a temporary name beside the target and are renamed into place; a flush makes them
durable (an fsync per file and folder after a few writes, one syncfs after many).

The folder may have been written by someone else (a copied folder, a shared mount), so nothing
in it is trusted: only regular files are listed and read, a symbolic link below the root is
never followed (for reading, writing, renaming or deleting), and a FIFO, socket or device is
never opened in a way that could block. Such entries are skipped, warned about once each, and
kept in `skipped` for the engine's status. The root itself may be a link: it is resolved once.

The folder may also vanish: a drive that is unmounted or drops (Google Drive's mount on Colab),
a renamed folder. So no write ever makes the root, nor a folder the engine said to expect (a
workspace it synced before): missing, they are StoreMissingError, the store unavailable, until
they are back. Only `make()` creates them, on an explicit first use (store/presence.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import itertools
import logging
import os
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import NoReturn

from ..diskio import file_kind, pwrite_all, start_writeback, turn
from .backend import CHUNK, PART_SUFFIX, PreconditionFailed, RemoteFile, SourceChangedError
from .errors import (
    LocalFileError,
    StoreFullError,
    StoreMissingError,
    StoreUnavailableError,
    UnsafeStoreEntryError,
)
from .hashing import fd_hash, file_hash
from .names import from_os, refused_by_store, to_os

log = logging.getLogger(__name__)

# A pass that wrote at most this many files fsyncs them and their folders; a larger one syncs
# the store's file system once (syncfs), which then costs less than many fsyncs. A few fsyncs
# never wait for unrelated dirty data (a checkpoint being written) as syncfs does.
FSYNC_FILES = 16
# From this size a copy that is to be flushed right after asks the kernel to start writing it
# to disk chunk by chunk.
EARLY_WRITEBACK = 64 * 2**20
# How long a folder checked to be a real folder under the root is taken on trust, so that a pass
# writing many files into one folder checks it once, not once per file (see _real_folder).
FOLDER_TRUST_SECONDS = 2.0


# What a drive that stopped answering says (a FUSE mount whose process died or lost its
# network: Google Drive on Colab, a bucket mount; an NFS server gone): not this file's fault.
DRIVE_GONE = {
    errno.ENOTCONN,
    errno.ESHUTDOWN,
    errno.ECONNABORTED,
    errno.ECONNRESET,
    errno.EHOSTDOWN,
    errno.ETIMEDOUT,
    errno.ESTALE,
    errno.EIO,
}


def _raise_os_error(err: OSError, what: str, root: str | None = None) -> NoReturn:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        where = f", the drive holding {root}" if root else ""
        raise StoreFullError(
            f"The store's disk is full ({what}{where}): free space on it; the pending files go by "
            "themselves then"
        ) from err
    if root and err.errno in DRIVE_GONE:
        raise StoreUnavailableError(
            f"The drive holding the store {root} does not answer ({what}: {err.strerror or err}): is it still mounted? Remount it (on "
            "Colab: drive.mount(..., force_remount=True)); the pending files go by themselves once it "
            "answers"
        ) from err
    raise StoreUnavailableError(
        f"Cannot write to the store ({what}): {err.strerror or err}"
    ) from err


class LocalBackend:
    """A folder on a mounted disk (the embedded default, NFS, a FUSE mount of a bucket)."""

    supports_rename = True
    # A file's holes stay holes here (sparse copies); an object store keeps every byte.
    keeps_holes = True

    def __init__(self, root: str, durable: bool = True) -> None:
        # As configured: it names the store (and so the local record of what was synced).
        self.root = os.path.abspath(root)
        self.description = self.root
        # Where the store really is: `~/store -> /mnt/disk/store` is a legitimate root, resolved
        # once here; below it no link is followed.
        self._root = os.path.realpath(self.root)
        self._prefix = self._root.rstrip(os.sep) + os.sep
        self.durable = durable
        # Folder → when it was last found to be a real folder under the root (see _real_folder).
        self._dirs: dict[str, float] = {}
        # Folders under the root that must be there and are never made by a write (expect()).
        self._expected: set[str] = set()
        # Entries of the store that are skipped (key → why), each warned about once.
        self._skipped: dict[str, str] = {}
        self._skipped_lock = threading.Lock()
        # Temporary names: unique per process and writer without a random draw per file.
        self._tmp_tag = f"{os.getpid()}{uuid.uuid4().hex[:6]}"
        self._tmp_count = itertools.count()
        # What flush() must make durable: files and folders written since the last flush.
        self._unsynced_lock = threading.Lock()
        self._unsynced: set[str] = set()
        self._unsynced_many = False
        # One flush at a time, so that a flush that finds nothing left to do returns only once
        # the one that took it is done.
        self._flush_lock = threading.Lock()
        self._round_trips: bool | None = None

    @property
    def round_trips(self) -> bool:
        """Whether the folder is on a network file system (NFS, SMB, a FUSE mount of a bucket):
        each read then waits for a round trip, and a restore keeps many in flight."""
        if self._round_trips is None:
            self._round_trips = on_network_file_system(self.root)
        return self._round_trips

    # -- what is in the store, and what is not to be touched ---------------------------------

    def _path(self, key: str) -> str:
        if os.sep == "/":
            return self._prefix + to_os(key)  # UTF-8 names whatever the locale (names.py)
        return os.path.join(self._root, *key.split("/"))

    def _key(self, path: str) -> str:
        return from_os(path[len(self._prefix) :].replace(os.sep, "/"))

    @property
    def skipped(self) -> dict[str, str]:
        """Entries of the store skipped as links or special files (key → why), as last seen."""
        with self._skipped_lock:
            return dict(self._skipped)

    def _skip(self, path: str, mode: int) -> str:
        """Note an entry that is not followed or opened; return why, for an error message."""
        key = self._key(path)
        reason = _why_skipped(mode)
        with self._skipped_lock:
            new = self._skipped.get(key) != reason
            self._skipped[key] = reason
        if new:
            log.warning("Sync: skipped %s in the store %s: %s", key, self._root, reason)
        return reason

    def _fine(self, path: str) -> None:
        """The entry at `path` is what it should be (again): no longer skipped."""
        if self._skipped:  # the usual case costs no lock
            with self._skipped_lock:
                self._skipped.pop(self._key(path), None)

    def _refuse(self, path: str, mode: int, doing: str) -> UnsafeStoreEntryError:
        reason = self._skip(path, mode)
        return UnsafeStoreEntryError(
            f"Cannot {doing}: {self._key(path)} in the store is {reason}; replace it with a real "
            "folder or file"
        )

    def _real_folder(self, folder: str, create: bool, doing: str) -> bool:
        """Whether `folder`, a path under the root, is a real folder there: itself and every
        folder between it and the root a directory, none a link. With `create`, missing ones
        are made (never through a link: one folder at a time, each checked). Raises
        UnsafeStoreEntryError where a link or special file stands in the way; without `create`,
        False where a folder is missing or is an ordinary file.

        Checking each folder below the root with lstat is the same as checking that the path,
        resolved, still lies under the root's real path, without resolving it again each time.
        A positive answer is kept for FOLDER_TRUST_SECONDS, so that a pass writing many files
        into one folder checks it once (the write path is measured against `cp -r`).

        The race accepted: someone with write access to the store who, while this process
        writes, swaps a checked folder for a link (within that time, or between a check and the
        system call that uses the path) can make that one call act through the link. Closing
        it would mean holding an open handle on every folder of the tree and making each call
        relative to it (openat and the like). What these checks stop is a store prepared
        beforehand (a copied folder, a shared mount), which is the case the store's contents
        can bring about on their own; and a file opened for reading is a regular file whatever
        happens (its open descriptor is checked, see _open_file).
        """
        now = time.monotonic()
        checked = self._dirs.get(folder)
        if checked is not None and now - checked < FOLDER_TRUST_SECONDS:
            return True
        if len(folder) < len(
            self._prefix
        ):  # the root: the user's own choice, trusted, never made here
            if not os.path.isdir(self._root):
                raise StoreMissingError(self.missing(""))
            self._dirs[folder] = now
            return True
        parent, _, name = folder.rpartition(os.sep)
        if name in ("", ".", ".."):
            raise ValueError(f"Not a folder inside the store: {folder!r}")
        if not self._real_folder(parent, create, doing):
            return False
        if folder in self._expected and not os.path.isdir(folder):
            raise StoreMissingError(self.missing(self._key(folder)))
        try:
            if create:
                try:
                    os.mkdir(folder)  # never follows a link: an existing one fails with EEXIST
                    self._written(folder)  # a new entry in its parent: to be made durable too
                except FileExistsError:
                    pass
            mode = os.lstat(folder).st_mode
        except (FileNotFoundError, NotADirectoryError):
            if create:
                raise
            return False
        except OSError as err:
            if err.errno in DRIVE_GONE or err.errno in (errno.ENOSPC, errno.EDQUOT):
                _raise_os_error(
                    err, doing, self.root
                )  # the drive's state, said as such wherever it is met
            raise
        if not stat.S_ISDIR(mode):
            if not stat.S_ISREG(mode):
                raise self._refuse(folder, mode, doing)
            if create:
                raise NotADirectoryError(
                    errno.ENOTDIR, "A file is where a folder should be", folder
                )
            return False
        self._fine(folder)
        self._dirs[folder] = now
        return True

    def _open_file(self, path: str, doing: str) -> int:
        """A descriptor for reading the regular file at `path`, in a folder the caller checked:
        never a link's target, and never blocking (a FIFO opened without O_NONBLOCK waits for a
        writer that may never come)."""
        try:
            fd = os.open(path, os.O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
        except OSError as err:
            if err.errno == errno.ELOOP:  # the name is a link: O_NOFOLLOW refused it
                raise self._refuse(path, stat.S_IFLNK, doing) from None
            raise
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise self._refuse(path, mode, doing)
            # Back to ordinary reads: some network and FUSE file systems honour the flag on files.
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        self._fine(path)
        return fd

    # -- the folder itself: there, missing, or made on purpose --------------------------------

    def present(self, prefix: str) -> bool:
        """Whether the store's folder (prefix ''), or a folder under it, is there."""
        return os.path.isdir(self._path(prefix) if prefix else self._root)

    def probe(self) -> object:
        return self.present("")  # a stalled mount leaves the stat of its folder unanswered

    def expect(self, prefix: str) -> None:
        """From now on `prefix` (a folder under the root) must be there: a write never makes it,
        and missing it is StoreMissingError. The root is always expected."""
        if prefix:
            self._expected.add(self._path(prefix))

    def make(self, prefix: str) -> None:
        """The explicit first use: make the root (and `prefix` under it), then expect them."""
        try:
            os.makedirs(self._path(prefix) if prefix else self._root, exist_ok=True)
        except OSError as err:
            _raise_os_error(err, prefix or "the store's folder", self.root)
        self.expect(prefix)

    def missing(self, prefix: str) -> str:
        """Why the store is unavailable when the root (or an expected folder) is not there."""
        if not prefix:
            return (
                f"The store folder {self.root} is missing: is the drive it is on mounted? Nothing is written "
                "until it is back (the sync goes on by itself then)"
            )
        return (
            f"The folder {prefix} is missing from the store {self.root}: is the drive mounted, and the "
            "folder where it was? Nothing is written until it is back (the sync goes on by itself then)"
        )

    # -- the operations ----------------------------------------------------------------------

    def _written(self, *paths: str) -> None:
        """Files or folders changed, to be fsynced by flush(): each path and its folder."""
        if not self.durable:
            return
        with self._unsynced_lock:
            if self._unsynced_many:
                return
            for path in paths:
                self._unsynced.add(path)
                self._unsynced.add(os.path.dirname(path))
            if len(self._unsynced) > 2 * FSYNC_FILES:
                self._unsynced_many = True
                self._unsynced.clear()

    def put(
        self,
        local: str,
        key: str,
        progress: Callable[[int], None] | None = None,
        check: Callable[[], bool] | None = None,
        flush_soon: bool = False,
    ) -> int:
        """Copy to a temporary name beside the target, verify, then rename into place.

        `check` runs once the data is written and before it becomes visible: False means the
        source changed meanwhile, and the copy is discarded. `flush_soon`: a large file starts
        going to disk while it is copied, so that the flush after it has little left to do;
        otherwise the copy runs at memory speed and the disk gets it at the flush.
        """

        def copy(src: int, dst: int, st: os.stat_result, early: bool) -> int:
            if sparse(st):
                return _copy_range_sparse(src, dst, 0, st.st_size, progress)  # holes stay holes
            # The planned size exactly: a file that grows meanwhile changes its size and time,
            # which `check` sees, so no call is spent looking for more past the end.
            return _copy_fd(src, dst, progress, early, st.st_size)

        return self._put(local, key, copy, check, flush_soon)

    def put_encoded(
        self,
        local: str,
        key: str,
        encode: Encoder,
        check: Callable[[], bool] | None = None,
        flush_soon: bool = False,
    ) -> int:
        """As put(), with `encode` writing the stored form of the file (the encryption's) straight
        into the temporary name: no copy of it anywhere else. `encode(src, dst, size, written)`
        returns how many bytes of the file it read, and calls `written(offset, length)` for each
        range it wrote."""

        def copy(src: int, dst: int, st: os.stat_result, early: bool) -> int:
            return encode(
                src, dst, st.st_size, (lambda at, n: start_writeback(dst, at, n)) if early else None
            )

        return self._put(local, key, copy, check, flush_soon)

    def _put(
        self,
        local: str,
        key: str,
        copy: Callable[[int, int, os.stat_result, bool], int],
        check: Callable[[], bool] | None,
        flush_soon: bool,
    ) -> int:
        target = self._path(key)
        parent = target.rpartition(os.sep)[0]
        # Short, whatever the name: any name the work directory's file system accepts can sync.
        # The rename replaces a link or special file at the target itself, never its target.
        tmp = f"{parent}{os.sep}.~{self._tmp_tag}{next(self._tmp_count)}{PART_SUFFIX}"
        # The source first: a file deleted meanwhile leaves no folder behind in the store.
        src = _open_source(local)
        try:
            try:
                self._real_folder(parent, True, f"write {key}")
                # Plain descriptors and a kernel-side copy: the fewest system calls per file.
                st = os.fstat(src)
                size = st.st_size
                dst = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_CLOEXEC, 0o666)
                try:
                    early = flush_soon and self.durable and size >= EARLY_WRITEBACK
                    stored = copy(src, dst, st, early)
                finally:
                    os.close(dst)
            finally:
                os.close(src)
            if stored != size:
                raise SourceChangedError(key)
            if check is not None and not check():
                raise SourceChangedError(key)
            os.replace(tmp, target)
            self._written(target)
            self._fine(target)  # whatever was skipped there is replaced now
        except SourceChangedError:
            _remove_quietly(tmp)
            if not os.path.exists(local):
                self._prune_folders(parent)  # deleted while copied: no empty folder stays
            raise
        except OSError as err:
            _remove_quietly(tmp)
            if isinstance(err, FileNotFoundError):
                if not os.path.exists(local):
                    self._prune_folders(parent)
                    raise
                self._dirs.pop(
                    parent, None
                )  # the store's folder went away: make it again next time
            refused = refused_by_store(err)  # too long, or not a name its file system takes
            if refused:
                raise LocalFileError(refused) from None
            _raise_os_error(err, key, self.root)
        except BaseException:
            _remove_quietly(tmp)
            raise
        return size

    def abort_uploads(self, prefix: str) -> int:
        return 0  # a temporary file is all an interrupted write leaves here (sweep_parts)

    def abandoned_uploads(self) -> int:
        return 0

    def _folder_of(self, path: str, doing: str) -> None:
        """Check the folder of an entry that is to exist: FileNotFoundError where it does not."""
        if not self._real_folder(os.path.dirname(path), False, doing):
            raise FileNotFoundError(errno.ENOENT, "No such file in the store", path)

    def copy(self, src: str, dst: str) -> None:
        """Keep a version: a hard link costs no space and no time; a copy where links fail."""
        source = self._path(src)
        target = self._path(dst)
        doing = f"keep a version of {src}"
        try:
            self._folder_of(source, doing)
            fd = self._open_file(source, doing)  # a regular file, not a link to one
        except OSError as err:
            _raise_os_error(err, src, self.root)
        try:
            self._real_folder(os.path.dirname(target), True, doing)
            try:
                # Not following: had the name become a link since it was checked, the version
                # would be that link, inside the store, and never listed.
                os.link(source, target, follow_symlinks=False)
            except FileExistsError:
                pass
            except OSError:
                self._copy_from(fd, target)
        except OSError as err:
            _raise_os_error(err, dst, self.root)
        finally:
            os.close(fd)
        self._written(target)

    def _copy_from(self, fd: int, target: str) -> None:
        """Where a hard link is refused: copy what `fd` reads to a temporary name, then rename."""
        parent, _, name = target.rpartition(os.sep)
        tmp = f"{parent}{os.sep}.~{name}{PART_SUFFIX}-{self._tmp_tag}{next(self._tmp_count)}"
        try:
            dst = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_CLOEXEC, 0o666)
            try:
                _copy_fd(fd, dst, None)
            finally:
                os.close(dst)
            os.replace(tmp, target)
        except BaseException:
            _remove_quietly(tmp)
            raise

    def get(self, key: str, local: str, progress: Callable[[int], None] | None = None) -> int:
        path = self._path(key)
        self._folder_of(path, f"read {key}")
        src = self._open_file(path, f"read {key}")
        try:
            dst = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | O_CLOEXEC, 0o666)
            try:
                return _copy_fd(src, dst, progress)
            finally:
                os.close(dst)
        finally:
            os.close(src)

    def read_into(
        self,
        key: str,
        fd: int,
        offset: int = 0,
        length: int | None = None,
        progress: Callable[[int], None] | None = None,
        etag: str | None = None,
    ) -> int:
        """A kernel-side copy (copy_file_range) of the file, or of one range of it, into `fd`.

        Opened without following a final symbolic link and without blocking (a FIFO would
        otherwise wait forever), and read only if it is a regular file."""
        try:
            src = os.open(self._path(key), os.O_RDONLY | O_CLOEXEC | O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            raise
        except OSError as err:
            raise StoreUnavailableError(
                f"Cannot read {key} from the store: {err.strerror or err}"
            ) from err
        try:
            st = os.fstat(src)
            if not stat.S_ISREG(st.st_mode):
                raise StoreUnavailableError(f"{key} in the store is not a regular file")
            length = st.st_size - offset if length is None else length
            if length <= CHUNK and self.round_trips:
                _one_request(src, offset, length)
            if sparse(st):
                return _copy_range_sparse(src, fd, offset, length, progress)  # holes stay holes
            return _copy_range(src, fd, offset, length, progress)
        except OSError as err:
            if err.errno == errno.ENOSPC:
                raise  # the work directory's disk is full: the caller says so
            raise StoreUnavailableError(
                f"Cannot read {key} from the store: {err.strerror or err}"
            ) from err
        finally:
            os.close(src)

    def stat(self, key: str) -> RemoteFile | None:
        """The regular file at `key`; None where there is none (a link or special file counts
        as none, and is reported as skipped)."""
        path = self._path(key)
        if not self._real_folder(os.path.dirname(path), False, f"look up {key}"):
            return None
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISREG(st.st_mode):
            if not stat.S_ISDIR(st.st_mode):
                self._skip(path, st.st_mode)
            return None
        self._fine(path)
        return RemoteFile(key, st.st_size, st.st_mtime)

    def move(self, src: str, dst: str) -> None:
        source = self._path(src)
        target = self._path(dst)
        doing = f"move {src}"
        try:
            self._folder_of(source, doing)
            self._real_folder(os.path.dirname(target), True, doing)
            # A rename moves the entry itself: a link stays a link, inside the store.
            os.replace(source, target)
        except OSError as err:
            _raise_os_error(err, src, self.root)
        self._written(target, source)
        self._prune_folders(os.path.dirname(source))

    def delete(self, key: str) -> None:
        path = self._path(key)
        if self._real_folder(os.path.dirname(path), False, f"delete {key}"):
            _remove_quietly(path)  # unlink removes a link itself, never its target
            self._prune_folders(os.path.dirname(path))

    def _prune_folders(self, folder: str) -> None:
        """Folders left empty by a move or a deletion go too (up to the workspace's top folders),
        so the store stays as browsable as the work directory: no trail of empty checkpoint
        folders. rmdir refuses a folder that is not empty, so nothing else is ever removed."""
        while len(folder) > len(self.root) and folder.count(os.sep) - self.root.count(os.sep) > 2:
            try:
                os.rmdir(folder)
            except OSError:
                return
            self._dirs.pop(folder, None)
            self._written(os.path.dirname(folder))
            folder = os.path.dirname(folder)

    def folders(self, prefix: str) -> list[str]:
        base = self._path(prefix) if prefix else self._root
        if not self._real_folder(base, False, f"list {prefix}"):
            return []
        found: list[str] = []
        odd: set[str] = set()
        try:
            with os.scandir(base) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        found.append(from_os(entry.name))
                    elif not entry.is_file(follow_symlinks=False):
                        # A link or a special file where a folder may be looked for: noted
                        # (`skipped`), so that a listing of folders can say why one is not there.
                        try:
                            self._skip(entry.path, entry.stat(follow_symlinks=False).st_mode)
                        except FileNotFoundError:
                            continue
                        odd.add(self._key(entry.path))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as err:
            _raise_os_error(err, prefix or "the store", self.root)
        # Those noted right under `prefix` before and gone now are no longer skipped.
        parent = prefix.strip("/")
        with self._skipped_lock:
            for key in [k for k in self._skipped if k.rpartition("/")[0] == parent]:
                if key not in odd:
                    del self._skipped[key]
        return sorted(found)

    def list(self, prefix: str) -> Iterator[RemoteFile]:
        """Every regular file under `prefix`; links and special files are skipped (and noted),
        folders that are links are not entered."""
        base = self._path(prefix)
        if not self._real_folder(base, False, f"list {prefix}"):
            return
        found: set[str] = set()
        for entry in self._walk(base):
            if PART_SUFFIX in entry.name:
                continue
            try:
                if entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    yield RemoteFile(self._key(entry.path), st.st_size, st.st_mtime)
                    continue
                mode = entry.stat(follow_symlinks=False).st_mode
            except FileNotFoundError:
                continue
            self._skip(entry.path, mode)
            found.add(self._key(entry.path))
        # Whatever was skipped under this prefix before and is gone now, or fine now: forgotten.
        under = self._key(base) + "/"
        with self._skipped_lock:
            for key in [k for k in self._skipped if k.startswith(under) and k not in found]:
                del self._skipped[key]

    def _walk(self, base: str) -> Iterator[os.DirEntry[str]]:
        """Each entry under `base` that is not a real folder, entering real folders only (an
        entry's type as the folder listing gives it, which never follows a link). On a mounted
        drive (round_trips) LIST_IN_FLIGHT folders are listed at once, and each file's stat is
        taken by the worker that listed it: there every listing and stat waits milliseconds."""
        if self.round_trips:
            yield from self._walk_in_parallel(base)
            return
        pending = [base]
        while pending:
            entries, folders = _list_folder(pending.pop(), stat_files=False)
            pending.extend(folders)
            yield from entries

    def _walk_in_parallel(self, base: str) -> Iterator[os.DirEntry[str]]:
        with ThreadPoolExecutor(LIST_IN_FLIGHT, thread_name_prefix="gpuws-list") as pool:
            running = {pool.submit(_list_folder, base, True)}
            while running:
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    entries, folders = future.result()
                    running.update(pool.submit(_list_folder, folder, True) for folder in folders)
                    yield from entries

    def sweep_parts(self, prefix: str, older_than: float) -> int:
        cutoff = time.time() - older_than
        removed = 0
        base = self._path(prefix)
        if not self._real_folder(base, False, f"clean up {prefix}"):
            return 0
        for entry in self._walk(base):
            if PART_SUFFIX not in entry.name:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff:
                    os.unlink(entry.path)
                    removed += 1
            except OSError:
                continue
        return removed

    def read_bytes(self, key: str) -> bytes | None:
        """The content of the regular file at `key`; None where there is none (a link or a
        special file counts as none, and is reported as skipped)."""
        path = self._path(key)
        if not self._real_folder(os.path.dirname(path), False, f"read {key}"):
            return None
        try:
            fd = self._open_file(path, f"read {key}")
        except (FileNotFoundError, NotADirectoryError, UnsafeStoreEntryError):
            return None  # a link or special file: as if absent (a write replaces the entry itself)
        with os.fdopen(fd, "rb") as f:
            return f.read()

    def write_bytes(self, key: str, data: bytes) -> None:
        target = self._path(key)
        tmp = f"{target}{PART_SUFFIX}-{uuid.uuid4().hex[:8]}"
        try:
            self._real_folder(os.path.dirname(target), True, f"write {key}")
        except OSError as err:
            _raise_os_error(err, key, self.root)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_CLOEXEC, 0o666)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except OSError as err:
            _remove_quietly(tmp)
            _raise_os_error(err, key, self.root)
        self._fine(target)

    def read_tagged(self, key: str) -> tuple[bytes, str] | None:
        data = self.read_bytes(key)
        return None if data is None else (data, content_tag(data))

    def write_if(self, key: str, data: bytes, tag: str | None) -> str:
        """Compare and swap under an exclusive lock on a file beside the object: every writer of
        the object takes it, so reading, comparing and replacing happen as one step. The kernel
        drops the lock when its holder dies, so a killed runtime never leaves it taken."""
        target = self._path(key)
        try:
            self._real_folder(os.path.dirname(target), True, f"write {key}")
            fd = os.open(f"{target}.lock", os.O_RDWR | os.O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o666)
        except OSError as err:
            _raise_os_error(err, key, self.root)
        try:
            _lock(fd, key)
            current = self.read_tagged(key)
            if (current is None) != (tag is None) or (current is not None and current[1] != tag):
                raise PreconditionFailed(key)
            self.write_bytes(key, data)
            _fsync_folder(os.path.dirname(target))
            return content_tag(data)
        finally:
            os.close(fd)  # releases the lock

    def conditional_writes(self) -> str | None:
        fstype = mount_type(self.root)
        if fstype.startswith("fuse"):
            return (
                f"the store is a FUSE mount ({fstype}): its file locks do not reach other machines, "
                "so the lease cannot stop a runtime elsewhere from writing"
            )
        return None

    def same_content(self, key: str, local: str, remote: RemoteFile | None = None) -> bool | None:
        stored = self.stat(key)  # a regular file, in real folders (no link followed)
        try:
            if stored is None or stored.size != os.path.getsize(local):
                return False
            fd = self._open_file(self._path(key), f"compare {key}")
        except (FileNotFoundError, UnsafeStoreEntryError):
            return False
        try:
            return fd_hash(fd) == file_hash(local)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Nothing held between calls."""

    @property
    def flushes(self) -> bool:
        return self.durable

    def unflushed(self) -> bool:
        with self._unsynced_lock:
            return bool(self._unsynced or self._unsynced_many)

    def flush(self) -> None:
        """Make everything written since the last flush durable: an fsync of each file and
        folder after a few changes, one syncfs of the store's file system after many."""
        if not self.durable:
            return
        with self._flush_lock:
            with self._unsynced_lock:
                paths, many = self._unsynced, self._unsynced_many
                self._unsynced, self._unsynced_many = set(), False
            self._sync_to_disk(paths, many)

    def _sync_to_disk(self, paths: set[str], many: bool) -> None:
        if many:
            _syncfs(self.root)
            return
        for path in sorted(
            paths, key=lambda p: (-p.count(os.sep), p)
        ):  # files and deep folders first
            try:
                # Opened as everything in the store: a link or FIFO put in place of what was
                # written is neither followed nor waited for (an fsync changes nothing anyway).
                fd = os.open(path, os.O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
            except (FileNotFoundError, NotADirectoryError):
                # Moved or replaced since (its folder now a file of that name, even): what took
                # its place is listed too.
                continue
            except OSError as err:
                if err.errno == errno.ELOOP:
                    continue  # replaced by a link since: nothing of ours left to flush
                _raise_os_error(err, "flush", self.root)
            try:
                mode = os.fstat(fd).st_mode
                if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
                    os.fsync(fd)
            except OSError as err:
                with contextlib.suppress(OSError):
                    os.close(fd)
                _raise_os_error(err, "flush", self.root)
            try:
                # A mounted drive answers the close too (FUSE's flush), and may fail it: a store
                # error like any other, never an OSError that ends the flusher's thread.
                os.close(fd)
            except OSError as err:
                _raise_os_error(err, "flush", self.root)


# Folders listed at once on a mounted drive (see _walk).
LIST_IN_FLIGHT = 16


def _list_folder(folder: str, stat_files: bool) -> tuple[list[os.DirEntry[str]], list[str]]:
    """The entries of `folder` that are not real folders, and the real folders in it; with
    `stat_files`, each entry's stat taken now (DirEntry keeps it), by the caller's thread."""
    try:
        scanned = os.scandir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    entries: list[os.DirEntry[str]] = []
    folders: list[str] = []
    with scanned:
        for entry in scanned:
            try:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                    continue
                if stat_files and PART_SUFFIX not in entry.name:
                    entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError:
                if not stat_files:
                    continue
            entries.append(entry)
    return entries, folders


def _why_skipped(mode: int) -> str:
    kind = file_kind(mode)
    if stat.S_ISLNK(mode):
        return f"{kind}, which is never followed"
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return f"{kind}, which is never read"
    return "not a regular file"


O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
O_NOCTTY = getattr(os, "O_NOCTTY", 0)
# Writes the stored form of the open file `src` (of `size` bytes) into `dst`; returns the bytes of
# `src` it read; calls the last argument, where given, with each (offset, length) it wrote.
Encoder = Callable[[int, int, int, "Callable[[int, int], None] | None"], int]

# copy_file_range refusals that mean "not between these two files": fall back to read/write.
_NO_KERNEL_COPY = {
    errno.EXDEV,
    errno.ENOSYS,
    errno.EINVAL,
    errno.EOPNOTSUPP,
    errno.ENOTSUP,
    errno.EBADF,
    errno.EPERM,
}


def _copy_fd(
    src: int,
    dst: int,
    progress: Callable[[int], None] | None,
    early_writeback: bool = False,
    size: int | None = None,
) -> int:
    """Copy from the current offsets to the end of `src` (with `size`: that many bytes, or fewer
    where it ends first): in the kernel (copy_file_range) where it can, else through a buffer.
    Progress is reported per chunk of at most CHUNK bytes; `early_writeback` starts writing each
    chunk to disk without waiting for it."""
    total = 0
    kernel = hasattr(os, "copy_file_range")
    step = CHUNK if progress or early_writeback else 1 << 30
    while kernel:
        if size is not None and total >= size:
            return total
        try:
            n = os.copy_file_range(src, dst, step)
        except OSError as err:
            if err.errno not in _NO_KERNEL_COPY or total:
                raise
            break
        if n == 0:
            break  # the end, or a file system that copies nothing this way: read to be sure
        if early_writeback:
            start_writeback(dst, total, n)
        total += n
        if progress:
            progress(n)
    while size is None or total < size:
        chunk = os.read(src, CHUNK)
        if not chunk:
            return total
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view) :]
        if early_writeback:
            start_writeback(dst, total, len(chunk))
        total += len(chunk)
        if progress:
            progress(len(chunk))
    return total


def _open_source(local: str) -> int:
    """The work directory's file, for reading; a failure is the file's, never the store's."""
    try:
        return os.open(local, os.O_RDONLY | O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise LocalFileError(f"cannot be read: {err.strerror or err}") from None


def content_tag(data: bytes) -> str:
    """A tag that changes with every write of a small object: a hash of its bytes."""
    return hashlib.sha256(data).hexdigest()[:32]


# How long a writer waits for another's compare-and-swap before calling the store unavailable.
LOCK_WAIT = 10.0


def _lock(fd: int, key: str) -> None:
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise StoreUnavailableError(
                    f"{key} stayed locked by another writer for {LOCK_WAIT:.0f} s"
                ) from None
            time.sleep(0.01)
        except OSError as err:
            _raise_os_error(err, f"locking {key}")


def _fsync_folder(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Where Linux says what is mounted where, with each mount's file-system type.
MOUNTINFO = "/proc/self/mountinfo"


def mount_type(path: str) -> str:
    """The file-system type of the mount holding `path` (the longest mount point it lies under),
    or '' if unknown."""
    real = os.path.realpath(path)
    best, fstype = "", ""
    try:
        with open(MOUNTINFO, encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                point = fields[4].encode().decode("unicode_escape")
                rest = fields[fields.index("-") + 1 :]
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, fstype = point, rest[0]
    except (OSError, ValueError, IndexError):
        return ""
    return fstype


def _copy_range(
    src: int, dst: int, offset: int, length: int | None, progress: Callable[[int], None] | None
) -> int:
    """Copy `length` bytes (None: to the end) at `offset` of `src` to the same offset of `dst`,
    in the kernel where it can, else through a buffer; neither file's position moves, so
    several threads may copy ranges of the same pair at once (taking turns to write where
    `dst`'s writers do: diskio.take_turns)."""
    total = 0
    step = CHUNK if progress else 1 << 30
    kernel = hasattr(os, "copy_file_range")
    while length is None or total < length:
        want = step if length is None else min(step, length - total)
        n = -1
        if kernel:
            try:
                with turn(dst):
                    n = os.copy_file_range(src, dst, want, offset + total, offset + total)
            except OSError as err:
                if err.errno not in _NO_KERNEL_COPY:
                    raise
                kernel = False
        if n <= 0:  # no kernel copy here, or it copied nothing: read to be sure of the end
            chunk = os.pread(src, min(want, CHUNK), offset + total)
            if not chunk:
                break
            pwrite_all(dst, chunk, offset + total)
            n = len(chunk)
        total += n
        if progress:
            progress(n)
    return total


def _one_request(fd: int, offset: int, length: int) -> None:
    """Have the read of `length` bytes at `offset` sent as one request where the file is on a
    drive reached over the network, however many reads are in flight (no readahead): Linux's readahead for a FUSE mount gives up
    while the mount has many requests outstanding and then fetches a file a page (4 KiB) at a
    time. A restore of 64 KiB files from the test drive with 32 and 64 reads at once sent
    3.2 and 5.6 requests per file, one with this (docs/benchmarks.md, "Mounted drives")."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        with contextlib.suppress(OSError):  # a hint: a file system without it reads as before
            advise(fd, offset, length, os.POSIX_FADV_RANDOM)


def sparse(st: os.stat_result) -> bool:
    """Whether a regular file has holes: fewer blocks on disk than its size needs."""
    return st.st_blocks * 512 < st.st_size


def _copy_range_sparse(
    src: int, dst: int, offset: int, length: int, progress: Callable[[int], None] | None
) -> int:
    """As _copy_range, for a file with holes: only its data is copied (SEEK_DATA, SEEK_HOLE),
    each hole left a hole in `dst` (extended to the range's end), so a 10 GB file that holds a
    few megabytes costs a few megabytes. Returns the bytes of the range covered (fewer where
    `src` ends early)."""
    end = offset + length
    at = offset
    while at < end:
        try:
            data = os.lseek(src, at, os.SEEK_DATA)
        except OSError as err:
            if err.errno != errno.ENXIO:  # ENXIO: no data after `at`, only a hole to the end
                raise
            data = os.fstat(src).st_size
        data = min(data, end)
        if data > at and progress:
            progress(data - at)  # a hole: done at once
        if data >= end:
            at = end
            break
        hole = min(os.lseek(src, data, os.SEEK_HOLE), end)
        copied = _copy_range(src, dst, data, hole - data, progress)
        at = data + copied
        if copied < hole - data:
            break  # the file got shorter meanwhile
    if at > os.fstat(src).st_size:
        at = os.fstat(src).st_size  # the range ran past the file's end: a shorter file
    with turn(dst):
        if os.fstat(dst).st_size < at:
            os.ftruncate(dst, at)  # a hole at the end is a length, not bytes
    return at - offset


# File system types (as /proc/self/mountinfo names them) whose requests cross a network.
_NETWORK_FS = (
    "nfs",
    "cifs",
    "smb",
    "9p",
    "ceph",
    "glusterfs",
    "lustre",
    "afs",
    "fuse",
    "gpfs",
    "beegfs",
)


def on_network_file_system(path: str) -> bool:
    """Whether `path` (or, if it does not exist yet, the folder that will hold it) is on a
    network file system, by the type of the mount that holds it."""
    return mount_type(path).startswith(_NETWORK_FS)


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _syncfs(path: str) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY)
        try:
            if libc.syncfs(fd) != 0:
                os.sync()
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        os.sync()
