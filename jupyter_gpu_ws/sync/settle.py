"""Which files are still being written: a file goes to the store once it settles, not while a
writer is filling it (ten truncated copies of one file, each kept as a version, is what the
store got otherwise).

A file the watcher saw closed after its last write goes at once (inotify's IN_CLOSE_WRITE: a
saved notebook, a checkpoint renamed into place). A file still open for writing, or one whose
closing nobody can see (watchfiles, a rescan), waits until it has not changed for the settle
interval. A file that never settles (a log the training loop keeps open and appends to) goes
as it is after `longest` seconds of waiting, and again every `longest` seconds while it keeps
changing, so a `kill -9` costs at most that much of it; a persist takes every file as it is.
Such a copy is partial: it replaces the previous copy and is never kept as a previous version.
"""

from __future__ import annotations

import threading
import time

from .scan import LocalFile

# A file that keeps changing is sent as it is (a partial copy) every this many seconds, so a
# crash loses at most this much of a log kept open.
LONGEST_WAIT = 30.0


class Settling:
    def __init__(self, interval: float, longest: float = LONGEST_WAIT) -> None:
        self.interval = max(0.0, interval)
        self.longest = longest
        # Whether the watcher says when a file is closed after writing (inotify): then a file it
        # does not list as open goes at once.
        self.sees_closing = False
        self._lock = threading.Lock()
        self._open: set[str] = set()  # paths whose latest event left them open for writing
        self._waiting_since: dict[str, float] = {}  # monotonic: when each began to wait

    def heard(self, paths: set[str], writing: set[str]) -> None:
        """The watcher's news: `paths` changed, and of them `writing` are still open for writing."""
        with self._lock:
            for rel in paths:
                if rel in writing:
                    self._open.add(rel)
                else:
                    self._open.discard(rel)

    def unsettled(self, f: LocalFile) -> bool:
        """Whether `f` may still be being written: open for writing, or changed within the
        settle interval where nobody sees it closed."""
        age = (time.time_ns() - f.mtime_ns) / 1e9
        if age < 0:
            return False  # a time in the future (a touch, another clock): nothing to wait for
        with self._lock:
            open_now = f.path in self._open
        if not open_now and self.sees_closing:
            return False
        return age < self.interval

    def partial(self, f: LocalFile) -> bool:
        """Whether a copy of `f` sent now is known to be partial: the watcher says a writer still
        has it open, or it never settled and is sent as it is. (Where nobody sees files closed, a
        recent change alone says nothing: the file may well be whole.)"""
        with self._lock:
            open_now = self.sees_closing and f.path in self._open
            since = self._waiting_since.get(f.path)
        if open_now:
            return self.unsettled(f)
        return since is not None and time.monotonic() - since >= self.longest and self.unsettled(f)

    def wait(self, f: LocalFile) -> float:
        """Seconds until `f` may go (0: now)."""
        if not self.unsettled(f):
            self.done(f.path)
            return 0.0
        now = time.monotonic()
        with self._lock:
            since = self._waiting_since.setdefault(f.path, now)
        if now - since >= self.longest:
            return 0.0  # it never settles: sent as it is, a partial copy
        age = max(0.0, (time.time_ns() - f.mtime_ns) / 1e9)
        return max(0.05, min(self.interval - age, self.longest - (now - since)))

    def sent_partial(self, rel: str) -> None:
        """A partial copy of `rel` was just sent: the next one waits `longest` seconds again."""
        with self._lock:
            if rel in self._waiting_since:
                self._waiting_since[rel] = time.monotonic()

    def done(self, rel: str) -> None:
        with self._lock:
            self._waiting_since.pop(rel, None)
