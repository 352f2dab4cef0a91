"""How many parts of large files a restore fetches at once: more while the measured throughput keeps
growing by a meaningful margin, held once it stops (pure logic, fed byte counts and a clock).

Object stores cap each connection (S3 serves roughly 100 MB/s per connection; AWS's guidance is
many connections at once), so a fixed number of parts in flight either leaves the link idle or
opens connections that buy nothing. Like TCP's slow start, the number doubles from where it
starts. Each level is measured over `patience` windows, each at least `window` seconds long and
two chunks per part in flight, during which parts were waiting for a slot (a window where none
was, as at the end of a file, says nothing about the level and is thrown away); its throughput
is the best of them (one noisy window neither makes nor breaks a level). A level that brings at
least `gain` more throughput than the one below leads to the next; one that does not sends it
back to the level below, which gave as much with fewer connections, and there it stays for the
rest of the restore.
"""

from __future__ import annotations

# A step up counts as growth only if it brings at least this much more throughput (noise on a
# busy machine is a few per cent; a level that buys less is not worth its connections).
GAIN = 0.10
# Each level is measured over at least this long: several chunks of every part in flight.
WINDOW = 0.5
# Windows measured at each level before it is judged.
PATIENCE = 2


class PartsInFlight:
    """The number of parts to have in flight (`limit`), judged from the bytes received over time."""

    def __init__(
        self,
        start: int,
        most: int,
        *,
        gain: float = GAIN,
        window: float = WINDOW,
        patience: int = PATIENCE,
    ) -> None:
        self.most = max(1, most)
        self.limit = max(1, min(start, self.most))
        self.gain = gain
        self.window = window
        self.patience = max(1, patience)
        self.settled = self.limit >= self.most  # nothing to try above: a fixed number
        self.history: list[
            tuple[int, float]
        ] = []  # (level, bytes per second) of each window judged
        self._below: tuple[int, float] | None = None  # the level below and its best throughput
        self._best_here = 0.0
        self._windows = 0  # judged at the current level
        self._started: float | None = None  # the current window's start (None: none open)
        self._bytes = 0
        self._chunks = 0  # add() calls in the current window

    def add(self, nbytes: int, now: float, saturated: bool = True) -> int:
        """`nbytes` more received at `now` (seconds, any monotonic clock); `saturated`: parts were
        waiting for a slot, so the level alone set the pace. Returns the limit from now on."""
        if self.settled:
            return self.limit
        if not saturated:
            self._started = None
            return self.limit
        if self._started is None:
            # The bytes of this call arrived over an unknown time before it: the window opens here.
            self._started, self._bytes, self._chunks = now, 0, 0
            return self.limit
        self._bytes += nbytes
        self._chunks += 1
        elapsed = now - self._started
        # Long enough, and every part in flight has brought about two chunks in it (a new part's
        # first bytes come a round trip and a chunk after it starts; parts arrive in step).
        if elapsed >= self.window and self._chunks >= 2 * self.limit:
            rate = self._bytes / max(elapsed, 1e-9)
            self._started, self._bytes, self._chunks = now, 0, 0
            self._judge(rate)
        return self.limit

    def _judge(self, rate: float) -> None:
        self.history.append((self.limit, rate))
        self._best_here = max(self._best_here, rate)
        self._windows += 1
        if self._windows < self.patience:
            return
        if self._below is not None and self._best_here < self._below[1] * (1 + self.gain):
            self.limit = self._below[0]  # a plateau: the level below gave as much
            self.settled = True
        elif self.limit >= self.most:
            self.settled = True  # still growing at the bound: held there
        else:
            self._below = (self.limit, self._best_here)
            self.limit = min(self.most, self.limit * 2)
            self._best_here, self._windows = 0.0, 0
            self._started = None  # the new parts' first round trips are no measure of the level
