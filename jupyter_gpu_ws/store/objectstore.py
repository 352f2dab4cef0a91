"""S3 (and S3-compatible stores), Google Cloud Storage and Azure Blob through `obstore`, the
Python binding of Rust's `object_store`: it signs its own requests, retries, honours proxies,
TLS and every cloud's usual credentials, and releases the GIL while it works.

A PUT is visible only once complete: a small file is read whole, checked, and sent in one
request; a larger one goes as a multipart upload fed from the file part by part and completed
only once the file is known not to have changed (an error aborts it). The lease's
compare-and-swap is a conditional PUT on every cloud (S3's If-None-Match / If-Match, GCS's
generation, Azure's If-Match), probed once per runtime since some S3-compatible servers ignore
the headers. Restores read many small objects at once from one thread (the async API), and
large ones in ranges, each checked against the ETag the listing gave (If-Match).

Configuration: each cloud's standard environment variables and config files (`from_url` reads
them), then `storage_options` for anything set explicitly; an option that is neither obstore's
own nor one of the fsspec-style names below is refused, naming it.
"""

from __future__ import annotations

import asyncio
import builtins  # the class defines a method `list`: its annotations say builtins.list
import hashlib
import logging
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

import obstore
from obstore import exceptions as obx
from obstore.store import from_url

from ..diskio import pwrite_all
from .backend import (
    PART_SUFFIX,
    TEMP_FOLDER,
    ChangedInStoreError,
    NoFolders,
    PreconditionFailed,
    RemoteFile,
    SourceChangedError,
    md5_of,
)
from .errors import (
    LocalFileError,
    StoreConfigError,
    StoreFullError,
    StoreUnavailableError,
    SyncError,
)
from .faults import CREDENTIALS, Fault, fault_of, first_line, remember
from .names import shown

if TYPE_CHECKING:
    from obstore import GetOptions  # a type only: obstore does not export it at run time

log = logging.getLogger(__name__)

# Up to this size a file is read whole and sent in one PUT: a consistent snapshot, one request.
SMALL_FILE = 16 * 2**20
# Parts of a multipart upload (S3 allows 5 MiB to 5 GiB, at most 10,000 parts): a multipart
# ETag can then be recomputed here (same_content).
PART = 16 * 2**20
# Reads land in the file (and are reported to the progress) in pieces of at least this size: small
# enough that a restore measuring its throughput sees each part's bytes as they come (with 8 MiB,
# parts at 10 MB/s each arrived in bursts 0.8 s apart, in step), large enough that the calls cost
# little (about a thousand per GiB).
READ_CHUNK = 2**20
# A store that does not answer a connection attempt within this long is not answering: the
# engine has its own retries with back-off.
CONNECT_TIMEOUT = "5s"

SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "azure")
_CLOUD = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "az": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "azure": "azure",
}

# fsspec-style names (what s3fs, gcsfs and adlfs users write) and what obstore calls them.
_ALIASES: dict[str, dict[str, str | None]] = {
    "s3": {
        "endpoint_url": "endpoint",
        "key": "access_key_id",
        "secret": "secret_access_key",
        "token": "session_token",
        "region_name": "region",
        "anon": "skip_signature",
    },
    "gcs": {"token": "service_account_path", "anon": "skip_signature"},
    "azure": {
        "account_name": "account_name",
        "account_key": "account_key",
        "sas_token": "sas_key",
        "anon": "skip_signature",
        "connection_string": None,
    },
}
# Options of the HTTP client itself (proxies, TLS, timeouts), on every cloud.
_CLIENT = {
    "proxy": "proxy_url",
    "proxy_url": "proxy_url",
    "proxy_ca_certificate": "proxy_ca_certificate",
    "proxy_excludes": "proxy_excludes",
    "ca_bundle": "root_certificate",
    "verify": "root_certificate",
    "root_certificate": "root_certificate",
    "allow_http": "allow_http",
    "allow_invalid_certificates": "allow_invalid_certificates",
    "connect_timeout": "connect_timeout",
    "timeout": "timeout",
    "read_timeout": "read_timeout",
}


def open_object_store(
    url: str, storage_options: dict[str, Any] | None = None, max_concurrency: int = 8
) -> ObjectStoreBackend:
    """The object store at `url` (`s3://bucket/prefix`, `gs://…`, `az://container/prefix`)."""
    scheme = url.partition("://")[0].lower()
    cloud = _CLOUD[scheme]
    options = dict(storage_options or {})
    retries = _retries(options)
    config, client = _options(cloud, options)
    endpoint = config.get("endpoint")
    if cloud == "s3" and not endpoint:
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        config["endpoint"] = endpoint
        if str(endpoint).startswith("http://"):
            client.setdefault("allow_http", True)  # an endpoint the user named as plain HTTP
    bundle = os.environ.get("AWS_CA_BUNDLE") if cloud == "s3" else None
    if bundle and "root_certificate" not in client:
        client["root_certificate"] = bundle
    if isinstance(client.get("root_certificate"), str) and os.path.isfile(
        client["root_certificate"]
    ):
        client["root_certificate"] = _read_bundle(
            client["root_certificate"]
        )  # obstore takes the PEM text
    client.setdefault("connect_timeout", CONNECT_TIMEOUT)
    standard = url.replace(
        f"{scheme}://", {"s3": "s3://", "gcs": "gs://", "azure": "az://"}[cloud], 1
    )
    try:
        store = from_url(
            standard,
            # obstore types each cloud's settings apart (S3Config, GCSConfig, AzureConfig,
            # ClientConfig): these were built from storage_options for the cloud the URL names
            config=cast(Any, config or None),
            client_options=cast(Any, client),
            retry_config={"max_retries": retries, "retry_timeout": timedelta(seconds=10)},
        )
    except obx.UnknownConfigurationKeyError as err:
        found = re.search(r"key: '([^']*)'", str(err))
        name = found.group(1) if found else first_line(str(err))
        raise StoreConfigError(
            f"The store option {name!r} is not one this store takes (it is passed to obstore's "
            f"{cloud.upper()} store, which does not know it): remove it from storage_options, "
            "or see docs/sync.md for the names each store takes"
        ) from None
    except (obx.BaseError, ValueError) as err:
        raise StoreConfigError(f"Cannot open the store {url!r}: {first_line(str(err))}") from None
    return ObjectStoreBackend(store, url.rstrip("/"), cloud, max_concurrency)


def _retries(options: dict[str, Any]) -> int:
    """Retries of one request (botocore's `config_kwargs.retries.max_attempts` counts the first
    try too): 2 unless set; the engine retries with back-off on top."""
    nested = options.get("config_kwargs")
    if isinstance(nested, dict) and isinstance(nested.get("retries"), dict):
        attempts = dict(nested).pop("retries").get("max_attempts")
        options["config_kwargs"] = {k: v for k, v in nested.items() if k != "retries"}
        if not isinstance(attempts, int) or attempts < 1:
            raise StoreConfigError(
                "The store option config_kwargs.retries.max_attempts must be a whole number ≥ 1"
            )
        return attempts - 1
    value = options.pop("max_retries", 2)
    if not isinstance(value, int) or value < 0:
        raise StoreConfigError("The store option max_retries must be a whole number ≥ 0")
    return value


def _options(cloud: str, options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """storage_options split into the cloud's configuration and the HTTP client's options.
    s3fs's nested `client_kwargs` and `config_kwargs` are read for the few names they share."""
    for nested in ("client_kwargs", "config_kwargs"):
        inner = options.pop(nested, None) or {}
        if not isinstance(inner, dict):
            raise StoreConfigError(f"The store option {nested!r} must be a mapping")
        for name, value in inner.items():
            if name in (
                "region_name",
                "endpoint_url",
                "proxies",
                "connect_timeout",
                "read_timeout",
                "verify",
            ):
                if name in ("connect_timeout", "read_timeout") and isinstance(value, (int, float)):
                    value = f"{value}s"
                options.setdefault("proxy" if name == "proxies" else name, value)
            else:
                raise StoreConfigError(
                    f"The store option {nested}.{name} is not supported here (obstore): "
                    "remove it, or give the obstore setting it stands for"
                )
    config: dict[str, Any] = {}
    client: dict[str, Any] = {}
    for name, value in options.items():
        if name in _CLIENT:
            if name == "proxy" and isinstance(value, dict):  # botocore's {"https": url}
                value = value.get("https") or value.get("http")
            if name == "verify" and value is False:
                client["allow_invalid_certificates"] = True
                continue
            client[_CLIENT[name]] = value
            continue
        alias = _ALIASES[cloud].get(name, name)
        if alias is None:
            raise StoreConfigError(
                f"The store option {name!r} is not supported here: give the account's name and "
                "key (account_name, account_key) or a SAS token"
            )
        config[alias] = str(value).lower() if isinstance(value, bool) else value
    return config, client


class ObjectStoreBackend(NoFolders):
    """An obstore store under a prefix: the Backend interface (store/backend.py)."""

    supports_rename = False
    round_trips = True
    keeps_holes = False

    def __init__(self, store: Any, description: str, cloud: str, max_concurrency: int = 8) -> None:
        self.store = store
        self.description = description
        self.cloud = cloud
        self.max_concurrency = max(1, max_concurrency)
        self._swap_checked: str | None = None  # "" once the store proved its conditional writes
        self._swap_lock = threading.Lock()

    @property
    def skipped(self) -> dict[str, str]:
        return {}  # an object store holds objects only

    def close(self) -> None:
        """Nothing held between calls (obstore's connections close with the store)."""

    # -- writing ---------------------------------------------------------------------------------

    def put(
        self,
        local: str,
        key: str,
        progress: Callable[[int], None] | None = None,
        check: Callable[[], bool] | None = None,
        flush_soon: bool = False,
    ) -> int:
        """Make `key` hold the file, whole or not at all: see the module's docstring."""
        fd = _open_source(local)
        try:
            size = os.fstat(fd).st_size
            if size <= SMALL_FILE:
                data = _read_all(fd, size)
                if len(data) != size or (check is not None and not check()):
                    raise SourceChangedError(key)
                result = self._call(key, obstore.put, self.store, key, data, use_multipart=False)
                if progress:
                    progress(size)
                tag = md5_of(result.get("e_tag"))
                if self.cloud == "s3" and tag is not None and tag != hashlib.md5(data).hexdigest():
                    raise StoreUnavailableError(
                        f"{key}: the store's checksum does not match what was sent"
                    )
                return size

            def parts() -> Iterator[bytes]:
                for offset in range(0, size, PART):
                    body = os.pread(fd, min(PART, size - offset), offset)
                    if len(body) != min(PART, size - offset):
                        raise SourceChangedError(key)
                    if progress:
                        progress(len(body))
                    yield body
                if os.fstat(fd).st_size != size or (check is not None and not check()):
                    raise SourceChangedError(key)  # the upload is aborted: nothing becomes visible

            self._call(
                key,
                obstore.put,
                self.store,
                key,
                parts(),
                use_multipart=True,
                chunk_size=PART,
                max_concurrency=self.max_concurrency,
            )
            return size
        finally:
            os.close(fd)

    def write_bytes(self, key: str, data: bytes) -> None:
        self._call(key, obstore.put, self.store, key, data, use_multipart=False)

    def copy(self, src: str, dst: str) -> None:
        self._call(src, obstore.copy, self.store, src, dst)

    def move(self, src: str, dst: str) -> None:
        self._call(src, obstore.rename, self.store, src, dst)

    def delete(self, key: str) -> None:
        try:
            self._call(key, obstore.delete, self.store, key)
        except FileNotFoundError:
            pass

    # -- reading ---------------------------------------------------------------------------------

    def stat(self, key: str) -> RemoteFile | None:
        try:
            meta = self._call(key, obstore.head, self.store, key)
        except FileNotFoundError:
            return None
        return _remote(meta)

    def list(self, prefix: str) -> Iterator[RemoteFile]:
        """Every object under the folder `prefix` (a whole path segment, as object_store lists)."""
        try:
            for batch in obstore.list(
                self.store, prefix=prefix.strip("/") or None, chunk_size=1000
            ):
                for meta in batch:
                    if PART_SUFFIX not in meta["path"]:
                        yield _remote(meta)
        except FileNotFoundError as err:
            if _no_bucket(err):
                raise _error(err, prefix or "the store", self.description, self.cloud) from None
            return
        except obx.BaseError as err:
            raise _error(err, prefix or "the store", self.description, self.cloud) from None

    def folders(self, prefix: str) -> builtins.list[str]:
        listed = self._call(
            prefix or "the store",
            obstore.list_with_delimiter,
            self.store,
            prefix.strip("/") or None,
        )
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in listed["common_prefixes"])

    def read_bytes(self, key: str) -> bytes | None:
        try:
            return bytes(self._call(key, lambda: obstore.get(self.store, key).bytes()))
        except FileNotFoundError:
            return None

    def get(self, key: str, local: str, progress: Callable[[int], None] | None = None) -> int:
        fd = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        try:
            return self.read_into(key, fd, 0, None, progress)
        finally:
            os.close(fd)

    def read_into(
        self,
        key: str,
        fd: int,
        offset: int = 0,
        length: int | None = None,
        progress: Callable[[int], None] | None = None,
        etag: str | None = None,
    ) -> int:
        """The object (or `length` bytes of it from `offset`) written at the same offsets of
        `fd`; with `etag`, only from that version of the object (ChangedInStoreError else).
        A whole object whose ETag is an MD5 is checked against the bytes received."""
        options: GetOptions = {}
        if length is not None:
            options["range"] = (offset, offset + length)
        if etag:
            options["if_match"] = etag if etag.startswith('"') else f'"{etag}"'
        digest = hashlib.md5() if length is None and md5_of(etag) is not None else None
        try:
            result = obstore.get(self.store, key, options=options or None)
            at = offset
            for chunk in result.stream(min_chunk_size=READ_CHUNK):
                pwrite_all(fd, chunk, at)
                if digest is not None:
                    digest.update(chunk)
                at += len(chunk)
                if progress:
                    progress(len(chunk))
        except FileNotFoundError as err:
            if _no_bucket(err):
                raise _error(err, key, self.description, self.cloud) from None
            raise
        except obx.PreconditionError:
            raise ChangedInStoreError(
                f"{key} changed in the store while it was being fetched"
            ) from None
        except obx.BaseError as err:
            raise _error(err, key, self.description, self.cloud) from None
        if digest is not None and digest.hexdigest() != md5_of(etag):
            raise StoreUnavailableError(
                f"{key}: the bytes received do not match the store's checksum"
            )
        return at - offset

    def reads_many(self) -> bool:
        return True

    def read_many(
        self,
        items: builtins.list[tuple[str, str | None, Any]],
        landed: Callable[[Any, bytes], None],
        in_flight: int,
        stop: Callable[[], bool] | None = None,
    ) -> builtins.list[Any]:
        """Whole small objects (key, ETag from the listing, the caller's token), `in_flight` at
        once from this thread: `landed(token, body)` for each that came whole and checked; the
        tokens of the others (an error, a changed object, a stop) are returned."""
        return asyncio.run(self._read_many(items, landed, max(1, in_flight), stop))

    async def _read_many(
        self,
        items: builtins.list[tuple[str, str | None, Any]],
        landed: Callable[[Any, bytes], None],
        in_flight: int,
        stop: Callable[[], bool] | None,
    ) -> builtins.list[Any]:
        limit = asyncio.Semaphore(in_flight)
        left: list[Any] = []

        async def one(key: str, etag: str | None, token: Any) -> None:
            async with limit:
                if stop is not None and stop():
                    left.append(token)
                    return
                options: GetOptions | None = (
                    {"if_match": etag if etag.startswith('"') else f'"{etag}"'} if etag else None
                )
                try:
                    result = await obstore.get_async(self.store, key, options=options)
                    body = bytes(await result.bytes_async())
                except Exception:  # noqa: BLE001 - the ordinary way says what went wrong
                    left.append(token)
                    return
            tag = md5_of(etag)
            if tag is not None and hashlib.md5(body).hexdigest() != tag:
                left.append(token)
                return
            landed(token, body)

        await asyncio.gather(*(one(key, etag, token) for key, etag, token in items))
        return left

    # -- one small object by compare-and-swap (the lease) ------------------------------------------

    def read_tagged(self, key: str) -> tuple[bytes, str] | None:
        def read() -> tuple[bytes, str]:
            result = obstore.get(self.store, key)
            meta = result.meta
            return bytes(result.bytes()), _tag(meta.get("e_tag"), meta.get("version"))

        try:
            return self._call(key, read)
        except FileNotFoundError:
            return None

    def write_if(self, key: str, data: bytes, tag: str | None) -> str:
        """A conditional PUT: create where `tag` is None, else replace only the version read."""
        if tag is None:
            mode: Any = "create"
        else:
            e_tag, _, version = tag.partition("\n")
            mode = {
                name: value for name, value in (("e_tag", e_tag), ("version", version)) if value
            }
        try:
            result = obstore.put(self.store, key, data, mode=mode)
        except (obx.AlreadyExistsError, obx.PreconditionError):
            raise PreconditionFailed(key) from None
        except (FileNotFoundError, obx.BaseError) as err:
            # A write finds nothing missing but the bucket: obstore says so as a
            # FileNotFoundError, which is no BaseError of its own.
            raise _error(err, key, self.description, self.cloud) from None
        return _tag(result.get("e_tag"), result.get("version"))

    def conditional_writes(self) -> str | None:
        with self._swap_lock:
            if self._swap_checked is None:
                self._swap_checked = self._probe_conditional_writes()
        return self._swap_checked or None

    def _probe_conditional_writes(self) -> str:
        """Some S3-compatible servers ignore If-None-Match and If-Match: ask once whether this
        one refuses a create over an existing object and a replace of a version it does not hold."""
        probe = f"{TEMP_FOLDER}/swap-probe-{uuid.uuid4().hex}"
        try:
            first = self.write_if(probe, b"1", None)
            versioned = bool(first.partition("\n")[2])  # GCS: a generation that never was
            stale = _tag('"0123456789abcdef0123456789abcdef"', "1" if versioned else None)
            for condition in (None, stale):
                try:
                    self.write_if(probe, b"2", condition)
                except PreconditionFailed:
                    continue
                return (
                    f"this {self.cloud} server ignores conditional writes, so the lease cannot stop a runtime "
                    "elsewhere from writing"
                )
            return ""
        except SyncError as err:
            return f"its conditional writes could not be checked ({err})"
        finally:
            try:
                obstore.delete(self.store, probe)
            except Exception:  # noqa: BLE001 - a leftover probe is swept with the temporaries
                pass

    # -- comparing, housekeeping ------------------------------------------------------------------

    def same_content(self, key: str, local: str, remote: RemoteFile | None = None) -> bool | None:
        """S3 only: an ETag is the MD5 of a single PUT's body, or of the parts' MD5s for a
        multipart upload cut as this backend cuts them."""
        if self.cloud != "s3":
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
            return _md5_file(local, size) == etag
        digest, _, parts = etag.partition("-")
        if parts.isdigit() and int(parts) == max(1, -(-size // PART)):
            return _md5_file(local, PART) == digest
        return None  # uploaded with other part sizes: cannot tell without reading it back

    def sweep_parts(self, prefix: str, older_than: float) -> int:
        """Temporary objects of older versions (a direct multipart upload leaves none)."""
        import time

        cutoff = time.time() - older_than
        removed = 0
        for base in (prefix, TEMP_FOLDER):
            try:
                for batch in obstore.list(self.store, prefix=base.strip("/") or None):
                    for meta in batch:
                        if (
                            PART_SUFFIX in meta["path"]
                            and meta["last_modified"].timestamp() < cutoff
                        ):
                            obstore.delete(self.store, meta["path"])
                            removed += 1
            except Exception:  # noqa: BLE001 - nothing there, or the store is away: the next start sweeps
                continue
        return removed

    def abort_uploads(self, prefix: str) -> int:
        # obstore aborts a multipart upload that fails; one cut by a killed process stays hidden
        # (never visible, only stored): a bucket lifecycle rule removes those (docs/sync.md).
        return 0

    def abandoned_uploads(self) -> int:
        return 0

    # -- errors ------------------------------------------------------------------------------------

    def _call(self, key: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except FileNotFoundError as err:
            if _no_bucket(err):  # not a missing object: the whole store is not there
                raise _error(err, key, self.description, self.cloud) from None
            raise
        except (SourceChangedError, SyncError):
            raise
        except obx.BaseError as err:
            raise _error(err, key, self.description, self.cloud) from None


def _error(err: BaseException, key: str, description: str, cloud: str) -> SyncError:
    """One clear line for the ways a cloud fails, naming what to fix (store/faults.py); the
    library's own words go to the log once, and stay on the error as its `detail`."""
    whole = str(err)
    text = first_line(whole)
    if isinstance(err, obx.InvalidPathError):
        if "encountered object with invalid path" in whole.lower():
            # An object someone else wrote under a name the client (object_store) refuses to
            # list (a control character, an empty path segment): it ends the whole listing.
            return SyncError(
                f"An object in the store under {shown(key)} has a name this client cannot list, "
                f"so nothing there can be listed until it is renamed or removed with another "
                f"tool (aws s3 ls / rm with the same endpoint): {shown(whole.strip())[:300]}"
            )
        return LocalFileError(f"its name cannot be a key in this store ({text})")
    lowered = whole.lower()
    if "169.254.169.254" in lowered or "credential" in lowered and "fetch" in lowered:
        fault: Fault | None = Fault(
            "credentials",
            f"No credentials for the store: set {CREDENTIALS.get(cloud, 'its credentials')}, "
            "or the store's own variables",
            text,
        )
    elif "keytoolong" in lowered:
        return LocalFileError("its name is too long for the store (KeyTooLong)")
    else:
        fault = fault_of(whole, description, cloud)
    if fault is None:
        if isinstance(err, (obx.PermissionDeniedError, obx.UnauthenticatedError)):
            fault = Fault(
                "credentials",
                f"The store refused access to {shown(key)}: check "
                f"{CREDENTIALS.get(cloud, 'the credentials')}",
                text,
            )
        else:
            _log_once(f"The store failed on {key}", text)
            return StoreUnavailableError(f"The store failed on {shown(key)}: {text}")
    _log_once(fault.line, fault.detail)
    remember(fault)
    kind: type[SyncError] = (
        StoreFullError
        if fault.kind == "full"
        else StoreConfigError
        if fault.kind in _CONFIG_FAULTS
        else StoreUnavailableError
    )
    return kind(fault.line).with_fault(fault.kind, fault.detail)


# Faults only the user's change of the settings mends. The rest heal by themselves (the sync
# retries): a certificate too, as before, since the server's may be renewed while this runs.
_CONFIG_FAULTS = ("bucket-missing", "credentials", "access-denied")
_logged: list[str] = []


def _log_once(line: str, detail: str) -> None:
    """The store's own words in the log, once for each fault in a row (not for every retry)."""
    if _logged[-1:] != [line]:
        _logged[:] = [line]
        log.warning("%s (the store said: %s)", line, detail)


def _read_bundle(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:
        raise StoreConfigError(
            f"The CA bundle {path} cannot be read: {err.strerror or err}"
        ) from None


def _no_bucket(err: BaseException) -> bool:
    text = str(err)
    return (
        "NoSuchBucket" in text
        or "ContainerNotFound" in text
        or "bucket does not exist" in text.lower()
    )


def _remote(meta: Any) -> RemoteFile:
    modified = meta.get("last_modified")
    return RemoteFile(
        meta["path"],
        int(meta["size"]),
        modified.timestamp() if modified else None,
        (meta.get("e_tag") or "").strip('"') or None,
    )


def _tag(e_tag: str | None, version: str | None) -> str:
    """The lease's tag: the ETag, and the version where the store has one (GCS's generation)."""
    return f"{e_tag or ''}\n{version}" if version else (e_tag or "")


def _open_source(local: str) -> int:
    try:
        return os.open(local, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise LocalFileError(f"cannot be read: {err.strerror or err}") from None


def _read_all(fd: int, size: int) -> bytes:
    chunks, at = [], 0
    while at <= size:
        chunk = os.pread(fd, max(size - at, 1), at)
        if not chunk:
            break
        chunks.append(chunk)
        at += len(chunk)
    return b"".join(chunks)


def _md5_file(path: str, part: int) -> str:
    """The MD5 of the file, or with `part` smaller than it, the MD5 of its parts' MD5s (as a
    multipart ETag is made); read in bounded pieces."""
    size = os.path.getsize(path)
    whole, digests = hashlib.md5(), b""
    with open(path, "rb") as f:
        while True:
            piece = hashlib.md5()
            left = part
            while left > 0 and (chunk := f.read(min(READ_CHUNK, left))):
                piece.update(chunk)
                whole.update(chunk)
                left -= len(chunk)
            if left == part:
                break
            digests += piece.digest()
    return whole.hexdigest() if part >= size else hashlib.md5(digests).hexdigest()
