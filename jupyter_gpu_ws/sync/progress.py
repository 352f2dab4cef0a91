"""Progress accounting: files and bytes done of total, speed and time left; one place every
transfer reports to, and that a job waiting on another's pass can follow."""

from __future__ import annotations

import threading
import time
from typing import Any

# Speed is measured over at least this long before an ETA is given (a first burst misleads).
MIN_SPEED_WINDOW = 0.5


class Progress:
    """Files and bytes done of total; one instance per job, updated from worker threads.

    `attach(other)` makes this progress also count into `other` from now on, as well as what it
    has counted so far: a Persist now that waits for a pass already running shows that pass's
    work as part of its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.files_total = 0
        self.files_done = 0
        self.bytes_total = 0
        self.bytes_done = 0
        self.phase = "planning"
        self.current: str | None = None
        self.started: float | None = None  # monotonic, at the first planned work
        self._followers: list[Progress] = []

    def attach(self, follower: Progress) -> None:
        with self._lock:
            if follower is self or follower in self._followers:
                return
            self._followers.append(follower)
            files_done, files_total = self.files_done, self.files_total
            bytes_done, bytes_total, phase = self.bytes_done, self.bytes_total, self.phase
            started = self.started
        with follower._lock:  # its speed counts from when the work it joins began
            if started is not None and (follower.started is None or started < follower.started):
                follower.started = started
        follower.plan(files_total, bytes_total, phase)
        follower._count(files_done, bytes_done, self.current)

    def plan(self, files: int, size: int, phase: str) -> None:
        with self._lock:
            if self.started is None and (files or size):
                self.started = time.monotonic()
            self.files_total += files
            self.bytes_total += size
            self.phase = phase
            followers = list(self._followers)
        for follower in followers:
            follower.plan(files, size, phase)

    def set_items(self, done: int, total: int, current: str | None, phase: str) -> None:
        """Progress counted in items other than files (packages of an environment restore)."""
        with self._lock:
            self.files_done, self.files_total, self.current, self.phase = (
                done,
                total,
                current,
                phase,
            )

    def set_phase(self, phase: str) -> None:
        with self._lock:
            self.phase = phase
            followers = list(self._followers)
        for follower in followers:
            follower.set_phase(phase)

    def add_bytes(self, n: int) -> None:
        self._count(0, n, None)

    def take_back(self, n: int) -> None:
        """Bytes counted for a copy that was abandoned (its file changed mid-copy, or the store
        failed it): they are sent again, and counted again then, never twice."""
        self._count(0, -n, None)

    def resize(self, delta: int) -> None:
        """A planned file's size changed before it was sent again: the total follows it."""
        with self._lock:
            self.bytes_total += delta
            followers = list(self._followers)
        for follower in followers:
            follower.resize(delta)

    def file_done(self, path: str, size: int = 0) -> None:
        """A file is done; `size`: its bytes not counted yet (a small file's, all at once)."""
        self._count(1, size, path)

    def _count(self, files: int, size: int, path: str | None) -> None:
        with self._lock:
            self.files_done += files
            self.bytes_done += size
            if path is not None:
                self.current = path
            followers = list(self._followers)
        for follower in followers:
            follower._count(files, size, path)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            speed = eta = None
            if self.started is not None:
                elapsed = time.monotonic() - self.started
                if elapsed >= MIN_SPEED_WINDOW and self.bytes_done:
                    speed = self.bytes_done / elapsed
                    eta = max(0.0, self.bytes_total - self.bytes_done) / speed
            return {
                "phase": self.phase,
                "files_done": self.files_done,
                "files_total": self.files_total,
                "bytes_done": self.bytes_done,
                "bytes_total": self.bytes_total,
                "current": self.current,
                "speed": speed,  # bytes per second since the work began
                "eta": eta,  # seconds left at that speed
            }


class RateLimiter:
    """A token bucket shared by every transfer thread."""

    def __init__(self, bytes_per_second: int) -> None:
        self.rate = float(bytes_per_second)
        self._lock = threading.Lock()
        self._allowance = self.rate
        self._last = time.monotonic()

    def take(self, n: int) -> None:
        with self._lock:
            now = time.monotonic()
            self._allowance = min(self.rate, self._allowance + (now - self._last) * self.rate)
            self._last = now
            self._allowance -= n
            wait = -self._allowance / self.rate if self._allowance < 0 else 0.0
        if wait > 0:
            time.sleep(wait)
