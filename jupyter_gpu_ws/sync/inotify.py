"""Linux inotify for the sync service: changed paths of a tree, with no work while nothing changes.

watchfiles (the portable watcher) looks for news every `step` milliseconds, so an idle work
directory still costs a wake-up a step: about 0.7 % of a core at 10 ms on the development
machine. Here the thread sleeps in `poll()` until the kernel has an event, then collects
events until `quiet` milliseconds pass without one (or `longest` since the first), and reports
the set of paths, and which files a writer still had open (no close yet). A new folder is watched as it appears and reported whole (files written into
it before its watch existed are found by the pass); a folder moved or deleted is reported
whole and forgotten. A queue overflow reports None: the caller rescans.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import select
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

log = logging.getLogger(__name__)

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_DONT_FOLLOW = 0x2000000
IN_EXCL_UNLINK = 0x4000000
IN_ISDIR = 0x40000000

MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
    | IN_EXCL_UNLINK
)
EVENT = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows
READ_SIZE = 256 * 1024

_libc: ctypes.CDLL | None = None


@dataclass
class Batch:
    paths: set[str]  # files and folders (a folder stands for everything in it)
    writing: set[str]  # those files still open for writing at their latest event


class WatchError(OSError):
    """The tree cannot be watched (any more): the message says why."""


def available() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "eventfd") and _lib() is not None


def _lib() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.inotify_init1.argtypes = [ctypes.c_int]
            libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
            _libc = libc
        except (OSError, AttributeError):
            return None
    return _libc


class TreeWatcher:
    """inotify watches on every folder of `root` that `skip` does not exclude.

    `skip(rel, abs_path)` is asked of each folder before it is watched (ignored folders and
    virtual environments are not). Paths are relative to `root`, '/'-separated.
    """

    def __init__(
        self, root: str, skip: Callable[[str, str], bool] = lambda rel, path: False
    ) -> None:
        libc = _lib()
        if libc is None or not hasattr(os, "eventfd"):
            raise WatchError("inotify is not available here")
        self.root = os.path.realpath(
            root
        )  # a work directory reached through a link is watched where it is
        self.skip = skip
        self._libc = libc
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise WatchError(
                f"Cannot watch the work directory: {os.strerror(err)}"
                + (
                    " (too many watchers: fs.inotify.max_user_instances)"
                    if err == errno.EMFILE
                    else ""
                )
            )
        self.fd = fd
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._lock = threading.Lock()
        self.dirs: dict[int, str] = {}  # watch descriptor → folder ('' for the root)
        self.wds: dict[str, int] = {}
        self.limited = False  # the system's limit on watches was reached: some folders unwatched
        self.closed = False
        self._open = True  # the descriptors, until release()
        if not os.path.isdir(self.root):
            self.release()
            raise WatchError(f"The work directory {self.root} does not exist")
        self.add_tree("")
        if "" not in self.wds:
            self.release()
            raise WatchError(f"Cannot watch the work directory {self.root}")

    # -- watches ---------------------------------------------------------------------------

    def _add(self, rel: str, path: str) -> bool:
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), MASK)
        if wd < 0:
            err = ctypes.get_errno()
            if err == errno.ENOSPC and not self.limited:
                self.limited = True
                log.warning(
                    "Sync: more folders than the system lets one watch (fs.inotify.max_user_watches); "
                    "changes in the others are found by the periodic rescan"
                )
            return False  # gone meanwhile, not a folder, no permission, or the limit
        old = self.dirs.get(wd)
        if old is not None and old != rel:
            self.wds.pop(old, None)
        self.dirs[wd] = rel
        self.wds[rel] = wd
        return True

    def add_tree(self, rel: str) -> None:
        """Watch the folder `rel` and every folder below it (again: already watched is fine)."""
        stack = [rel]
        while stack:
            current = stack.pop()
            path = os.path.join(self.root, *current.split("/")) if current else self.root
            if current and self.skip(current, path):
                continue
            if not self._add(current, path):
                continue
            try:
                with os.scandir(path) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(f"{current}/{entry.name}" if current else entry.name)
            except OSError:
                continue

    def _forget_tree(self, rel: str) -> None:
        prefix = rel + "/"
        for name in [d for d in self.wds if d == rel or d.startswith(prefix)]:
            wd = self.wds.pop(name)
            self.dirs.pop(wd, None)
            self._libc.inotify_rm_watch(self.fd, wd)

    # -- events ----------------------------------------------------------------------------

    def _read(self, into: set[str], writing: set[str]) -> bool:
        """Every queued event into `into`, and into `writing` the files whose latest event
        says a writer still has them open; True if the kernel's queue overflowed."""
        overflow = False
        while True:
            try:
                data = os.read(self.fd, READ_SIZE)
            except BlockingIOError:
                return overflow
            if not data:
                return overflow
            offset = 0
            while offset + EVENT.size <= len(data):
                wd, mask, _, length = EVENT.unpack_from(data, offset)
                raw = data[offset + EVENT.size : offset + EVENT.size + length]
                offset += EVENT.size + length
                if mask & IN_Q_OVERFLOW:
                    overflow = True
                    continue
                base = self.dirs.get(wd)
                if base is None:
                    continue
                if mask & IN_IGNORED:
                    self.dirs.pop(wd, None)
                    if self.wds.get(base) == wd:
                        del self.wds[base]
                    continue
                name = os.fsdecode(raw.rstrip(b"\0"))
                if not name:  # the watched folder itself went away or moved
                    if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                        if base == "":
                            raise WatchError(f"The work directory {self.root} was moved or deleted")
                        self._forget_tree(base)
                    continue
                rel = f"{base}/{name}" if base else name
                if mask & IN_ISDIR:
                    if mask & (IN_CREATE | IN_MOVED_TO):
                        self.add_tree(rel)
                    elif mask & (IN_MOVED_FROM | IN_DELETE):
                        self._forget_tree(rel)
                    else:
                        continue  # a folder's own attributes: nothing to mirror
                elif mask & (IN_CREATE | IN_MODIFY):
                    writing.add(rel)
                elif mask & (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE):
                    writing.discard(rel)
                into.add(rel)

    def changes(self, quiet_ms: int, longest_ms: int = 1600) -> Iterator[Batch | None]:
        """Batches of changed paths, each once `quiet_ms` pass without an event (or `longest_ms`
        after its first); None after an overflow. Ends at `close()`."""
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        poller.register(self._wake, select.POLLIN)
        while not self.closed:
            ready = poller.poll()  # no timeout: nothing to do until the kernel says so
            if self._woken(ready) or self.closed:
                return
            batch = Batch(set(), set())
            overflow = self._read(batch.paths, batch.writing)
            first = time.monotonic()
            while True:
                left = longest_ms - (time.monotonic() - first) * 1000
                if left <= 0:
                    break  # a stream of events that does not stop is reported in slices
                ready = poller.poll(min(quiet_ms, left))
                if not ready:
                    break
                if self._woken(ready):
                    return
                overflow = self._read(batch.paths, batch.writing) or overflow
            if overflow:
                yield None
            elif batch.paths:
                yield batch

    def _woken(self, ready: list[tuple[int, int]]) -> bool:
        if any(fd == self._wake for fd, _ in ready):
            try:
                os.eventfd_read(self._wake)
            except BlockingIOError:
                pass
            return True
        return False

    def close(self) -> None:
        """Make `changes()` return, from any thread."""
        with self._lock:  # release() closes the descriptors under the same lock
            if self.closed:
                return
            self.closed = True
            if self._open:
                try:
                    os.eventfd_write(self._wake, 1)
                except OSError:
                    pass

    def release(self) -> None:
        """Free the descriptors (after the thread that reads `changes()` has returned)."""
        self.close()
        with self._lock:
            if not self._open:
                return
            self._open = False
            for fd in (self.fd, self._wake):
                try:
                    os.close(fd)
                except OSError:
                    pass
