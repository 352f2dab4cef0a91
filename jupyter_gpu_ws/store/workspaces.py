"""The workspaces of a store: which there are, how much each holds and when it was last written,
and which one a work directory uses when none is named.

A workspace's summary (`.gpuws/summary.json`: files, bytes, last write, the host and folder that
wrote it) is kept by the engine that writes it, so listing a store reads one small object per
workspace; a workspace without one (written by an older version) is counted by listing it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

from .backend import Backend
from .errors import StoreMissingError, SyncError, WorkspaceNotFoundError
from .layout import Store

SUMMARY_NAME = "summary.json"
# A workspace without a summary is counted by listing it, up to this many files.
COUNT_LIMIT = 10_000


@dataclass
class WorkspaceInfo:
    name: str
    files: int
    bytes: int
    last_write: float | None  # epoch seconds
    host: str | None = None
    folder: str | None = None  # the name of the work directory that wrote it last
    more: bool = False  # more files than were counted

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_workspaces(backend: Backend) -> list[WorkspaceInfo]:
    """Every workspace in the store (a folder holding files/ or .gpuws/), newest write first."""
    found = []
    for name in backend.folders(""):
        if name.startswith(".") or not _is_workspace(backend, name):
            continue
        found.append(describe(backend, name))
    return sorted(found, key=lambda w: (-(w.last_write or 0), w.name))


def _is_workspace(backend: Backend, name: str) -> bool:
    return bool(set(backend.folders(name)) & {"files", ".gpuws"})


def describe(backend: Backend, name: str) -> WorkspaceInfo:
    store = Store(backend, name)
    try:
        summary = store.read_json(SUMMARY_NAME)
    except (SyncError, ValueError):
        summary = None
    if isinstance(summary, dict) and isinstance(summary.get("files"), int):
        return WorkspaceInfo(
            name,
            summary["files"],
            int(summary.get("bytes") or 0),
            summary.get("last_write"),
            summary.get("host"),
            summary.get("folder"),
        )
    files = size = 0
    newest: float | None = None
    more = False
    for f in backend.list(f"{name}/files"):
        if files >= COUNT_LIMIT:
            more = True
            break
        files, size = files + 1, size + f.size
        if f.mtime is not None and (newest is None or f.mtime > newest):
            newest = f.mtime
    return WorkspaceInfo(name, files, size, newest, more=more)


def workspace_exists(backend: Backend, name: str) -> bool:
    return name in backend.folders("") and _is_workspace(backend, name)


def require_store(backend: Backend) -> None:
    """A clear error when the store's folder is not there, for a command that only reads: a
    mistyped URL or an unmounted drive is not an empty store, and nothing is made in its place."""
    if not backend.present(""):
        raise StoreMissingError(
            f"No store at {backend.description}: nothing there to read (check the URL, or mount "
            "the drive it is on)"
        )


def require_workspace(backend: Backend, name: str) -> None:
    """A clear error naming the workspaces that do exist, when `name` is not one of them."""
    if workspace_exists(backend, name):
        return
    others = [w.name for w in list_workspaces(backend)]
    where = backend.description
    if others:
        raise WorkspaceNotFoundError(
            f"No workspace {name!r} in {where}; it holds: {', '.join(others[:12])}"
            + (" …" if len(others) > 12 else "")
            + " (choose one with --workspace)"
        )
    raise WorkspaceNotFoundError(
        f"No workspace {name!r} in {where}: the store holds no workspace yet"
    )


def write_summary(store: Store, files: int, size: int, host: str, folder: str) -> None:
    store.write_json(
        SUMMARY_NAME,
        {"files": files, "bytes": size, "last_write": time.time(), "host": host, "folder": folder},
    )


# -- the name a work directory uses ---------------------------------------------------------------

CHOICES_FILE = "workspaces.json"


def remembered_choice(state_dir: str, workdir: str) -> str | None:
    """The workspace the user chose for this work directory on this machine (the panel's
    "Use this workspace"), if any."""
    try:
        with open(os.path.join(state_dir, CHOICES_FILE), encoding="utf-8") as f:
            value = json.load(f).get(os.path.abspath(workdir))
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value else None


def remember_choice(state_dir: str, workdir: str, name: str) -> None:
    path = os.path.join(state_dir, CHOICES_FILE)
    os.makedirs(state_dir, exist_ok=True)
    try:
        with open(path, encoding="utf-8") as f:
            choices = json.load(f)
        if not isinstance(choices, dict):
            choices = {}
    except (OSError, ValueError):
        choices = {}
    choices[os.path.abspath(workdir)] = name
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(choices, f, indent=1)
    os.replace(tmp, path)


def resolve_workspace(backend: Backend, default: str, legacy: str | None) -> tuple[str, str | None]:
    """The default name, unless only the name earlier versions derived (`legacy`, which hashed
    the absolute path) exists in the store: then that one, so an existing workspace keeps working.
    Returns the name and, when it differs from the default, why."""
    if legacy and legacy != default:
        try:
            if not workspace_exists(backend, default) and workspace_exists(backend, legacy):
                return (
                    legacy,
                    f"the workspace {legacy!r} named by an earlier version for this folder",
                )
        except SyncError:
            pass  # the store does not answer now: the default, and the sync says why
    return default, None
