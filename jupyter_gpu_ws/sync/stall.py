"""Notices a store that stops answering while a pass waits on it (a mounted drive whose calls
hang), by asking it in a thread of its own, so that the status says so without ever waiting.

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
# At most one question per this long while a pass runs.
ASK_EVERY = 1.0


class StallWatch:
    """Asks `probe` (a cheap call to the store) in a daemon thread when told a pass is running,
    and says how long an unanswered question has been waiting."""

    def __init__(
        self,
        probe: Callable[[], object],
        stalled_after: float = STALLED_AFTER,
        ask_every: float = ASK_EVERY,
    ) -> None:
        self._probe = probe
        self.stalled_after = stalled_after
        self.ask_every = ask_every
        self._lock = threading.Lock()
        self._asked: float | None = None  # monotonic: when the question in flight was asked
        self._answered = 0.0  # monotonic: when the last question was answered

    def stalled_for(self, passing: bool) -> float | None:
        """Seconds the store has left a question unanswered, when over STALLED_AFTER; else None.
        With `passing` (a pass is running), a new question is asked if none is in flight and
        the last answer is older than ASK_EVERY. Never blocks."""
        now = time.monotonic()
        with self._lock:
            asked = self._asked
            if asked is None and passing and now - self._answered >= self.ask_every:
                self._asked = now
                threading.Thread(target=self._ask, name="gpuws-store-probe", daemon=True).start()
        if asked is not None and now - asked >= self.stalled_after:
            return now - asked
        return None

    def _ask(self) -> None:
        try:
            self._probe()
        except Exception:  # noqa: BLE001, S110 - an answer, even an error: not stalled (the pass says why)
            pass
        with self._lock:
            self._asked = None
            self._answered = time.monotonic()
