"""The layout of one workspace inside a store, so that the mirror stays browsable with ordinary tools:

<store_url>/<workspace>/files/<relative path>    the mirror
<store_url>/<workspace>/.gpuws/                   lease.json, versions/, …
"""

from __future__ import annotations

import json
import time
from typing import Any

from .backend import Backend, RemoteFile
from .errors import StoreConfigError
from .names import decode, encode


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
        return {decode(f.key[len(prefix) :]): f for f in self.backend.list(base)}

    def list_versions(self, rel: str | None = None) -> list[tuple[str, str, RemoteFile]]:
        """(relative path, stamp, file) for every kept version, or those of one path."""
        prefix = f"{self.workspace}/.gpuws/versions/"
        base = prefix + encode(rel) if rel else prefix.rstrip("/")
        out = []
        for f in self.backend.list(base):
            stored, _, stamp = f.key[len(prefix) :].rpartition("/")
            path = decode(stored)
            if rel is None or path == rel:
                out.append((path, stamp, f))
        return sorted(out, key=lambda item: (item[0], item[1]))


def version_stamp(now: float | None = None) -> str:
    """Sortable UTC time with microseconds: 20261129T154210.123456Z."""
    now = time.time() if now is None else now
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
