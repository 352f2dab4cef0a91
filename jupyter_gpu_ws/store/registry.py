"""A store URL checked and opened as a backend, chosen by its scheme: a folder (an absolute path or
file://), S3, GCS and Azure through obstore, sftp:// and the rest of fsspec through fsspec.

Adding a backend: its module, one line in BACKENDS, its tests."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from .backend import Backend
from .errors import StoreConfigError
from .fsspec_store import SESSION_PROTOCOLS, open_fsspec_store, open_session_store
from .local import LocalBackend
from .objectstore import SCHEMES as OBJECT_STORE_SCHEMES
from .objectstore import open_object_store
from .redact import redact

__all__ = ["BACKENDS", "check_store_url", "open_backend"]


# What a URL's scheme looks like (RFC 3986): a letter, then letters, digits, +, - or .
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def check_store_url(url: str) -> str:
    """The store URL as it is to be opened, or StoreConfigError with the corrected form: a
    `scheme://…` URL or an absolute path (`~` allowed). Anything else (`s3:/bucket`, `s3:bucket`,
    `file:/tmp/x`, a relative folder) would otherwise become a local folder named after it in
    whatever the current folder is, which may be the work directory itself."""
    if not url or not url.strip():
        raise StoreConfigError(
            "The store URL is empty: set GPUWS_STORE or c.GpuWorkspace.store_url"
        )
    url = url.strip()
    if "::" in url:
        raise StoreConfigError(f"Chained URLs are not supported as a store: {url!r}")
    if "://" in url:
        scheme, _, rest = url.partition("://")
        if (
            scheme in ("file", "local")
            and rest
            and not rest.startswith("/")
            and urlparse(url).netloc != "localhost"
        ):
            raise StoreConfigError(
                f"The store URL {url!r} names a host, not a folder: did you mean 'file:///{rest}'?"
            )
        return url
    match = _SCHEME.match(url)
    if match and len(match.group(1)) > 1:  # not a bare drive letter
        scheme, rest = match.group(1), url[match.end() :].lstrip("/")
        better = f"file:///{rest}" if scheme.lower() in ("file", "local") else f"{scheme}://{rest}"
        raise StoreConfigError(
            f"The store URL {url!r} is neither scheme://… nor an absolute path: did you mean "
            f"{better!r}?"
        )
    path = os.path.expanduser(url)
    if not os.path.isabs(path):
        raise StoreConfigError(
            f"The store {url!r} is a relative path, which would depend on the current folder: "
            f"give an absolute one (did you mean {os.path.abspath(path)!r}?) or a scheme://… URL"
        )
    return url


def _local(
    url: str, storage_options: dict[str, Any], durable: bool, max_concurrency: int
) -> Backend:
    parsed = urlparse(url)
    if parsed.netloc not in ("", "localhost"):
        raise StoreConfigError(f"A file:// store URL cannot name a host: {url!r}")
    return LocalBackend(parsed.path, durable)


def _object_store(
    url: str, storage_options: dict[str, Any], durable: bool, max_concurrency: int
) -> Backend:
    if not urlparse(url).netloc:
        raise StoreConfigError(f"The store URL {url!r} names no bucket")
    return open_object_store(url, storage_options, max_concurrency)


def _session(
    url: str, storage_options: dict[str, Any], durable: bool, max_concurrency: int
) -> Backend:
    return open_session_store(url, storage_options, max_concurrency)


def _fsspec(
    url: str, storage_options: dict[str, Any], durable: bool, max_concurrency: int
) -> Backend:
    return open_fsspec_store(url, storage_options, max_concurrency)


Opener = Callable[[str, dict[str, Any], bool, int], Backend]

# The backend for each scheme; any scheme not here is tried as an fsspec file system.
BACKENDS: dict[str, Opener] = {
    "file": _local,
    "local": _local,
    **{scheme: _object_store for scheme in OBJECT_STORE_SCHEMES},
    **{scheme: _session for scheme in SESSION_PROTOCOLS},
}


def open_backend(
    url: str,
    storage_options: dict[str, Any] | None = None,
    durable: bool = True,
    max_concurrency: int = 4,
) -> Backend:
    """A backend for a store URL (checked by check_store_url): an absolute path or file:// URL
    (a local folder), S3, GCS or Azure (obstore), or any other fsspec URL."""
    try:
        url = check_store_url(url)
        if "://" not in url:
            return LocalBackend(os.path.expanduser(url), durable)
        opener = BACKENDS.get(urlparse(url).scheme, _fsspec)
        return opener(url, dict(storage_options or {}), durable, max_concurrency)
    except StoreConfigError as err:
        shown = redact(str(err))  # the URL it names may hold a password
        if shown == str(err):
            raise
        raise StoreConfigError(shown) from None
