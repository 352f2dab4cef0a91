"""A store on any other fsspec file system: sftp://, smb://, hf://, memory://, … (S3, GCS and
Azure go through obstore: store/objectstore.py).

A file-like system gets a temporary name and a move into place; an object store reached through
fsspec makes a PUT visible only once complete. fsspec offers no compare-and-swap, so the lease
is advisory here (the status says so), except in memory://, held by one process.
"""

from __future__ import annotations

import builtins  # the class defines a method `list`: its annotations say builtins.list
import errno
import hashlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlparse, urlsplit

from ..diskio import pwrite_all
from .backend import (
    PART_SUFFIX,
    TEMP_FOLDER,
    NoFolders,
    PreconditionFailed,
    RemoteFile,
    SourceChangedError,
)
from .errors import (
    LocalFileError,
    StoreConfigError,
    StoreFullError,
    StoreUnavailableError,
    SyncError,
)
from .faults import connection_fault, remember
from .local import O_CLOEXEC, content_tag
from .redact import redact

CHUNK_READ = 8 * 2**20

log = logging.getLogger(__name__)

# Up to this size a file is read whole and sent in one PUT: a consistent snapshot, one request.
SMALL_FILE = 16 * 2**20
# Moving or copying a complete upload into place: tries, and the first pause between them.
FINISH_ATTEMPTS = 4
FINISH_BACKOFF = 0.05


class FsspecBackend(NoFolders):
    """Any fsspec file system but the three clouds: sftp://, smb://, memory://, …"""

    def __init__(self, fs: Any, root: str, max_concurrency: int = 4) -> None:
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self.fs = fs  # a Session for sftp://, ftp://, smb:// (see open_session)
        self.root = root.rstrip("/")
        self.description = f"{protocol}://{self.root}"
        self.host: str | None = None  # as the URL names it (host:port), for its faults' lines
        # Object stores make a PUT visible only once complete; file-like ones need a rename.
        self.object_store = protocol in ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "memory")
        self.supports_rename = not self.object_store
        self.round_trips = protocol not in ("memory",)
        self.max_concurrency = max_concurrency
        self.protocol = protocol
        self._swap_lock = threading.Lock()

    def _error(self, err: Exception, key: str) -> Exception:
        return _remote_error(err, key, self.host)

    @property
    def skipped(self) -> dict[str, str]:
        """Nothing is skipped here: what a key holds is the remote file system's own answer."""
        return {}

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def close(self) -> None:
        """A session's connection is closed; other file systems hold nothing between calls."""
        if isinstance(self.fs, Session):
            self.fs.close()

    def put(
        self,
        local: str,
        key: str,
        progress: Callable[[int], None] | None = None,
        check: Callable[[], bool] | None = None,
        flush_soon: bool = False,
    ) -> int:
        """Make `key` hold the file, complete or not at all (a completed PUT is durable).

        On an object store, small files are read into memory and sent in one PUT once `check`
        confirms the read was consistent. Everything else goes to a temporary key first and is
        moved (or copied) into place once it passes.
        """
        size = _readable_size(local)
        target = self._path(key)
        tmp = f"{self.root}/{TEMP_FOLDER}/{uuid.uuid4().hex}{PART_SUFFIX}"
        sent: bytes | None = None
        try:
            if self.object_store and size <= SMALL_FILE:
                with open(local, "rb") as f:
                    data = f.read()
                if len(data) != size or (check is not None and not check()):
                    raise SourceChangedError(key)
                self.fs.pipe_file(target, data)
                sent = data
                if progress:
                    progress(size)
            else:
                callback = _FsspecCallback(progress) if progress else None
                kwargs: dict[str, Any] = {"callback": callback} if callback else {}
                if not self.object_store:
                    self.fs.makedirs(self.fs._parent(tmp), exist_ok=True)
                    self.fs.makedirs(self.fs._parent(target), exist_ok=True)
                try:
                    self.fs.put_file(local, tmp, **kwargs)  # a failure may leave part of it
                    if int(self.fs.info(tmp)["size"]) != size or (
                        check is not None and not check()
                    ):
                        raise SourceChangedError(key)
                    self._into_place(tmp, target)
                finally:
                    try:
                        self.fs.rm_file(tmp)
                    except Exception:
                        pass
            info = self.fs.info(target)
        except (SourceChangedError, SyncError):
            raise
        except FileNotFoundError:
            if not os.path.exists(local):
                raise
            raise StoreUnavailableError(f"The store lost {key} while writing it") from None
        except Exception as err:  # OSError, botocore and friends: map to one clear line
            raise self._error(err, key) from err
        if int(info.get("size", -1)) != size:
            raise StoreUnavailableError(
                f"{key}: the store has {info.get('size')} bytes, expected {size}"
            )
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
                if attempt + 1 == FINISH_ATTEMPTS or not isinstance(
                    self._error(err, target), StoreUnavailableError
                ):
                    raise
            if not self.object_store and not self.fs.exists(tmp):
                return  # the move did happen and only its reply was lost; put() checks the size
            time.sleep(FINISH_BACKOFF * 2**attempt)

    def _parent_dir(self, path: str) -> None:
        """File-like stores (sftp, smb, local, …) need the folder before a copy or move into it."""
        if not self.object_store:
            self.fs.makedirs(self.fs._parent(path), exist_ok=True)

    def copy(self, src: str, dst: str) -> None:
        try:
            self._parent_dir(self._path(dst))
            try:
                self.fs.copy(self._path(src), self._path(dst))
            except NotImplementedError:  # no server-side copy (sftp): through this machine
                self._copy_through(self._path(src), self._path(dst))
        except Exception as err:
            raise self._error(err, src) from err

    def _copy_through(self, src: str, dst: str) -> None:
        """Read the file and write it to a temporary name beside `dst`, then move it there."""
        tmp = f"{dst}{PART_SUFFIX}-{uuid.uuid4().hex[:8]}"
        try:
            with self.fs.open(src, "rb") as reader, self.fs.open(tmp, "wb") as writer:
                while chunk := reader.read(CHUNK_READ):
                    writer.write(chunk)
            self.fs.mv(tmp, dst)
        except BaseException:
            try:
                self.fs.rm_file(tmp)
            except Exception:  # noqa: BLE001 - swept with the temporaries
                pass
            raise

    def get(self, key: str, local: str, progress: Callable[[int], None] | None = None) -> int:
        try:
            self.fs.get_file(self._path(key), local)
        except Exception as err:
            raise self._error(err, key) from err
        size = os.path.getsize(local)
        if progress:
            progress(size)
        return size

    def reads_many(self) -> bool:
        return False  # one read_into per file, on the workers

    def read_into(
        self,
        key: str,
        fd: int,
        offset: int = 0,
        length: int | None = None,
        progress: Callable[[int], None] | None = None,
        etag: str | None = None,
    ) -> int:
        """The object (or `length` bytes of it from `offset`) at the same offsets of `fd`."""
        path = self._path(key)
        try:
            if length is None:
                data = self.fs.cat_file(path)
            else:
                data = self.fs.cat_file(path, start=offset, end=offset + length)
        except FileNotFoundError:
            raise
        except Exception as err:
            raise self._error(err, key) from err
        pwrite_all(fd, data, offset)
        if progress:
            progress(len(data))
        return len(data)

    def stat(self, key: str) -> RemoteFile | None:
        try:
            info = self.fs.info(self._path(key))
        except FileNotFoundError:
            return None
        except Exception as err:
            raise self._error(err, key) from err
        if info.get("type") == "directory":
            return None
        return RemoteFile(key, int(info["size"]), _mtime(info), _etag(info))

    def move(self, src: str, dst: str) -> None:
        try:
            self._parent_dir(self._path(dst))
            self.fs.mv(self._path(src), self._path(dst))
        except Exception as err:
            raise self._error(err, src) from err

    def delete(self, key: str) -> None:
        try:
            self.fs.rm_file(self._path(key))
        except FileNotFoundError:
            pass
        except Exception as err:
            raise self._error(err, key) from err

    def list(self, prefix: str) -> Iterator[RemoteFile]:
        base = self._path(prefix)
        try:
            self.fs.invalidate_cache(base)
            found = self.fs.find(base, detail=True)
        except FileNotFoundError:
            return
        except Exception as err:
            raise self._error(err, prefix) from err
        for path, info in found.items():
            if PART_SUFFIX in path or info.get("type") == "directory":
                continue
            yield RemoteFile(
                path[len(self.root) + 1 :], int(info["size"]), _mtime(info), _etag(info)
            )

    def folders(self, prefix: str) -> builtins.list[str]:
        base = self._path(prefix) if prefix else self.root
        try:
            self.fs.invalidate_cache(base)
            entries = self.fs.ls(base, detail=True)
        except FileNotFoundError:
            return []
        except Exception as err:
            raise self._error(err, prefix or "the store") from err
        return sorted(
            e["name"].rstrip("/").rsplit("/", 1)[-1]
            for e in entries
            if e.get("type") == "directory"
        )

    def sweep_parts(self, prefix: str, older_than: float) -> int:
        cutoff = time.time() - older_than
        removed = 0
        for base in (self._path(prefix), f"{self.root}/{TEMP_FOLDER}"):
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
            raise self._error(err, key) from err

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
            raise self._error(err, key) from err

    # -- compare-and-swap (the lease) and content comparison ------------------------------------

    def read_tagged(self, key: str) -> tuple[bytes, str] | None:
        data = self.read_bytes(key)
        return None if data is None else (data, content_tag(data))

    def write_if(self, key: str, data: bytes, tag: str | None) -> str:
        """Read, compare and write under a lock of this process: exact for memory://, and only
        advisory between machines (conditional_writes() says so)."""
        with self._swap_lock:
            current = self.read_tagged(key)
            if (current is None) != (tag is None) or (current is not None and current[1] != tag):
                raise PreconditionFailed(key)
            self.write_bytes(key, data)
            return content_tag(data)

    def conditional_writes(self) -> str | None:
        if self.protocol == "memory":
            return None  # one process holds the whole store
        return (
            f"one writer is not enforced on this store: {self.protocol}:// offers no compare-and-swap, so the "
            "lease cannot stop a runtime elsewhere from writing"
        )

    def same_content(self, key: str, local: str, remote: RemoteFile | None = None) -> bool | None:
        return None  # no checksum of the stored bytes to compare with

    def abort_uploads(self, prefix: str) -> int:
        return 0  # a temporary object is all an interrupted write leaves here (sweep_parts)

    def abandoned_uploads(self) -> int:
        return 0


# fsspec file systems on one connection (a session) whose client is not safe across threads,
# and which does not connect again by itself once the connection is gone.
SESSION_PROTOCOLS = ("sftp", "ssh", "ftp", "smb")
# Seconds without an answer on a session before it is taken as lost: a dropped link or a server
# that hangs, not a slow one (each read of a transfer waits this long at most, not the whole).
SESSION_TIMEOUT = 10.0


class Session:
    """A session file system (see SESSION_PROTOCOLS) that serves one request at a time, and is
    made anew by `connect` on the next request after its connection failed, so that a server
    that comes back is used again without a restart."""

    def __init__(self, connect: Callable[[], Any], protocol: str, fs: Any = None) -> None:
        self._connect = connect
        self.protocol = protocol
        self._fs = fs
        # The engine's threads (uploads, the lease's renewals) take turns on the one channel.
        self._lock = threading.RLock()

    def _current(self) -> Any:
        if self._fs is None:
            self._fs = self._connect()
        return self._fs

    def _drop(self) -> None:
        fs, self._fs = self._fs, None
        for closable in (getattr(fs, "ftp", None), getattr(fs, "client", None)):
            try:
                if closable is not None:
                    closable.close()
            except Exception:  # noqa: BLE001 - the connection is gone already
                pass

    def close(self) -> None:
        with self._lock:
            self._drop()

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                fs = self._current()
                try:
                    return getattr(fs, name)(*args, **kwargs)
                except Exception as err:
                    if connection_lost(err):
                        self._drop()
                    raise

        return call


def connection_lost(err: BaseException) -> bool:
    """Whether `err` says the session's connection is gone (not that a file is missing or refused)."""
    if isinstance(
        err,
        (
            FileNotFoundError,
            FileExistsError,
            PermissionError,
            IsADirectoryError,
            NotADirectoryError,
            NotImplementedError,
        ),
    ):
        return False
    if isinstance(err, (EOFError, ConnectionError, TimeoutError)):
        return True
    if any(cls.__name__ == "SSHException" for cls in type(err).__mro__):
        return True
    return isinstance(err, OSError) and err.errno is None  # paramiko's "Socket is closed"


def open_session(protocol: str, make: Callable[[], Any]) -> Session:
    """A Session over `make` (a new, uncached file system each call), connected now if the
    server answers; one that does not answer yet is connected on the first request. A server
    that answers and refuses (wrong credentials, unknown host key) is a configuration error."""

    def connect() -> Any:
        fs = make()
        channel = getattr(getattr(fs, "ftp", None), "get_channel", None)
        if channel is not None:  # sftp (fsspec keeps paramiko's SFTPClient as .ftp): bounded waits
            channel().settimeout(SESSION_TIMEOUT)
        return fs

    try:
        return Session(connect, protocol, connect())
    except Exception as err:
        if type(err).__name__ in (
            "AuthenticationException",
            "BadHostKeyException",
            "BadAuthenticationType",
        ):
            raise StoreConfigError(
                f"The {protocol}:// server refused this runtime: {err}"
            ) from None
        if connection_lost(err) or isinstance(err, OSError):
            log.info(
                "The %s:// store does not answer yet (%s): connecting on first use", protocol, err
            )
            return Session(connect, protocol)
        raise


def open_fsspec_store(
    url: str, storage_options: dict[str, Any] | None = None, max_concurrency: int = 4
) -> FsspecBackend:
    """The fsspec file system for `url`'s scheme (its package must be installed)."""
    parsed = urlparse(url)
    try:
        import fsspec
        from fsspec.core import url_to_fs

        fsspec.get_filesystem_class(parsed.scheme)
    except ValueError:
        raise StoreConfigError(f"Unknown storage protocol {parsed.scheme!r} in {url!r}") from None
    except ImportError as err:
        raise StoreConfigError(
            f"The {parsed.scheme}:// store needs a package that is not installed: {err}"
        ) from None
    options = dict(storage_options or {})
    try:
        fs, root = url_to_fs(url, **options)
    except ImportError as err:
        raise StoreConfigError(
            f"The {parsed.scheme}:// store needs a package that is not installed: {err}"
        ) from None
    except Exception as err:
        raise StoreConfigError(f"Cannot open the store {url!r}: {err}") from err
    return FsspecBackend(fs, root, max_concurrency)


def open_session_store(
    url: str, storage_options: dict[str, Any] | None = None, max_concurrency: int = 4
) -> FsspecBackend:
    """sftp://, ftp://, smb://: a connection of this backend's own (not fsspec's shared cached
    instance), made anew after it fails, with a bounded wait for a server that stops answering."""
    from fsspec.core import url_to_fs

    scheme = urlparse(url).scheme
    options = dict(storage_options or {})
    if scheme in ("sftp", "ssh"):
        for name in ("timeout", "banner_timeout", "auth_timeout"):
            options.setdefault(name, SESSION_TIMEOUT)
    try:
        import fsspec

        cls = fsspec.get_filesystem_class(scheme)
        root = cls._strip_protocol(url)
        session = open_session(
            scheme, lambda: url_to_fs(url, skip_instance_cache=True, **options)[0]
        )
    except StoreConfigError:
        raise
    except ImportError as err:
        raise StoreConfigError(
            f"The {scheme}:// store needs a package that is not installed: {err}"
        ) from None
    except Exception as err:
        raise StoreConfigError(f"Cannot open the store {redact(url)!r}: {err}") from err
    backend = FsspecBackend(session, root, max_concurrency)
    # Named with its host (a user, never a password: store/redact.py), as the URL names it:
    # "sftp:///data/ws" would say nothing of where the store is.
    parts = urlsplit(url)
    if parts.netloc:
        backend.description = redact(f"{scheme}://{parts.netloc}/{root.lstrip('/')}")
        backend.host = (
            parts.hostname + (f":{parts.port}" if parts.port else "") if parts.hostname else None
        )
    return backend


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


def _readable_size(local: str) -> int:
    """The work directory's file's size, once it is known to open; a failure is the file's."""
    try:
        fd = os.open(local, os.O_RDONLY | O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise LocalFileError(f"cannot be read: {err.strerror or err}") from None
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _etag(info: dict[str, Any]) -> str | None:
    value = info.get("ETag") or info.get("etag")
    return str(value).strip('"') if value else None


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


def _remote_error(err: Exception, key: str, where: str | None = None) -> Exception:
    """One clear line for the many ways a remote store fails."""
    name = type(err).__name__
    text = str(err) or name
    if isinstance(err, SyncError):
        return err
    if "KeyTooLong" in text or getattr(err, "errno", None) == errno.ENAMETOOLONG:
        return LocalFileError(f"its name is too long for the store ({text})")
    if name in ("NoCredentialsError", "PartialCredentialsError") or "credentials" in text.lower():
        return StoreConfigError(f"No credentials for the store: {text}")
    if isinstance(err, PermissionError) or "AccessDenied" in text or "Forbidden" in text:
        return StoreConfigError(f"The store refused access to {key}: {text}")
    if "NoSuchBucket" in text or "bucket does not exist" in text.lower():
        return StoreConfigError(f"The store's bucket does not exist: {text}")
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreFullError(f"The store is full ({key})")
    fault = connection_fault(err, where or "its host")
    if fault is not None:
        # One line naming cause and fix, remembered so that every place shows its kind.
        remember(fault)
        return StoreUnavailableError(fault.line).with_fault(fault.kind, fault.detail)
    if "connect" in text.lower() or isinstance(err, (ConnectionError, TimeoutError)):
        return StoreUnavailableError(f"Cannot reach the store: {text}")
    return StoreUnavailableError(f"The store failed on {key}: {text}")
