"""A store in a folder on a mounted disk (the embedded default, NFS, a FUSE mount of a bucket).

Writes go to a temporary name beside the target and are renamed into place; a flush makes them
durable (an fsync per file and folder after a few writes, one syncfs after many).
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import os
import shutil
import stat
import threading
import time
import uuid
from typing import Any, Callable, Iterator

from ..diskio import start_writeback
from .backend import CHUNK, PART_SUFFIX, RemoteFile, SourceChangedError
from .errors import StoreFullError, StoreUnavailableError

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
        self._round_trips: bool | None = None

    @property
    def round_trips(self) -> bool:
        """Whether the folder is on a network file system (NFS, SMB, a FUSE mount of a bucket):
        each read then waits for a round trip, and a restore keeps many in flight."""
        if self._round_trips is None:
            self._round_trips = on_network_file_system(self.root)
        return self._round_trips

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
        parent, _, name = target.rpartition(os.sep)
        tmp = f"{parent}{os.sep}.~{name}{PART_SUFFIX}-{self._tmp_tag}{next(self._tmp_count)}"
        try:
            self._parent(target)
            # Plain descriptors and a kernel-side copy: the fewest system calls per file.
            src = os.open(local, os.O_RDONLY | O_CLOEXEC)
            try:
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
            raise
        except OSError as err:
            _remove_quietly(tmp)
            if isinstance(err, FileNotFoundError):
                if not os.path.exists(local):
                    raise
                self._dirs.discard(parent)  # the store's folder went away: make it again next time
            _raise_os_error(err, key)
        except BaseException:
            _remove_quietly(tmp)
            raise
        return size

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

    def read_into(self, key: str, fd: int, offset: int = 0, length: int | None = None,
                  progress: Callable[[int], None] | None = None, etag: str | None = None) -> int:
        """A kernel-side copy (copy_file_range) of the file, or of one range of it, into `fd`.

        Opened without following a final symbolic link and without blocking (a FIFO would
        otherwise wait forever), and read only if it is a regular file."""
        try:
            src = os.open(self._path(key), os.O_RDONLY | O_CLOEXEC | O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            raise
        except OSError as err:
            raise StoreUnavailableError(f"Cannot read {key} from the store: {err.strerror or err}") from err
        try:
            st = os.fstat(src)
            if not stat.S_ISREG(st.st_mode):
                raise StoreUnavailableError(f"{key} in the store is not a regular file")
            return _copy_range(src, fd, offset, st.st_size if length is None else length, progress)
        except OSError as err:
            if err.errno == errno.ENOSPC:
                raise  # the work directory's disk is full: the caller says so
            raise StoreUnavailableError(f"Cannot read {key} from the store: {err.strerror or err}") from err
        finally:
            os.close(src)

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

    def delete(self, key: str) -> None:
        _remove_quietly(self._path(key))

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
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
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


def _copy_range(src: int, dst: int, offset: int, length: int | None,
                progress: Callable[[int], None] | None) -> int:
    """Copy `length` bytes (None: to the end) at `offset` of `src` to the same offset of `dst`,
    in the kernel where it can, else through a buffer; neither file's position moves, so
    several threads may copy ranges of the same pair at once."""
    total = 0
    step = CHUNK if progress else 1 << 30
    kernel = hasattr(os, "copy_file_range")
    while length is None or total < length:
        want = step if length is None else min(step, length - total)
        n = -1
        if kernel:
            try:
                n = os.copy_file_range(src, dst, want, offset + total, offset + total)
            except OSError as err:
                if err.errno not in _NO_KERNEL_COPY:
                    raise
                kernel = False
        if n <= 0:  # no kernel copy here, or it copied nothing: read to be sure of the end
            chunk = os.pread(src, min(want, CHUNK), offset + total)
            if not chunk:
                break
            view, at = memoryview(chunk), offset + total
            while view:
                written = os.pwrite(dst, view, at)
                view, at = view[written:], at + written
            n = len(chunk)
        total += n
        if progress:
            progress(n)
    return total


# File system types (as /proc/self/mountinfo names them) whose requests cross a network.
_NETWORK_FS = ("nfs", "cifs", "smb", "9p", "ceph", "glusterfs", "lustre", "afs", "fuse", "gpfs", "beegfs")


def on_network_file_system(path: str) -> bool:
    """Whether `path` (or, if it does not exist yet, the folder that will hold it) is on a
    network file system, by the type of the mount that holds it."""
    try:
        import psutil

        mounts = psutil.disk_partitions(all=True)
    except Exception:  # noqa: BLE001 - unknown: treat it as a local disk, as before
        return False
    real = os.path.realpath(path)
    best, kind = "", ""
    for mount in mounts:
        point = mount.mountpoint.rstrip("/") or "/"
        inside = real == point or real.startswith(point if point == "/" else point + "/")
        if inside and len(point) > len(best):
            best, kind = point, mount.fstype
    return kind.startswith(_NETWORK_FS)


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
