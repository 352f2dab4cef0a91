"""Notices a store that stops answering while work waits on it (a pass, the versions' pruning, a
restore), by asking it in a thread of its own, so that the status says so without ever waiting.

A pass blocked in a system call on a stalled FUSE mount cannot report anything, and a slow
upload of a large file looks the same from its progress alone; a small question to the store
(is its folder there?) tells them apart: a slow drive answers it, a stalled one does not.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

# A question unanswered for this long: the store is taken to be stalled.
STALLED_AFTER = 3.0
# While work waits on the store, a question at most this often, one after the other: a store
# that stalls is named at most ASK_EVERY + STALLED_AFTER after, whoever reads the status when.
ASK_EVERY = 0.5


class StallWatch:
    """Asks `probe` (a cheap call to the store) in a daemon thread while `busy()` says work waits
    on the store, and says how long an unanswered question has been waiting."""

    def __init__(
        self,
        probe: Callable[[], object],
        busy: Callable[[], bool] = lambda: False,
        stalled_after: float = STALLED_AFTER,
        ask_every: float = ASK_EVERY,
    ) -> None:
        self._probe = probe
        self._busy = busy
        self.stalled_after = stalled_after
        self.ask_every = ask_every
        self._lock = threading.Lock()
        self._asking = False  # the asking thread runs
        self._asked: float | None = None  # monotonic: when the question in flight was asked

    def watch(self) -> None:
        """Work that waits on the store begins: ask now, and on while `busy()`. Never blocks."""
        with self._lock:
            if self._asking:
                return
            self._asking = True
        threading.Thread(target=self._ask, name="gpuws-store-probe", daemon=True).start()

    def stalled_for(self, passing: bool) -> float | None:
        """Seconds the store has left a question unanswered, when over STALLED_AFTER; else None.
        With `passing` (work waits on the store), questions are asked if they were not yet.
        Never blocks."""
        if passing:
            self.watch()
        with self._lock:
            asked = self._asked
        now = time.monotonic()
        if asked is not None and now - asked >= self.stalled_after:
            return now - asked
        return None

    def _ask(self) -> None:
        while True:
            asked = time.monotonic()
            with self._lock:
                self._asked = asked
            try:
                self._probe()
            except Exception:  # noqa: BLE001, S110 - an answer, even an error: not stalled (the pass says why)
                pass
            with self._lock:
                self._asked = None
            time.sleep(max(0.0, asked + self.ask_every - time.monotonic()))
            with self._lock:
                if not self._busy():
                    self._asking = False  # the next work's watch() asks again
                    return
