"""Walks the work directory with os.scandir, pruning ignored folders and virtual environments.
A symbolic link is not followed but mirrored as what it is (links.py)."""

from __future__ import annotations

import os
import stat as stat_module
from collections.abc import Callable, Iterator
from typing import NamedTuple

from .ignore import IgnoreRules
from .links import LINK_SUFFIX, NAME_TAKEN, link_target


class LocalFile(NamedTuple):
    # A tuple, not a dataclass: the collector stops looking at it (see index.Record).
    path: str  # relative, '/' separated; a link's ends with LINK_SUFFIX
    size: int  # a link's: its stored target's length
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
    """Every regular file to mirror, and every link inside (named with LINK_SUFFIX), below the
    folder `under` when given. Links are not followed. A folder that cannot be read (its path
    with a trailing '/'), a link that points outside or loops, and a file whose name takes the
    links' suffix are told to `problems` with the reason, not skipped without a word."""
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
                    if rules.ignored(rel):
                        continue
                    if rel.endswith(LINK_SUFFIX):
                        if problems is not None:
                            problems(rel, NAME_TAKEN)
                        continue
                    st = entry.stat(follow_symlinks=False)
                    yield LocalFile(rel, st.st_size, st.st_mtime_ns)
                elif entry.is_symlink() and not rules.ignored(rel):
                    data, why = link_target(workdir, rel)
                    if data is not None:
                        st = entry.stat(follow_symlinks=False)
                        yield LocalFile(rel + LINK_SUFFIX, len(data), st.st_mtime_ns)
                    elif why is not None and problems is not None:
                        problems(rel, why)
            except FileNotFoundError:
                continue  # vanished while we looked


def local_path(workdir: str, rel: str) -> str:
    """The path on this machine of `rel` (relative to the work directory, '/'-separated)."""
    if os.sep == "/" and rel:
        return f"{workdir.rstrip('/')}/{rel}"  # the same as the join, cheaper: once per file
    return os.path.join(workdir, *rel.split("/"))


def stat_path(
    workdir: str,
    rel: str,
    rules: IgnoreRules,
    problems: Callable[[str, str], None] | None = None,
) -> LocalFile | None:
    """One name (a file's, or a link's with LINK_SUFFIX) as the scan would see it, or None if it
    is gone, not of that kind, or ignored; what the scan would tell `problems`, it tells."""
    link = rel.endswith(LINK_SUFFIX)
    if link:
        rel = rel[: -len(LINK_SUFFIX)]
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
        if (
            link
            and problems is not None
            and _regular_file(os.path.join(workdir, rel + LINK_SUFFIX))
        ):
            problems(rel + LINK_SUFFIX, NAME_TAKEN)
        return None
    if link:
        if problems is not None and _regular_file(os.path.join(workdir, rel + LINK_SUFFIX)):
            problems(rel + LINK_SUFFIX, NAME_TAKEN)  # a file of that name, beside the entry
        if not stat_module.S_ISLNK(st.st_mode):
            return None
        data, why = link_target(workdir, rel)
        if data is None:
            if why is not None and problems is not None:
                problems(rel, why)
            return None
        return LocalFile(rel + LINK_SUFFIX, len(data), st.st_mtime_ns)
    if not stat_module.S_ISREG(st.st_mode):
        return None
    return LocalFile(rel, st.st_size, st.st_mtime_ns)


def present(workdir: str, rel: str) -> bool:
    """Whether the entry that the name `rel` stands for is there (a link's: a link)."""
    if rel.endswith(LINK_SUFFIX):
        return os.path.islink(local_path(workdir, rel[: -len(LINK_SUFFIX)]))
    return os.path.lexists(local_path(workdir, rel))


def _regular_file(path: str) -> bool:
    """A regular file itself (a link to one is a link: mirrored as a link, never a clash)."""
    try:
        return stat_module.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
