"""The store: a URL opened as a backend, and the layout of one workspace inside it.

Layout, so that the mirror stays browsable with ordinary tools:

    <store_url>/<workspace>/files/<relative path>    the mirror
    <store_url>/<workspace>/.gpuws/                   lease.json, versions/, …
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any
from urllib.parse import urlparse

from .backend import PART_SUFFIX, Backend, RemoteFile, SourceChangedError
from .errors import StoreConfigError
from .local import LocalBackend
from .names import decode, encode
from .objectstore import SCHEMES as OBJECT_STORE_SCHEMES, open_object_store
from .remote import SESSION_PROTOCOLS, SESSION_TIMEOUT, FsspecBackend, open_session

__all__ = ["PART_SUFFIX", "Backend", "FsspecBackend", "LocalBackend", "RemoteFile", "SourceChangedError",
           "Store", "check_store_url", "open_backend", "version_stamp"]


# What a URL's scheme looks like (RFC 3986): a letter, then letters, digits, +, - or .
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def check_store_url(url: str) -> str:
    """The store URL as it is to be opened, or StoreConfigError with the corrected form: a
    `scheme://…` URL or an absolute path (`~` allowed). Anything else (`s3:/bucket`, `s3:bucket`,
    `file:/tmp/x`, a relative folder) would otherwise become a local folder named after it in
    whatever the current folder is, which may be the work directory itself."""
    if not url or not url.strip():
        raise StoreConfigError("The store URL is empty: set GPUWS_STORE or c.GpuWorkspace.store_url")
    url = url.strip()
    if "::" in url:
        raise StoreConfigError(f"Chained URLs are not supported as a store: {url!r}")
    if "://" in url:
        scheme, _, rest = url.partition("://")
        if scheme in ("file", "local") and rest and not rest.startswith("/") and urlparse(url).netloc != "localhost":
            raise StoreConfigError(f"The store URL {url!r} names a host, not a folder: did you mean "
                                   f"'file:///{rest}'?")
        return url
    match = _SCHEME.match(url)
    if match and len(match.group(1)) > 1:  # not a bare drive letter
        scheme, rest = match.group(1), url[match.end():].lstrip("/")
        better = f"file:///{rest}" if scheme.lower() in ("file", "local") else f"{scheme}://{rest}"
        raise StoreConfigError(f"The store URL {url!r} is neither scheme://… nor an absolute path: did you mean "
                               f"{better!r}?")
    path = os.path.expanduser(url)
    if not os.path.isabs(path):
        raise StoreConfigError(f"The store {url!r} is a relative path, which would depend on the current folder: "
                               f"give an absolute one (did you mean {os.path.abspath(path)!r}?) or a scheme://… URL")
    return url


def open_backend(url: str, storage_options: dict[str, Any] | None = None, durable: bool = True,
                 max_concurrency: int = 4) -> Backend:
    """A backend for a store URL (checked by check_store_url): an absolute path or file:// URL
    (a local folder), S3, GCS or Azure (obstore), or any other fsspec URL."""
    url = check_store_url(url)
    parsed = urlparse(url)
    if "://" not in url:
        return LocalBackend(os.path.expanduser(url), durable)
    if parsed.scheme in ("file", "local"):
        if parsed.netloc not in ("", "localhost"):
            raise StoreConfigError(f"A file:// store URL cannot name a host: {url!r}")
        return LocalBackend(parsed.path, durable)
    if parsed.scheme in OBJECT_STORE_SCHEMES:
        if not parsed.netloc:
            raise StoreConfigError(f"The store URL {url!r} names no bucket")
        return open_object_store(url, storage_options, max_concurrency)
    try:
        import fsspec
        from fsspec.core import url_to_fs

        fsspec.get_filesystem_class(parsed.scheme)
    except ValueError:
        raise StoreConfigError(f"Unknown storage protocol {parsed.scheme!r} in {url!r}") from None
    except ImportError as err:
        raise StoreConfigError(f"The {parsed.scheme}:// store needs a package that is not installed: {err}") from None
    options = dict(storage_options or {})
    if parsed.scheme in SESSION_PROTOCOLS:
        return _open_session_store(url, parsed.scheme, options, max_concurrency)
    try:
        fs, root = url_to_fs(url, **options)
    except ImportError as err:
        raise StoreConfigError(f"The {parsed.scheme}:// store needs a package that is not installed: {err}") from None
    except Exception as err:
        raise StoreConfigError(f"Cannot open the store {url!r}: {err}") from err
    return FsspecBackend(fs, root, max_concurrency)


def _open_session_store(url: str, scheme: str, options: dict[str, Any], max_concurrency: int) -> Backend:
    """sftp://, ftp://, smb://: a connection of this backend's own (not fsspec's shared cached
    instance), made anew after it fails, with a bounded wait for a server that stops answering."""
    from fsspec.core import url_to_fs

    if scheme in ("sftp", "ssh"):
        for name in ("timeout", "banner_timeout", "auth_timeout"):
            options.setdefault(name, SESSION_TIMEOUT)
    try:
        import fsspec

        cls = fsspec.get_filesystem_class(scheme)
        root = cls._strip_protocol(url)
        session = open_session(scheme, lambda: url_to_fs(url, skip_instance_cache=True, **options)[0])
    except StoreConfigError:
        raise
    except ImportError as err:
        raise StoreConfigError(f"The {scheme}:// store needs a package that is not installed: {err}") from None
    except Exception as err:
        raise StoreConfigError(f"Cannot open the store {url!r}: {err}") from err
    return FsspecBackend(session, root, max_concurrency)


class Store:
    """One workspace inside a backend: the mirror under files/, the state under .gpuws/."""

    def __init__(self, backend: Backend, workspace: str) -> None:
        if not workspace or "/" in workspace or workspace in (".", ".."):
            raise StoreConfigError(f"Invalid workspace name {workspace!r}")
        self.backend = backend
        self.workspace = workspace

    # Keys are valid UTF-8 whatever the name's bytes (names.py); what is listed is decoded back.
    def file_key(self, rel: str) -> str:
        return f"{self.workspace}/files/{encode(rel)}"

    def state_key(self, name: str) -> str:
        return f"{self.workspace}/.gpuws/{name}"

    def version_key(self, rel: str, stamp: str) -> str:
        return f"{self.workspace}/.gpuws/versions/{encode(rel)}/{stamp}"

    def read_json(self, name: str) -> Any:
        data = self.backend.read_bytes(self.state_key(name))
        return None if data is None else json.loads(data)

    def write_json(self, name: str, value: Any) -> None:
        self.backend.write_bytes(self.state_key(name), json.dumps(value, indent=1).encode())

    def list_files(self, under: str = "") -> dict[str, RemoteFile]:
        """The mirror's files (those inside the folder `under`, when given) by relative path."""
        prefix = f"{self.workspace}/files/"
        base = f"{prefix}{encode(under.strip('/'))}" if under else prefix.rstrip("/")
        return {decode(f.key[len(prefix):]): f for f in self.backend.list(base)}

    def list_versions(self, rel: str | None = None) -> list[tuple[str, str, RemoteFile]]:
        """(relative path, stamp, file) for every kept version, or those of one path."""
        prefix = f"{self.workspace}/.gpuws/versions/"
        base = prefix + encode(rel) if rel else prefix.rstrip("/")
        out = []
        for f in self.backend.list(base):
            stored, _, stamp = f.key[len(prefix):].rpartition("/")
            path = decode(stored)
            if rel is None or path == rel:
                out.append((path, stamp, f))
        return sorted(out, key=lambda item: (item[0], item[1]))


def version_stamp(now: float | None = None) -> str:
    """Sortable UTC time with microseconds: 20261129T154210.123456Z."""
    now = time.time() if now is None else now
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
