"""Walks the work directory with os.scandir, pruning ignored folders and virtual environments."""

from __future__ import annotations

import os
import stat as stat_module
from collections.abc import Callable, Iterator
from typing import NamedTuple

from .ignore import IgnoreRules


class LocalFile(NamedTuple):
    # A tuple, not a dataclass: the collector stops looking at it (see index.Record).
    path: str  # relative, '/' separated
    size: int
    mtime_ns: int


def is_environment(dir_path: str) -> bool:
    """A Python virtual environment or conda environment: rebuilt, never mirrored."""
    return os.path.exists(os.path.join(dir_path, "pyvenv.cfg")) or os.path.isdir(
        os.path.join(dir_path, "conda-meta")
    )


def scan(
    workdir: str,
    rules: IgnoreRules,
    under: str = "",
    problems: Callable[[str, str], None] | None = None,
) -> Iterator[LocalFile]:
    """Every regular file to mirror (below the folder `under`, when given). Symbolic links are
    not followed (they may loop or leave the work directory). A folder that cannot be read is
    told to `problems` (its path with a trailing '/', and why), not skipped without a word."""
    stack = [
        (
            f"{under}/" if under else "",
            os.path.join(workdir, *under.split("/")) if under else workdir,
        )
    ]
    while stack:
        rel_dir, abs_dir = stack.pop()
        try:
            entries = list(os.scandir(abs_dir))
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as err:  # unreadable: its files cannot be synced, and the user is told
            if problems is not None and rel_dir:
                problems(rel_dir, f"folder cannot be read: {err.strerror or err}")
            continue
        for entry in entries:
            rel = f"{rel_dir}{entry.name}"
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not rules.ignored(rel, is_dir=True) and not is_environment(entry.path):
                        stack.append((rel + "/", entry.path))
                elif entry.is_file(follow_symlinks=False):
                    if not rules.ignored(rel):
                        st = entry.stat(follow_symlinks=False)
                        yield LocalFile(rel, st.st_size, st.st_mtime_ns)
            except FileNotFoundError:
                continue  # vanished while we looked


def local_path(workdir: str, rel: str) -> str:
    """The path on this machine of `rel` (relative to the work directory, '/'-separated)."""
    if os.sep == "/" and rel:
        return f"{workdir.rstrip('/')}/{rel}"  # the same as the join, cheaper: once per file
    return os.path.join(workdir, *rel.split("/"))


def stat_path(workdir: str, rel: str, rules: IgnoreRules) -> LocalFile | None:
    """One path as the scan would see it, or None if it is gone, not a file, or ignored."""
    parts = rel.split("/")
    if rules.ignored(rel):
        return None
    for depth in range(1, len(parts)):
        parent = "/".join(parts[:depth])
        if rules.ignored(parent, is_dir=True) or is_environment(os.path.join(workdir, parent)):
            return None
    try:
        st = os.lstat(os.path.join(workdir, rel))
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat_module.S_ISREG(st.st_mode):
        return None
    return LocalFile(rel, st.st_size, st.st_mtime_ns)
