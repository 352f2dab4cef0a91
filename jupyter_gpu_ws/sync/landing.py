"""Files that arrive in the work directory whole or not at all, and never over another file.

A download is written into an unnamed file (`O_TMPFILE`) in the folder of its target and linked
under its name only once it is complete and checked: a process killed before that leaves
nothing behind, not even a temporary file. Where the file system has no unnamed files (NFS,
some FUSE and older overlay mounts) or /proc is not there to link one, it is written under a
hidden temporary name (`.~name.gpuws-part-xxxx`, which scans and listings skip) and linked from
there. Either way the link fails if the name is taken meanwhile (the user saved a file of
that name): the caller keeps both then.
"""

from __future__ import annotations

import errno
import os
import threading
import uuid

from ..diskio import stop_turns, take_turns
from ..store.backend import PART_SUFFIX

O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_TMPFILE = getattr(os, "O_TMPFILE", 0)
# O_TMPFILE refusals that mean "not on this file system" (old kernels answer EISDIR).
_NO_TMPFILE = {errno.EOPNOTSUPP, errno.ENOTSUP, errno.EISDIR, errno.EINVAL, errno.ENOSYS}

_probe_lock = threading.Lock()
_unnamed_works: dict[int, bool] = {}  # per device: whether an unnamed file can be linked there
_folders: dict[str, bool] = {}  # the same answer per folder, so each file costs no stat


class IncomingFile:
    """A file being written for `target`; `link()` gives it a name once it is complete.
    `shared`: several threads write it at once (its parts): they take turns (diskio.take_turns)."""

    def __init__(self, target: str, shared: bool = False) -> None:
        self.folder, self.name = os.path.split(target)
        self.tmp: str | None = None  # the temporary name, where there is one
        self.fd = -1
        if O_TMPFILE and unnamed_files_work(self.folder):
            try:
                self.fd = os.open(self.folder, O_TMPFILE | os.O_RDWR | O_CLOEXEC, 0o666)
            except OSError as err:
                if err.errno not in _NO_TMPFILE:
                    raise
        if self.fd < 0:
            self.tmp = os.path.join(
                self.folder, f".~{self.name}{PART_SUFFIX}-{uuid.uuid4().hex[:8]}"
            )
            self.fd = os.open(self.tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | O_CLOEXEC, 0o666)
        if shared:
            take_turns(self.fd)

    def link(self, path: str) -> None:
        """Give the complete file the name `path` (in the same folder or another on this file
        system); FileExistsError if that name is taken: nothing is ever replaced."""
        if self.tmp is not None:
            os.link(self.tmp, path)
        else:
            _link_unnamed(self.fd, path)

    def close(self) -> None:
        """Close it; an unnamed file that was never linked vanishes, a temporary name goes."""
        if self.fd >= 0:
            stop_turns(self.fd)
            os.close(self.fd)
            self.fd = -1
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except FileNotFoundError:
                pass
            self.tmp = None

    def __enter__(self) -> IncomingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _link_unnamed(fd: int, path: str) -> None:
    # linkat(AT_FDCWD, "/proc/self/fd/N", …, AT_SYMLINK_FOLLOW) is how an unnamed file gets a
    # name without privileges; os.link calls linkat (not link) only when given a directory fd,
    # and the absolute source path makes the kernel ignore the one given here.
    os.link(f"/proc/self/fd/{fd}", path, src_dir_fd=_root_fd(), follow_symlinks=True)


_root: int | None = None
_root_lock = threading.Lock()


def _root_fd() -> int:
    global _root
    if _root is None:
        with _root_lock:
            if _root is None:
                _root = os.open("/", os.O_RDONLY | O_CLOEXEC)
    return _root


def unnamed_files_work(folder: str) -> bool:
    """Whether an unnamed file made in `folder` can be linked under a name (tried once per
    file system: the kernel, the file system and /proc must all allow it)."""
    known = _folders.get(folder)
    if known is not None:
        return known
    try:
        device = os.stat(folder).st_dev
    except OSError:
        return False
    if len(_folders) > 4096:
        _folders.clear()  # a bound, not an eviction policy: the next files look again
    with _probe_lock:
        if device not in _unnamed_works:
            _unnamed_works[device] = _try_unnamed(folder)
    _folders[folder] = _unnamed_works[device]
    return _unnamed_works[device]


def _try_unnamed(folder: str) -> bool:
    probe = os.path.join(folder, f".~gpuws-probe{PART_SUFFIX}-{uuid.uuid4().hex[:8]}")
    try:
        fd = os.open(folder, O_TMPFILE | os.O_RDWR | O_CLOEXEC, 0o600)
    except OSError:
        return False
    try:
        _link_unnamed(fd, probe)
    except OSError:
        return False
    finally:
        os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass
    return True


def conflict_name(path: str, stamp: str, n: int) -> str:
    """`name.conflict-<stamp>.ext` (then `-2`, `-3`, … when taken): where the store's copy of
    a file lands when the local one differs."""
    base, ext = os.path.splitext(path)
    return f"{base}.conflict-{stamp}{ext}" if n == 1 else f"{base}.conflict-{stamp}-{n}{ext}"
