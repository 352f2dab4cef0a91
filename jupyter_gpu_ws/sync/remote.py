"""A store on any fsspec file system: s3://, gs://, az://, sftp://, memory://, …

Object stores make a PUT visible only once complete; file-like systems get a temporary name
and a move. Small files to S3 go as one lean signed PUT (s3direct).
"""

from __future__ import annotations

import asyncio
import logging
import errno
import hashlib
import os
import threading
import time
import uuid
from typing import Any, Callable, Iterator

from ..diskio import pwrite_all
from . import s3direct
from .getmany import Wanted
from fsspec.asyn import sync as fsspec_sync

from .backend import PART_SUFFIX, ChangedInStoreError, PreconditionFailed, RemoteFile, SourceChangedError, md5_of
from .errors import LocalFileError, StoreConfigError, StoreFullError, StoreUnavailableError, SyncError
from .local import O_CLOEXEC, content_tag

CHUNK_READ = 8 * 2**20

log = logging.getLogger(__name__)

# Up to this size a file is read whole and sent in one PUT: a consistent snapshot, one request.
SMALL_FILE = 16 * 2**20
# Moving or copying a complete upload into place: tries, and the first pause between them.
FINISH_ATTEMPTS = 4
FINISH_BACKOFF = 0.05
# Parts of a direct S3 multipart upload (S3 allows 5 MiB to 5 GiB, at most 10,000 parts).
S3_PART = 16 * 2**20


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
        self.round_trips = protocol not in ("memory",)
        self.max_concurrency = max_concurrency
        # Small files to S3: one lean signed PUT each (s3direct), made on first use; and the
        # lean GET that restores use.
        self._direct: s3direct.DirectPut | None = None
        self._direct_ready = protocol not in ("s3", "s3a")
        self._reader: s3direct.DirectGet | None = None
        self._reader_ready = protocol not in ("s3", "s3a")
        self._direct_lock = threading.Lock()
        self.protocol = protocol
        self._swap_lock = threading.Lock()
        self._swap_checked: str | None = None  # "" once the store proved its conditional writes
        self._uploads: set[str] = set()  # multipart uploads this process has in flight
        self._abandoned = 0  # uploads whose abort failed

    @property
    def skipped(self) -> dict[str, str]:
        """Nothing is skipped here: what a key holds is the remote file system's own answer."""
        return {}

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def _in_bucket(self, key: str) -> str:
        """The key of `key` within the bucket (S3's lean requests name objects so)."""
        return self._path(key).partition("/")[2]

    def direct_put(self) -> s3direct.DirectPut | None:
        """The lean PUT for small files where the store is a plain S3 bucket, else None."""
        if not self._direct_ready:
            with self._direct_lock:
                if not self._direct_ready:
                    self._direct = s3direct.for_s3fs(self.fs, self.root.partition("/")[0])
                    self._direct_ready = True
        return self._direct

    def direct_get(self) -> s3direct.DirectGet | None:
        """The lean GET for restores where the store is a plain S3 bucket, else None."""
        if not self._reader_ready:
            with self._direct_lock:
                if not self._reader_ready:
                    self._reader = s3direct.for_s3fs(self.fs, self.root.partition("/")[0], s3direct.DirectGet)
                    self._reader_ready = True
        return self._reader

    def close(self) -> None:
        if self._direct is not None:
            self._direct.close()
        if self._reader is not None:
            self._reader.close()

    def put(self, local: str, key: str, progress: Callable[[int], None] | None = None,
            check: Callable[[], bool] | None = None, flush_soon: bool = False) -> int:
        """Make `key` hold the file, complete or not at all (a completed PUT is durable).

        Small files are read into memory and sent in one PUT once `check` confirms the read
        was consistent. On S3, larger ones go straight to the key as a multipart upload that is
        completed (made visible) only once `check` passes. Elsewhere they go to a temporary key
        first and are copied into place (a server-side copy on object stores) once it passes.
        """
        size = _readable_size(local)
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
                if direct is not None and direct.put(self._in_bucket(key), data, md5):
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
        except (SourceChangedError, SyncError):
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
        upload_id = None
        try:
            upload = await fs._call_s3("create_multipart_upload", Bucket=bucket, Key=key)
            upload_id = upload["UploadId"]
            self._uploads.add(upload_id)

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
                except Exception:  # noqa: BLE001 - abort_uploads() clears it once the store answers
                    self._abandoned += 1
                raise
        finally:
            os.close(fd)
            self._uploads.discard(upload_id)

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

    def reads_many(self) -> bool:
        """Whether read_many can fetch here (plain S3, the lean GET not resting after refusals)."""
        reader = self.direct_get()
        return reader is not None and not reader.resting()

    def read_many(self, items: list[tuple[str, str | None, Any]], landed: Callable[[Any, bytes], None],
                  in_flight: int, stop: Callable[[], bool] | None = None) -> list[Any] | None:
        """Whole small objects (key, etag from the listing, the caller's token), `in_flight`
        at once from this thread, on plain S3 only (None elsewhere): `landed(token, body)` for
        each that came whole and checked; the tokens of the others are returned, for `read_into`."""
        reader = self.direct_get()
        if reader is None:
            return None
        wanted = [Wanted(self._in_bucket(key), etag, token) for key, etag, token in items]
        left = reader.get_many(wanted, lambda item, body: landed(item.token, body), in_flight, stop)
        return [item.token for item in left]

    def read_into(self, key: str, fd: int, offset: int = 0, length: int | None = None,
                  progress: Callable[[int], None] | None = None, etag: str | None = None) -> int:
        """On plain S3, one lean signed GET (a range of the object with `length`) streamed into
        `fd`, sent with If-Match `etag` so that every part of a file comes from one object;
        anything else, and any answer the lean GET cannot use, goes through fsspec. A whole
        object whose ETag is an MD5 is checked against the bytes received."""
        path = self._path(key)
        reader = self.direct_get()
        if reader is not None:
            try:
                got = reader.get(self._in_bucket(key), fd, offset, length, etag, progress)
            except s3direct.ChangedInStoreError:
                raise ChangedInStoreError(f"{key} changed in the store while it was being fetched") from None
            except s3direct.ChecksumMismatchError:
                raise StoreUnavailableError(f"{key}: the bytes received do not match the store's checksum") from None
            if got is not None:
                return got
        try:
            if length is None:
                data = self.fs.cat_file(path)
            else:
                data = self.fs.cat_file(path, start=offset, end=offset + length)
        except FileNotFoundError:
            raise
        except Exception as err:
            raise _remote_error(err, key) from err
        if length is None:
            os.ftruncate(fd, 0)  # a lean GET that broke off may have written more
            tag = md5_of(etag)
            if tag is not None and hashlib.md5(data).hexdigest() != tag:
                raise StoreUnavailableError(f"{key}: the bytes received do not match the store's checksum")
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
            raise _remote_error(err, key) from err
        if info.get("type") == "directory":
            return None
        return RemoteFile(key, int(info["size"]), _mtime(info), _etag(info))

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
        reader = self.direct_get()
        listed = reader.list(self._in_bucket(prefix).rstrip("/") + "/") if reader is not None else None
        if listed is not None:  # on plain S3: one lean signed request per 1,000 objects
            start = len(self.root.partition("/")[2]) + 1 if "/" in self.root else 0
            for key, size, mtime, etag in listed:
                if PART_SUFFIX not in key and not key.endswith("/"):
                    yield RemoteFile(key[start:], size, mtime, etag)
            return
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
            yield RemoteFile(path[len(self.root) + 1:], int(info["size"]), _mtime(info), _etag(info))

    def folders(self, prefix: str) -> list[str]:
        base = self._path(prefix) if prefix else self.root
        try:
            self.fs.invalidate_cache(base)
            entries = self.fs.ls(base, detail=True)
        except FileNotFoundError:
            return []
        except Exception as err:
            raise _remote_error(err, prefix or "the store") from err
        return sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "directory")

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
        reader = self.direct_get()
        if reader is not None:  # on plain S3: one lean GET (through s3fs, a missing key costs two requests)
            try:
                data = reader.read(self._in_bucket(key))
            except FileNotFoundError:
                return None
            if data is not None:
                return data
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

    # -- compare-and-swap (the lease) and content comparison ------------------------------------

    @property
    def _is_s3(self) -> bool:
        return hasattr(self.fs, "_call_s3")

    def read_tagged(self, key: str) -> tuple[bytes, str] | None:
        if not self._is_s3:
            data = self.read_bytes(key)
            return None if data is None else (data, content_tag(data))
        bucket, path, _ = self.fs.split_path(self._path(key))

        async def get() -> tuple[bytes, str]:
            answer = await self.fs._call_s3("get_object", Bucket=bucket, Key=path)
            body = answer["Body"]
            try:
                data = await body.read()
            finally:
                body.close()
            return data, str(answer["ETag"])

        try:
            return fsspec_sync(self.fs.loop, get)
        except FileNotFoundError:
            return None
        except Exception as err:
            raise _remote_error(err, key) from err

    def write_if(self, key: str, data: bytes, tag: str | None) -> str:
        """On S3, a PUT with If-None-Match: * (create) or If-Match: <ETag> (replace), which the
        store refuses when another writer got there first. Elsewhere, read, compare and write under
        a lock of this process: exact for memory://, and only advisory between machines."""
        if not self._is_s3:
            with self._swap_lock:
                current = self.read_tagged(key)
                if (current is None) != (tag is None) or (current is not None and current[1] != tag):
                    raise PreconditionFailed(key)
                self.write_bytes(key, data)
                return content_tag(data)
        bucket, path, _ = self.fs.split_path(self._path(key))
        condition = {"IfNoneMatch": "*"} if tag is None else {"IfMatch": tag}
        try:
            answer = fsspec_sync(self.fs.loop, self.fs._call_s3, "put_object", Bucket=bucket, Key=path,
                                 Body=data, **condition)
        except Exception as err:
            if _precondition_failed(err):
                raise PreconditionFailed(key) from err
            raise _remote_error(err, key) from err
        return str(answer["ETag"])

    # An object store has no folders to lose: a prefix is there once an object is (a missing
    # bucket or refused access is an error of every request instead).
    def present(self, prefix: str) -> bool:
        return True

    def expect(self, prefix: str) -> None:
        pass

    def make(self, prefix: str) -> None:
        pass

    def missing(self, prefix: str) -> str:
        return f"{prefix or 'The store'} is missing from {self.description}"

    def conditional_writes(self) -> str | None:
        if self.protocol == "memory":
            return None  # one process holds the whole store
        if not self._is_s3:
            return (f"{self.protocol}:// offers no compare-and-swap through fsspec here, so the lease "
                    "cannot stop a runtime elsewhere from writing")
        if self._swap_checked is None:
            self._swap_checked = self._probe_conditional_writes()
        return self._swap_checked or None

    def _probe_conditional_writes(self) -> str:
        """Some S3-compatible servers ignore If-None-Match and If-Match: ask once whether this
        one refuses a create over an existing object and a replace with a stale ETag."""
        probe = f".gpuws-tmp/swap-probe-{uuid.uuid4().hex}"
        try:
            self.write_if(probe, b"1", None)
            for stale in (None, '"0123456789abcdef0123456789abcdef"'):
                try:
                    self.write_if(probe, b"2", stale)
                except PreconditionFailed:
                    continue
                return ("this S3 server ignores conditional writes (If-None-Match / If-Match), so the lease "
                        "cannot stop a runtime elsewhere from writing")
            return ""
        finally:
            try:
                self.fs.rm_file(self._path(probe))
            except Exception:  # noqa: BLE001 - a leftover probe is swept with the temporaries
                pass

    def same_content(self, key: str, local: str, remote: RemoteFile | None = None) -> bool | None:
        """S3 only: an ETag is the MD5 of a single PUT's body, or of the parts' MD5s for a
        multipart upload, which can be recomputed when the parts were cut as this engine cuts them."""
        if not self._is_s3:
            return None
        if remote is None or remote.etag is None:
            remote = self.stat(key)
            if remote is None:
                return False
        size = os.path.getsize(local)
        if remote.size != size:
            return False
        etag = (remote.etag or "").strip('"')
        if len(etag) == 32 and "-" not in etag:
            return _md5_file(local) == etag
        digest, _, parts = etag.partition("-")
        part = max(S3_PART, -(-size // 10_000))
        if parts.isdigit() and int(parts) == max(1, -(-size // part)):
            return _multipart_etag(local, part) == digest
        return None  # uploaded with other part sizes: cannot tell without reading it back

    def abort_uploads(self, prefix: str) -> int:
        if not self._is_s3:
            return 0
        bucket, path, _ = self.fs.split_path(self._path(prefix))

        async def abort_all() -> int:
            aborted = 0
            answer = await self.fs._call_s3("list_multipart_uploads", Bucket=bucket, Prefix=path)
            for upload in answer.get("Uploads", []):
                if upload["UploadId"] in self._uploads:
                    continue  # ours, in flight
                await self.fs._call_s3("abort_multipart_upload", Bucket=bucket, Key=upload["Key"],
                                       UploadId=upload["UploadId"])
                aborted += 1
            return aborted

        try:
            aborted = fsspec_sync(self.fs.loop, abort_all)
            self._abandoned = 0
            return aborted
        except Exception as err:  # noqa: BLE001 - tried again after the next pass
            log.warning("Sync: cannot list or abort the store's unfinished uploads: %s", err)
            return 0

    def abandoned_uploads(self) -> int:
        return self._abandoned

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


def _precondition_failed(err: BaseException) -> bool:
    """S3's answer to a conditional write that lost (412, or 409 for a concurrent one), which
    s3fs hands on as an OSError caused by botocore's ClientError."""
    seen: BaseException | None = err
    while seen is not None:
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            code = str(response.get("Error", {}).get("Code", ""))
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                return True
        if "pre-condition" in str(seen).lower() or "precondition" in str(seen).lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _md5_file(path: str) -> str:
    md5 = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_READ):
            md5.update(chunk)
    return md5.hexdigest()


def _multipart_etag(path: str, part: int) -> str:
    digests = b""
    with open(path, "rb") as f:
        while chunk := f.read(part):
            digests += hashlib.md5(chunk).digest()
    return hashlib.md5(digests).hexdigest()


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


def _remote_error(err: Exception, key: str) -> Exception:
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
    if "connect" in text.lower() or isinstance(err, (ConnectionError, TimeoutError)):
        return StoreUnavailableError(f"Cannot reach the store: {text}")
    return StoreUnavailableError(f"The store failed on {key}: {text}")
