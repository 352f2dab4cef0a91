"""A run's pace and whether it finishes before the runtime ends: steps/s, ETA and the verdict."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

# The pace is measured over the progress records of this many seconds: long enough to smooth
# out one slow batch or a checkpoint, short enough to follow a change of pace within a minute.
RATE_WINDOW = 60.0


class RateMeter:
    """Steps per second over the last `window` seconds of (time, step) reports."""

    def __init__(self, window: float = RATE_WINDOW) -> None:
        self.window = window
        self._points: deque[tuple[float, int]] = deque()

    def add(self, time: float, step: int) -> None:
        if self._points and (step < self._points[-1][1] or time < self._points[-1][0]):
            self._points.clear()  # a resume or a re-run: the pace is measured anew
        self._points.append((time, step))
        while len(self._points) > 2 and self._points[1][0] <= time - self.window:
            self._points.popleft()

    def reset(self) -> None:
        self._points.clear()

    @property
    def rate(self) -> float | None:
        if len(self._points) < 2:
            return None
        (t0, s0), (t1, s1) = self._points[0], self._points[-1]
        if t1 - t0 <= 0 or s1 <= s0:
            return None
        return (s1 - s0) / (t1 - t0)


@dataclass(frozen=True)
class DeadlineView:
    """What the runtime's clock says about its end (runtime/deadline.py), as plain values."""

    at: float
    source: str
    next_persist: float | None
    persist_lead_time: float


def forecast(
    step: int,
    total: int | None,
    rate: float | None,
    now: float,
    deadline: DeadlineView | None,
    checkpoint_step: int | None = None,
) -> dict[str, Any]:
    """ETA to `total` and the verdict against the deadline.

    `step` is the loop index of the last step (`step + 1` steps are done). The verdict is
    `finishes` (with at least the persist lead time to spare), `tight` (before the deadline,
    but inside the automatic persist's lead), `short` (not before the deadline: by how much,
    and the step the automatic persist will hold), or `done`, `unknown` (no pace yet),
    `no-total`, `no-deadline`.
    """
    done = step + 1
    out: dict[str, Any] = {
        "state": "unknown",
        "eta": None,
        "finish_at": None,
        "deadline": None,
        "source": None,
        "margin": None,
        "short_by": None,
        "steps_by_deadline": None,
        "persist_at": None,
        "persist_step": None,
        "message": "",
    }
    if deadline is not None:
        out.update(deadline=deadline.at, source=deadline.source, persist_at=deadline.next_persist)
    if total is None:
        out.update(
            state="no-total",
            message="No total number of steps: gpuws.progress(total=N) or "
            "gpuws.track(..., total_steps=N) gives an ETA",
        )
        return out
    if done >= total:
        out.update(state="done", eta=0.0, message=f"All {total:,} steps done")
        return out
    if not rate or not math.isfinite(rate):
        out.update(message="Measuring the pace…")
        return out
    eta = (total - done) / rate
    finish_at = now + eta
    out.update(eta=eta, finish_at=finish_at)
    if deadline is None:
        out.update(
            state="no-deadline", message=f"ETA {duration(eta)}; this runtime has no deadline"
        )
        return out
    margin = deadline.at - finish_at
    out.update(
        margin=margin, steps_by_deadline=min(total, int(done + rate * max(0.0, deadline.at - now)))
    )
    persist_at = deadline.next_persist
    if persist_at is not None and persist_at > now:
        out["persist_step"] = min(total - 1, int(step + rate * (persist_at - now)))
    elif checkpoint_step is not None:
        out["persist_step"] = checkpoint_step  # the automatic persist has run: its checkpoint
    lead = deadline.persist_lead_time
    if margin >= lead:
        out.update(
            state="finishes",
            message=f"Finishes {duration(margin)} before the runtime ends ({deadline.source})",
        )
    elif margin >= 0:
        out.update(
            state="tight",
            message=f"Finishes only {duration(margin)} before the runtime ends "
            f"({deadline.source}), after the automatic persist has started",
        )
    else:
        held = out["persist_step"]
        held_text = (
            f" The automatic persist will hold about step {held:,};" if held is not None else ""
        )
        out.update(
            state="short",
            short_by=-margin,
            message=f"Does not finish before the runtime ends ({deadline.source}): {duration(-margin)} "
            f"short, at about step {out['steps_by_deadline']:,} of {total:,}.{held_text} "
            "resume with gpuws.resume() on the next runtime.",
        )
    return out


def duration(seconds: float) -> str:
    """'2 h 10 min', '12 min', '40 s'."""
    s = max(0, round(seconds))
    if s < 90:
        return f"{s} s"
    h, m = divmod(round(s / 60), 60)
    return f"{h} h {m} min" if h else f"{m} min"
