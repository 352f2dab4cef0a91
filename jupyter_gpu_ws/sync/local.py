"""A store in a folder on a mounted disk (the embedded default, NFS, a FUSE mount of a bucket).

Writes go to a temporary name beside the target and are renamed into place; a flush makes them
durable (an fsync per file and folder after a few writes, one syncfs after many).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import hashlib
import itertools
import os
import shutil
import threading
import time
import uuid
from typing import Any, Callable, Iterator

from ..diskio import start_writeback
from .backend import CHUNK, PART_SUFFIX, PreconditionFailed, RemoteFile, SourceChangedError
from .errors import LocalFileError, StoreFullError, StoreUnavailableError
from .hashing import file_hash

# A pass that wrote at most this many files fsyncs them and their folders; a larger one syncs
# the store's file system once (syncfs), which then costs less than many fsyncs. A few fsyncs
# never wait for unrelated dirty data (a checkpoint being written) as syncfs does.
FSYNC_FILES = 16
# From this size a copy that is to be flushed right after asks the kernel to start writing it
# to disk chunk by chunk.
EARLY_WRITEBACK = 64 * 2**20


def _raise_os_error(err: OSError, what: str) -> None:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        raise StoreFullError(f"The store's disk is full ({what})") from err
    raise StoreUnavailableError(f"Cannot write to the store ({what}): {err.strerror or err}") from err


class LocalBackend:
    """A folder on a mounted disk (the embedded default, NFS, a FUSE mount of a bucket)."""

    supports_rename = True

    def __init__(self, root: str, durable: bool = True) -> None:
        self.root = os.path.abspath(root)
        self.description = self.root
        self.durable = durable
        self._dirs: set[str] = set()
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

    def _path(self, key: str) -> str:
        if os.sep == "/":
            return f"{self.root}/{key}"
        return os.path.join(self.root, *key.split("/"))

    def _parent(self, path: str) -> None:
        parent = os.path.dirname(path)
        if parent not in self._dirs:
            os.makedirs(parent, exist_ok=True)
            self._dirs.add(parent)
            # Folders it may have created: their entries must be durable too.
            folder = parent
            while len(folder) > len(self.root):
                self._written(folder)
                folder = os.path.dirname(folder)

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

    def put(self, local: str, key: str, progress: Callable[[int], None] | None = None,
            check: Callable[[], bool] | None = None, flush_soon: bool = False) -> int:
        """Copy to a temporary name beside the target, verify, then rename into place.

        `check` runs once the data is written and before it becomes visible: False means the
        source changed meanwhile, and the copy is discarded. `flush_soon`: a large file starts
        going to disk while it is copied, so that the flush after it has little left to do;
        otherwise the copy runs at memory speed and the disk gets it at the flush.
        """
        target = self._path(key)
        parent = target.rpartition(os.sep)[0]
        # Short, whatever the name: any name the work directory's file system accepts can sync.
        tmp = f"{parent}{os.sep}.~{self._tmp_tag}{next(self._tmp_count)}{PART_SUFFIX}"
        # The source first: a file deleted meanwhile leaves no folder behind in the store.
        src = _open_source(local)
        try:
            try:
                self._parent(target)
                # Plain descriptors and a kernel-side copy: the fewest system calls per file.
                size = os.fstat(src).st_size
                dst = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_CLOEXEC, 0o666)
                try:
                    early = flush_soon and self.durable and size >= EARLY_WRITEBACK
                    stored = _copy_fd(src, dst, progress, early)
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
                self._dirs.discard(parent)  # the store's folder went away: make it again next time
            if err.errno == errno.ENAMETOOLONG:
                raise LocalFileError(f"its name is too long for the store ({err.strerror})") from None
            _raise_os_error(err, key)
        except BaseException:
            _remove_quietly(tmp)
            raise
        return size

    def abort_uploads(self, prefix: str) -> int:
        return 0  # a temporary file is all an interrupted write leaves here (sweep_parts)

    def copy(self, src: str, dst: str) -> None:
        """Keep a version: a hard link costs no space and no time; a copy where links fail."""
        target = self._path(dst)
        self._parent(target)
        try:
            os.link(self._path(src), target)
        except FileExistsError:
            pass
        except OSError:
            try:
                shutil.copy2(self._path(src), target)
            except OSError as err:
                _raise_os_error(err, dst)
        self._written(target)

    def get(self, key: str, local: str, progress: Callable[[int], None] | None = None) -> int:
        with open(self._path(key), "rb") as src, open(local, "wb") as dst:
            return _copy(src, dst, progress)

    def stat(self, key: str) -> RemoteFile | None:
        try:
            st = os.stat(self._path(key))
        except FileNotFoundError:
            return None
        return RemoteFile(key, st.st_size, st.st_mtime)

    def move(self, src: str, dst: str) -> None:
        target = self._path(dst)
        self._parent(target)
        try:
            os.replace(self._path(src), target)
        except OSError as err:
            _raise_os_error(err, src)
        self._written(target, self._path(src))
        self._prune_folders(os.path.dirname(self._path(src)))

    def delete(self, key: str) -> None:
        path = self._path(key)
        _remove_quietly(path)
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
            self._dirs.discard(folder)
            self._written(os.path.dirname(folder))
            folder = os.path.dirname(folder)

    def list(self, prefix: str) -> Iterator[RemoteFile]:
        base = self._path(prefix)
        for dirpath, dirnames, filenames in os.walk(base):
            rel_dir = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
            for name in filenames:
                if PART_SUFFIX in name:
                    continue
                try:
                    st = os.stat(os.path.join(dirpath, name))
                except FileNotFoundError:
                    continue
                yield RemoteFile(f"{rel_dir}/{name}", st.st_size, st.st_mtime)

    def sweep_parts(self, prefix: str, older_than: float) -> int:
        cutoff = time.time() - older_than
        removed = 0
        for dirpath, _, filenames in os.walk(self._path(prefix)):
            for name in filenames:
                path = os.path.join(dirpath, name)
                try:
                    if PART_SUFFIX in name and os.stat(path).st_mtime < cutoff:
                        os.unlink(path)
                        removed += 1
                except OSError:
                    continue
        return removed

    def read_bytes(self, key: str) -> bytes | None:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write_bytes(self, key: str, data: bytes) -> None:
        target = self._path(key)
        tmp = f"{target}{PART_SUFFIX}-{uuid.uuid4().hex[:8]}"
        try:
            self._parent(target)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except OSError as err:
            _remove_quietly(tmp)
            _raise_os_error(err, key)

    def read_tagged(self, key: str) -> tuple[bytes, str] | None:
        data = self.read_bytes(key)
        return None if data is None else (data, content_tag(data))

    def write_if(self, key: str, data: bytes, tag: str | None) -> str:
        """Compare and swap under an exclusive lock on a file beside the object: every writer of
        the object takes it, so reading, comparing and replacing happen as one step. The kernel
        drops the lock when its holder dies, so a killed runtime never leaves it taken."""
        target = self._path(key)
        try:
            self._parent(target)
            fd = os.open(f"{target}.lock", os.O_RDWR | os.O_CREAT | O_CLOEXEC, 0o666)
        except OSError as err:
            _raise_os_error(err, key)
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
            return (f"the store is a FUSE mount ({fstype}): its file locks do not reach other machines, "
                    "so the lease cannot stop a runtime elsewhere from writing")
        return None

    def same_content(self, key: str, local: str, remote: RemoteFile | None = None) -> bool | None:
        try:
            if os.path.getsize(self._path(key)) != os.path.getsize(local):
                return False
            return file_hash(self._path(key)) == file_hash(local)
        except FileNotFoundError:
            return False

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
        for path in sorted(paths, key=lambda p: (-p.count(os.sep), p)):  # files and deep folders first
            try:
                fd = os.open(path, os.O_RDONLY | O_CLOEXEC)
            except FileNotFoundError:
                continue  # moved or replaced since: what took its place is listed too
            except OSError as err:
                _raise_os_error(err, "flush")
            try:
                os.fsync(fd)
            except OSError as err:
                _raise_os_error(err, "flush")
            finally:
                os.close(fd)


def _copy(src: Any, dst: Any, progress: Callable[[int], None] | None) -> int:
    if progress is None:
        # Kernel-side copy where possible (copy_file_range / sendfile).
        shutil.copyfileobj(src, dst, CHUNK)
        return dst.tell()
    total = 0
    while True:
        chunk = src.read(CHUNK)
        if not chunk:
            return total
        dst.write(chunk)
        total += len(chunk)
        progress(len(chunk))


O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# copy_file_range refusals that mean "not between these two files": fall back to read/write.
_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBADF,
                   errno.EPERM}


def _copy_fd(src: int, dst: int, progress: Callable[[int], None] | None, early_writeback: bool = False) -> int:
    """Copy from the current offsets to the end of `src`: in the kernel (copy_file_range) where
    it can, else through a buffer. Progress is reported per chunk of at most CHUNK bytes;
    `early_writeback` starts writing each chunk to disk without waiting for it."""
    total = 0
    kernel = hasattr(os, "copy_file_range")
    step = CHUNK if progress or early_writeback else 1 << 30
    while kernel:
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
    while True:
        chunk = os.read(src, CHUNK)
        if not chunk:
            return total
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view):]
        if early_writeback:
            start_writeback(dst, total, len(chunk))
        total += len(chunk)
        if progress:
            progress(len(chunk))


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
                raise StoreUnavailableError(f"{key} stayed locked by another writer for {LOCK_WAIT:.0f} s") from None
            time.sleep(0.01)
        except OSError as err:
            _raise_os_error(err, f"locking {key}")


def _fsync_folder(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def mount_type(path: str) -> str:
    """The file-system type of the mount holding `path` (Linux's mountinfo), or '' if unknown."""
    real = os.path.realpath(path)
    best, fstype = "", ""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                point = fields[4].encode().decode("unicode_escape")
                rest = fields[fields.index("-") + 1:]
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, fstype = point, rest[0]
    except (OSError, ValueError, IndexError):
        return ""
    return fstype


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
