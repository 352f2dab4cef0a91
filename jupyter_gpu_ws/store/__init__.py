"""The store: where a workspace outlives this machine. One module per backend (a local folder,
object stores on obstore, other fsspec file systems) behind one small interface (backend.py),
chosen by URL scheme (registry.py); the encrypting layer (crypto/) wraps any of them; the
workspace's layout, lease, versions and records sit above the interface and know no cloud."""

from .backend import PART_SUFFIX, Backend, RemoteFile, SourceChangedError
from .fsspec_store import FsspecBackend
from .layout import Store, version_stamp
from .local import LocalBackend
from .objectstore import ObjectStoreBackend
from .registry import BACKENDS, check_store_url, open_backend

__all__ = [
    "BACKENDS",
    "PART_SUFFIX",
    "Backend",
    "FsspecBackend",
    "LocalBackend",
    "ObjectStoreBackend",
    "RemoteFile",
    "SourceChangedError",
    "Store",
    "check_store_url",
    "open_backend",
    "version_stamp",
]
