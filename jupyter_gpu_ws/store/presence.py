"""Whether the store is there and is the one this machine synced to, before anything is written:
a missing store folder, or a workspace this machine synced that is gone from it, is the store
unavailable (a drive that dropped), never an empty store made anew by accident.

A store's folder is made only on an explicit first use: the embedded default (`create`), the
user's `create_store` setting or `--create-store` (also `create`), or a folder whose parent is
there and holds other things (a home folder, a mounted drive with files on it). A parent that is
missing or empty is what an unmounted drive looks like (`/content/drive`, `/mnt/disk`): making the
store there would write this machine's files into the mount point. And never where this
machine's record says it synced the workspace before: that store has gone, not begun.
"""

from __future__ import annotations

import os

from .backend import Backend
from .errors import StoreConfigError, StoreMissingError


def check_store(
    backend: Backend, workspace: str, synced_files: int, synced_before: bool, create: bool
) -> None:
    """Make the store usable as it is, or raise StoreMissingError saying why not and what to do.

    `synced_files`, `synced_before`: what this machine's record of the workspace holds (a file
    count, and whether a pass ever completed). Once this returns, a write never makes the
    store's folder, nor the workspace's once it is there or known here: if they vanish later,
    the store is unavailable until they are back."""
    if not backend.present(""):
        if synced_before or synced_files:
            raise StoreMissingError(
                f"{backend.missing('')}. This machine synced {_files(synced_files)} of the workspace {workspace} "
                "to it. To start a new store there instead, use Take over."
            )
        if not (create or fresh_place(backend)):
            raise StoreMissingError(
                f"The store folder {_root(backend)} does not exist, and the folder it would go in is missing or "
                "empty, as an unmounted drive is: mount the drive, or create the store folder (mkdir -p) if it is "
                "to be a new store, or set c.GpuWorkspace.create_store = True (--create-store on the command line)"
            )
        backend.make("")
    backend.expect("")
    if backend.present(workspace):
        backend.expect(workspace)
        return
    if synced_before or synced_files:
        backend.expect(workspace)
        raise StoreMissingError(
            f"{backend.missing(workspace)}. This machine synced {_files(synced_files)} of the workspace {workspace} "
            "to it. To start the workspace again there from this machine's files, use Take over."
        )


def make_anew(backend: Backend, workspace: str) -> None:
    """The user's word (Take over) on a missing store: make its folder and the workspace's."""
    backend.make("")
    backend.make(workspace)


def fresh_place(backend: Backend) -> bool:
    """Whether the folder that would hold a missing store folder is there and holds other
    things: a real place to begin a store, not an empty mount point."""
    root = _root(backend)
    if root is None:
        return True  # not a folder of this machine: nothing to mistake for an unmounted drive
    return holds_things(os.path.dirname(root.rstrip(os.sep)) or os.sep)


def holds_things(folder: str) -> bool:
    """Whether `folder` is there and not empty (an empty one may be a drive not mounted)."""
    try:
        with os.scandir(folder) as entries:
            return any(True for _ in entries)
    except OSError:
        return False


def _root(backend: Backend) -> str | None:
    inner = getattr(backend, "inner", backend)  # an encrypted store: where its objects really are
    root = getattr(inner, "root", None)
    return root if isinstance(root, str) and getattr(inner, "fs", None) is None else None


def _files(n: int) -> str:
    return "files" if n == 0 else f"{n} file" if n == 1 else f"{n:,} files"


def keep_apart(backend: Backend, workdir: str, state_dir: str, embedded: bool) -> list[str]:
    """Check that the store and the work directory do not hold each other, and return the
    excludes (gitignore lines) that keep this engine's own folders out of the mirror.

    A store folder inside the work directory would be uploaded into itself at every pass (a
    mistyped or relative store path lands there), and a work directory inside the store's folder
    would mirror the store: both are StoreConfigError, with the way out. The embedded default and
    the state folder (this machine's record) may lie inside a work directory that is the home
    folder: they are left out of the mirror instead."""
    workdir = os.path.realpath(workdir)
    own: list[str] = []
    for folder, ours in ((_root(backend), embedded), (state_dir, True)):
        if folder is None:
            continue
        real = os.path.realpath(folder)
        if real == workdir:
            raise StoreConfigError(
                f"The {'state' if folder == state_dir else 'store'} folder {folder} is the work "
                "directory itself: choose a folder outside it."
            )
        if _within(real, workdir):
            if not ours:
                raise StoreConfigError(
                    f"The store folder {folder} is inside the work directory {workdir}: every pass would upload "
                    "the store into itself. Choose a store folder outside the work directory."
                )
            own.append("/" + _pattern(os.path.relpath(real, workdir)) + "/")
        elif _within(workdir, real) and folder != state_dir:
            raise StoreConfigError(
                f"The work directory {workdir} is inside the store folder {folder}: the store would mirror "
                "itself. Choose a store folder that does not hold the work directory."
            )
    return own


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _pattern(rel: str) -> str:
    """A relative path as a gitignore pattern matching exactly it."""
    out = "".join("\\" + ch if ch in "*?[]\\!# " else ch for ch in rel.replace(os.sep, "/"))
    return out
