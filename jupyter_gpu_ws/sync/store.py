"""The store: where the mirror and the engine's state live, behind a small backend interface.

Layout, so that the mirror stays browsable with ordinary tools:

    <store_url>/<workspace>/files/<relative path>    the mirror
    <store_url>/<workspace>/.gpuws/                   lease.json, versions/, …

A backend makes each write atomic (a reader never sees a partial file) and each read land
complete or not at all. `LocalBackend` writes a temporary name beside the target and renames
it; `FsspecBackend` relies on the object store's single PUT or completed multipart upload,
and on temporary name + move elsewhere.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import hashlib
import itertools
import json
import os
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol
from urllib.parse import urlparse

from ..diskio import start_writeback
from . import s3direct
from .errors import StoreConfigError, StoreFullError, StoreUnavailableError

PART_SUFFIX = ".gpuws-part"
CHUNK = 8 * 2**20
# Up to this size a file is read whole and sent in one PUT: a consistent snapshot, one request.
SMALL_FILE = 16 * 2**20
# Moving or copying a complete upload into place: tries, and the first pause between them.
FINISH_ATTEMPTS = 4
FINISH_BACKOFF = 0.05
# A pass that wrote at most this many files fsyncs them and their folders; a larger one syncs
# the store's file system once (syncfs), which then costs less than many fsyncs. A few fsyncs
# never wait for unrelated dirty data (a checkpoint being written) as syncfs does.
FSYNC_FILES = 16
# From this size a copy that is to be flushed right after asks the kernel to start writing it
# to disk chunk by chunk.
EARLY_WRITEBACK = 64 * 2**20
# Parts of a direct S3 multipart upload (S3 allows 5 MiB to 5 GiB, at most 10,000 parts).
S3_PART = 16 * 2**20


@dataclass
class RemoteFile:
    key: str  # relative to the backend's root, '/' separated
    size: int
    mtime: float | None


class Backend(Protocol):
    """The operations the engine needs from any storage; keys are '/'-separated."""

    description: str
    supports_rename: bool
    # Whether a write becomes durable only at flush() (a local folder), not once it completes.
    flushes: bool

    def put(self, local: str, key: str, progress: Callable[[int], None] | None = None,
            check: Callable[[], bool] | None = None, flush_soon: bool = False) -> int:
        """Make `key` hold the local file, whole or not at all. `flush_soon`: the caller will
        wait for a flush right after, so the write may as well head for the disk at once."""
        ...
    def copy(self, src: str, dst: str) -> None: ...
    def get(self, key: str, local: str, progress: Callable[[int], None] | None = None) -> int: ...
    def stat(self, key: str) -> RemoteFile | None: ...
    def move(self, src: str, dst: str) -> None: ...
    def delete(self, key: str) -> None: ...
    def list(self, prefix: str) -> Iterator[RemoteFile]: ...

    def sweep_parts(self, prefix: str, older_than: float) -> int:
        """Remove temporary files of writes that died (a killed process) older than that many
        seconds; return how many. Younger ones may be another writer's, in flight."""
        ...
    def read_bytes(self, key: str) -> bytes | None: ...
    def write_bytes(self, key: str, data: bytes) -> None: ...

    def flush(self) -> None:
        """Make what was written so far durable (a no-op where a completed write already is);
        safe to call from several threads: it returns once everything written before the call
        is durable."""
        ...

    def unflushed(self) -> bool:
        """Whether writes since the last flush are not yet durable."""
        ...

    def close(self) -> None: ...


def _raise_os_error(err: OSError, what: str) -> None:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        raise StoreFullError(f"The store's disk is full ({what})") from err
    raise StoreUnavailableError(f"Cannot write to the store ({what}): {err.strerror or err}") from err


class SourceChangedError(Exception):
    """The local file changed while it was read: nothing was made visible; try again."""


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


class FsspecBackend:
    """Any fsspec file system: s3://, gs://, az://, sftp://, memory://, …"""

    def __init__(self, fs: Any, root: str, max_concurrency: int = 4) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self.description = f"{protocol}://{self.root}"
        # Object stores make a PUT visible only once complete; file-like ones need a rename.
        self.object_store = protocol in ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "memory")
        self.supports_rename = not self.object_store
        self.max_concurrency = max_concurrency
        # Small files to S3: one lean signed PUT each (s3direct), made on first use.
        self._direct: s3direct.DirectPut | None = None
        self._direct_ready = protocol not in ("s3", "s3a")
        self._direct_lock = threading.Lock()

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def direct_put(self) -> s3direct.DirectPut | None:
        """The lean PUT for small files where the store is a plain S3 bucket, else None."""
        if not self._direct_ready:
            with self._direct_lock:
                if not self._direct_ready:
                    self._direct = s3direct.for_s3fs(self.fs, self.root.partition("/")[0])
                    self._direct_ready = True
        return self._direct

    def close(self) -> None:
        if self._direct is not None:
            self._direct.close()

    def put(self, local: str, key: str, progress: Callable[[int], None] | None = None,
            check: Callable[[], bool] | None = None, flush_soon: bool = False) -> int:
        """Make `key` hold the file, complete or not at all (a completed PUT is durable).

        Small files are read into memory and sent in one PUT once `check` confirms the read
        was consistent. On S3, larger ones go straight to the key as a multipart upload that is
        completed (made visible) only once `check` passes. Elsewhere they go to a temporary key
        first and are copied into place (a server-side copy on object stores) once it passes.
        """
        size = os.path.getsize(local)
        target = self._path(key)
        tmp = f"{self.root}/.gpuws-tmp/{uuid.uuid4().hex}{PART_SUFFIX}"
        sent: bytes | None = None
        try:
            if self.object_store and size <= SMALL_FILE:
                with open(local, "rb") as f:
                    data = f.read()
                if len(data) != size or (check is not None and not check()):
                    raise SourceChangedError(key)
                md5 = hashlib.md5(data).digest()
                direct = self.direct_put()
                if direct is not None and direct.put(target.partition("/")[2], data, md5):
                    if progress:
                        progress(size)
                    return size  # stored, and its ETag is the MD5 of what was sent
                # Anything else (a failure above included) goes through s3fs, with its retries
                # and its errors.
                out = self.fs.pipe_file(target, data)
                sent = data
                if progress:
                    progress(size)
                # S3 answers a PUT with the object's ETag, the MD5 of a single PUT: a match
                # proves the whole body is stored, without a second request to look.
                etag = str(out.get("ETag", "")).strip('"') if isinstance(out, dict) else ""
                if len(etag) == 32 and "-" not in etag:
                    if etag != md5.hex():
                        raise StoreUnavailableError(f"{key}: the store's checksum does not match what was sent")
                    return size
            elif self.object_store and hasattr(self.fs, "_call_s3"):
                from fsspec.asyn import sync

                sync(self.fs.loop, self._s3_multipart, local, target, size, progress, check)
                self.fs.invalidate_cache(target)
            else:
                callback = _FsspecCallback(progress) if progress else None
                kwargs: dict[str, Any] = {"callback": callback} if callback else {}
                if not self.object_store:
                    self.fs.makedirs(self.fs._parent(tmp), exist_ok=True)
                    self.fs.makedirs(self.fs._parent(target), exist_ok=True)
                try:
                    self.fs.put_file(local, tmp, **kwargs)  # a failure may leave part of it
                    if int(self.fs.info(tmp)["size"]) != size or (check is not None and not check()):
                        raise SourceChangedError(key)
                    self._into_place(tmp, target)
                finally:
                    try:
                        self.fs.rm_file(tmp)
                    except Exception:
                        pass
            info = self.fs.info(target)
        except SourceChangedError:
            raise
        except FileNotFoundError:
            if not os.path.exists(local):
                raise
            raise StoreUnavailableError(f"The store lost {key} while writing it") from None
        except Exception as err:  # OSError, botocore and friends: map to one clear line
            raise _remote_error(err, key) from err
        if int(info.get("size", -1)) != size:
            raise StoreUnavailableError(f"{key}: the store has {info.get('size')} bytes, expected {size}")
        # Where the store has a checksum (S3's ETag of a single PUT is its MD5), compare it.
        etag = str(info.get("ETag", "")).strip('"')
        if sent is not None and len(etag) == 32 and etag != hashlib.md5(sent).hexdigest():
            raise StoreUnavailableError(f"{key}: the store's checksum does not match what was sent")
        return size

    def _into_place(self, tmp: str, target: str) -> None:
        """Copy (object stores) or move the complete temporary file to its name.

        A transient failure here is retried on the spot: starting the whole upload again
        would send all the data a second time for one lost reply.
        """
        for attempt in range(FINISH_ATTEMPTS):
            try:
                if self.object_store:
                    self.fs.copy(tmp, target)
                else:
                    self.fs.mv(tmp, target)
                return
            except Exception as err:
                if attempt + 1 == FINISH_ATTEMPTS or not isinstance(_remote_error(err, target), StoreUnavailableError):
                    raise
            if not self.object_store and not self.fs.exists(tmp):
                return  # the move did happen and only its reply was lost; put() checks the size
            time.sleep(FINISH_BACKOFF * 2**attempt)

    def _parent_dir(self, path: str) -> None:
        """File-like stores (sftp, smb, local, …) need the folder before a copy or move into it."""
        if not self.object_store:
            self.fs.makedirs(self.fs._parent(path), exist_ok=True)

    async def _s3_multipart(self, local: str, target: str, size: int, progress: Callable[[int], None] | None,
                            check: Callable[[], bool] | None) -> None:
        """Parts in parallel (max_concurrency at a time), read from the file as they go; the
        upload is completed only if every part read in full and the file did not change, and is
        aborted otherwise, so the key never shows a partial or torn file."""
        fs = self.fs
        bucket, key, _ = fs.split_path(target)
        part = max(S3_PART, -(-size // 10_000))
        loop = asyncio.get_running_loop()
        limit = asyncio.Semaphore(max(1, self.max_concurrency))
        fd = os.open(local, os.O_RDONLY | O_CLOEXEC)
        try:
            upload = await fs._call_s3("create_multipart_upload", Bucket=bucket, Key=key)
            upload_id = upload["UploadId"]

            async def send(number: int, offset: int) -> dict[str, Any]:
                async with limit:
                    body = await loop.run_in_executor(None, os.pread, fd, part, offset)
                    if len(body) != min(part, size - offset):
                        raise SourceChangedError(target)
                    out = await fs._call_s3("upload_part", Bucket=bucket, Key=key, UploadId=upload_id,
                                            PartNumber=number, Body=body)
                if progress:
                    progress(len(body))
                return {"PartNumber": number, "ETag": out["ETag"]}

            tasks = [asyncio.ensure_future(send(i + 1, offset)) for i, offset in enumerate(range(0, size, part))]
            try:
                parts = await asyncio.gather(*tasks)
                if check is not None and not check():
                    raise SourceChangedError(target)
                await fs._call_s3("complete_multipart_upload", Bucket=bucket, Key=key, UploadId=upload_id,
                                  MultipartUpload={"Parts": parts})
            except BaseException:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                try:
                    await fs._call_s3("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload_id)
                except Exception:  # noqa: BLE001 - the store's lifecycle rules clear leftovers
                    pass
                raise
        finally:
            os.close(fd)

    def copy(self, src: str, dst: str) -> None:
        try:
            self._parent_dir(self._path(dst))
            self.fs.copy(self._path(src), self._path(dst))
        except Exception as err:
            raise _remote_error(err, src) from err

    def get(self, key: str, local: str, progress: Callable[[int], None] | None = None) -> int:
        try:
            self.fs.get_file(self._path(key), local)
        except Exception as err:
            raise _remote_error(err, key) from err
        size = os.path.getsize(local)
        if progress:
            progress(size)
        return size

    def stat(self, key: str) -> RemoteFile | None:
        try:
            info = self.fs.info(self._path(key))
        except FileNotFoundError:
            return None
        except Exception as err:
            raise _remote_error(err, key) from err
        if info.get("type") == "directory":
            return None
        return RemoteFile(key, int(info["size"]), _mtime(info))

    def move(self, src: str, dst: str) -> None:
        try:
            self._parent_dir(self._path(dst))
            self.fs.mv(self._path(src), self._path(dst))
        except Exception as err:
            raise _remote_error(err, src) from err

    def delete(self, key: str) -> None:
        try:
            self.fs.rm_file(self._path(key))
        except FileNotFoundError:
            pass
        except Exception as err:
            raise _remote_error(err, key) from err

    def list(self, prefix: str) -> Iterator[RemoteFile]:
        base = self._path(prefix)
        try:
            self.fs.invalidate_cache(base)
            found = self.fs.find(base, detail=True)
        except FileNotFoundError:
            return
        except Exception as err:
            raise _remote_error(err, prefix) from err
        for path, info in found.items():
            if PART_SUFFIX in path or info.get("type") == "directory":
                continue
            yield RemoteFile(path[len(self.root) + 1:], int(info["size"]), _mtime(info))

    def sweep_parts(self, prefix: str, older_than: float) -> int:
        cutoff = time.time() - older_than
        removed = 0
        for base in (self._path(prefix), f"{self.root}/.gpuws-tmp"):
            try:
                self.fs.invalidate_cache(base)
                found = self.fs.find(base, detail=True)
            except Exception:  # nothing there, or the store is away: the next start sweeps
                continue
            for path, info in found.items():
                mtime = _mtime(info)
                if mtime is None:  # stores that only say when an object was created
                    mtime = _mtime({"mtime": info.get("created")})
                if PART_SUFFIX in path and mtime is not None and mtime < cutoff:
                    try:
                        self.fs.rm_file(path)
                        removed += 1
                    except Exception:
                        continue
        return removed

    def read_bytes(self, key: str) -> bytes | None:
        try:
            return self.fs.cat_file(self._path(key))
        except FileNotFoundError:
            return None
        except Exception as err:
            raise _remote_error(err, key) from err

    def write_bytes(self, key: str, data: bytes) -> None:
        try:
            if self.object_store:
                self.fs.pipe_file(self._path(key), data)
            else:
                tmp = f"{self._path(key)}{PART_SUFFIX}-{uuid.uuid4().hex[:8]}"
                self.fs.makedirs(self.fs._parent(tmp), exist_ok=True)
                try:
                    self.fs.pipe_file(tmp, data)
                    self.fs.mv(tmp, self._path(key))
                except BaseException:
                    try:
                        self.fs.rm_file(tmp)
                    except Exception:
                        pass
                    raise
        except Exception as err:
            raise _remote_error(err, key) from err

    flushes = False  # a completed PUT is durable

    def flush(self) -> None:
        pass

    def unflushed(self) -> bool:
        return False


class _FsspecCallback:
    """fsspec's callback protocol, reporting bytes as they go."""

    def __init__(self, progress: Callable[[int], None]) -> None:
        self.progress = progress
        self.value = 0

    def set_size(self, size: int) -> None:
        pass

    def absolute_update(self, value: int) -> None:
        self.relative_update(value - self.value)

    def relative_update(self, inc: int = 1) -> None:
        self.value += inc
        self.progress(inc)

    def branched(self, *args: Any, **kwargs: Any) -> None:
        return None

    def call(self, *args: Any, **kwargs: Any) -> None:
        pass


def _mtime(info: dict[str, Any]) -> float | None:
    value = info.get("mtime") or info.get("LastModified") or info.get("last_modified")
    if value is None:
        return None
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _remote_error(err: Exception, key: str) -> Exception:
    """One clear line for the many ways a remote store fails."""
    name = type(err).__name__
    text = str(err) or name
    if isinstance(err, (StoreUnavailableError, StoreFullError, StoreConfigError)):
        return err
    if name in ("NoCredentialsError", "PartialCredentialsError") or "credentials" in text.lower():
        return StoreConfigError(f"No credentials for the store: {text}")
    if isinstance(err, PermissionError) or "AccessDenied" in text or "Forbidden" in text:
        return StoreConfigError(f"The store refused access to {key}: {text}")
    if "NoSuchBucket" in text or "bucket does not exist" in text.lower():
        return StoreConfigError(f"The store's bucket does not exist: {text}")
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreFullError(f"The store is full ({key})")
    if "connect" in text.lower() or isinstance(err, (ConnectionError, TimeoutError)):
        return StoreUnavailableError(f"Cannot reach the store: {text}")
    return StoreUnavailableError(f"The store failed on {key}: {text}")


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


def open_backend(url: str, storage_options: dict[str, Any] | None = None, durable: bool = True,
                 max_concurrency: int = 4) -> Backend:
    """A backend for a store URL: a local path or file:// URL, or any fsspec URL."""
    if not url or not url.strip():
        raise StoreConfigError("The store URL is empty: set GPUWS_STORE or c.GpuWorkspace.store_url")
    url = url.strip()
    parsed = urlparse(url)
    if "://" not in url:
        if "::" in url:
            raise StoreConfigError(f"Chained URLs are not supported as a store: {url!r}")
        return LocalBackend(os.path.expanduser(url), durable)
    if parsed.scheme in ("file", "local"):
        if parsed.netloc not in ("", "localhost"):
            raise StoreConfigError(f"A file:// store URL cannot name a host: {url!r}")
        return LocalBackend(parsed.path, durable)
    try:
        import fsspec
        from fsspec.core import url_to_fs

        fsspec.get_filesystem_class(parsed.scheme)
    except ValueError:
        raise StoreConfigError(f"Unknown storage protocol {parsed.scheme!r} in {url!r}") from None
    except ImportError as err:
        raise StoreConfigError(f"The {parsed.scheme}:// store needs a package that is not installed: {err}") from None
    if not parsed.netloc and parsed.scheme in ("s3", "gs", "gcs", "az", "abfs"):
        raise StoreConfigError(f"The store URL {url!r} names no bucket")
    options = dict(storage_options or {})
    if parsed.scheme in ("s3", "s3a"):
        options.setdefault("use_listings_cache", False)
        # Fail fast on an unreachable endpoint: the engine has its own retries with back-off.
        options.setdefault("config_kwargs", {"connect_timeout": 5, "retries": {"max_attempts": 2}})
        options.setdefault("max_concurrency", max_concurrency)
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            options.setdefault("endpoint_url", endpoint)
    try:
        fs, root = url_to_fs(url, **options)
    except ImportError as err:
        raise StoreConfigError(f"The {parsed.scheme}:// store needs a package that is not installed: {err}") from None
    except Exception as err:
        raise StoreConfigError(f"Cannot open the store {url!r}: {err}") from err
    return FsspecBackend(fs, root, max_concurrency)


class Store:
    """One workspace inside a backend: the mirror under files/, the state under .gpuws/."""

    def __init__(self, backend: Backend, workspace: str) -> None:
        if not workspace or "/" in workspace or workspace in (".", ".."):
            raise StoreConfigError(f"Invalid workspace name {workspace!r}")
        self.backend = backend
        self.workspace = workspace

    def file_key(self, rel: str) -> str:
        return f"{self.workspace}/files/{rel}"

    def state_key(self, name: str) -> str:
        return f"{self.workspace}/.gpuws/{name}"

    def version_key(self, rel: str, stamp: str) -> str:
        return f"{self.workspace}/.gpuws/versions/{rel}/{stamp}"

    def read_json(self, name: str) -> Any:
        data = self.backend.read_bytes(self.state_key(name))
        return None if data is None else json.loads(data)

    def write_json(self, name: str, value: Any) -> None:
        self.backend.write_bytes(self.state_key(name), json.dumps(value, indent=1).encode())

    def list_files(self) -> dict[str, RemoteFile]:
        prefix = f"{self.workspace}/files/"
        return {f.key[len(prefix):]: f for f in self.backend.list(f"{self.workspace}/files")}

    def list_versions(self, rel: str | None = None) -> list[tuple[str, str, RemoteFile]]:
        """(relative path, stamp, file) for every kept version, or those of one path."""
        prefix = f"{self.workspace}/.gpuws/versions/"
        base = prefix + rel if rel else prefix.rstrip("/")
        out = []
        for f in self.backend.list(base):
            path, _, stamp = f.key[len(prefix):].rpartition("/")
            if rel is None or path == rel:
                out.append((path, stamp, f))
        return sorted(out, key=lambda item: (item[0], item[1]))


def version_stamp(now: float | None = None) -> str:
    """Sortable UTC time with microseconds: 20261129T154210.123456Z."""
    now = time.time() if now is None else now
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
