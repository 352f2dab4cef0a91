"""A run's curves: one bounded series of (step, time, value) points per scalar.

A series that grows past its bound halves itself by averaging neighbouring points, and from
then on averages as many new values into each point as each old point holds (its stride), so
a run of a million steps keeps its whole shape, evenly, in a few thousand points. The same class lives in the
kernel (written into each checkpoint as `metrics.json`) and on the server (the dashboard's
curves): a run resumed on a new machine starts from the curve its checkpoint holds.
"""

from __future__ import annotations

import math
import re
from typing import Any

# Points kept per series before it halves itself.
MAX_POINTS = 2000
# Series kept per run: a loop that logs a new name every step must not grow without end.
MAX_SERIES = 64
# A scalar's name: what people log ("loss", "val/acc", "lr-AdamW"), nothing longer.
_NAME = re.compile(r"[^\x00-\x1f]{1,100}")
FORMAT = 1

Point = list  # [step: int, time: float, value: float | None]


class HistoryError(ValueError):
    """A history read from a file or a stream is not one this module wrote."""


def valid_name(name: object) -> bool:
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


class History:
    """The curves of one run. Not thread-safe: its owner holds a lock around it."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        if max_points < 4:
            raise ValueError("a history keeps at least 4 points per series")
        self.max_points = max_points
        self.series: dict[str, list[Point]] = {}  # the finished points of each series
        self._stride: dict[str, int] = {}  # values per point
        self._pending: dict[
            str, list[Any]
        ] = {}  # the point being filled: [values seen, sum, finite, step, time]

    def add(self, name: str, step: int, time: float, value: float | None) -> None:
        """Append a point (None or a non-finite value is a gap in the curve)."""
        points = self.series.get(name)
        if points is None:
            if len(self.series) >= MAX_SERIES or not valid_name(name):
                return
            points = self.series[name] = []
        if value is not None and not math.isfinite(value):
            value = None
        pending = self._pending.setdefault(name, [0, 0.0, 0, 0, 0.0])
        pending[0] += 1
        if value is not None:
            pending[1] += value
            pending[2] += 1
        pending[3], pending[4] = int(step), float(time)
        if pending[0] < self._stride.get(name, 1):
            return
        del self._pending[name]
        points.append(_point(pending))
        if len(points) > self.max_points:
            self.series[name] = _halve(points)
            self._stride[name] = self._stride.get(name, 1) * 2

    def points(self, name: str) -> list[Point]:
        """A series' points, the one still being filled last."""
        points = [list(p) for p in self.series.get(name, [])]
        if name in self._pending:
            points.append(_point(self._pending[name]))
        return points

    def truncate_after(self, step: int) -> None:
        """Forget the points after `step`: a run resumed from there does them again."""
        for name, points in list(self.series.items()):
            if name in self._pending and self._pending[name][3] > step:
                del self._pending[name]
            kept = [p for p in points if p[0] <= step]
            if kept or name in self._pending:
                self.series[name] = kept
            else:
                del self.series[name]
                self._stride.pop(name, None)

    def last_step(self) -> int | None:
        steps = [points[-1][0] for points in (self.points(name) for name in self.series) if points]
        return max(steps) if steps else None

    def overview(self, name: str, count: int) -> list[Point]:
        """The whole series in at most `count` points spread evenly over it, its first and last
        among them: a sparkline of a finished run shows the run, not only its end."""
        points = self.points(name)
        if len(points) <= count:
            return points
        last = len(points) - 1
        return [points[round(k * last / (count - 1))] for k in range(count)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "series": {name: self.points(name) for name in self.series},
            "strides": {name: stride for name, stride in self._stride.items() if stride > 1},
        }

    @classmethod
    def from_dict(cls, data: Any, max_points: int = MAX_POINTS) -> History:
        """A history from JSON that may come from the store (so from anyone): every point is
        checked, and anything else is a HistoryError. Nothing in it is ever run."""
        if (
            not isinstance(data, dict)
            or data.get("format") != FORMAT
            or not isinstance(data.get("series"), dict)
        ):
            raise HistoryError("not a history (format 1 with series)")
        history = cls(max_points)
        for name, points in list(data["series"].items())[:MAX_SERIES]:
            if not valid_name(name) or not isinstance(points, list):
                raise HistoryError(f"series {str(name)[:40]!r} is malformed")
            clean: list[Point] = []
            for point in points:
                if not (
                    isinstance(point, list)
                    and len(point) == 3
                    and _int(point[0])
                    and _number(point[1])
                    and (point[2] is None or _number(point[2]))
                ):
                    raise HistoryError(f"series {name!r} holds a malformed point")
                clean.append(
                    [int(point[0]), float(point[1]), None if point[2] is None else float(point[2])]
                )
            stride = (
                (data.get("strides") or {}).get(name, 1)
                if isinstance(data.get("strides"), dict)
                else 1
            )
            stride = stride if _int(stride) and 1 <= stride <= 2**40 else 1
            while len(clean) > max_points:
                clean = _halve(clean)
                stride *= 2
            if clean:
                history.series[name] = clean
                history._stride[name] = stride
        return history


def _point(pending: list[Any]) -> Point:
    return [pending[3], pending[4], pending[1] / pending[2] if pending[2] else None]


def _halve(points: list[Point]) -> list[Point]:
    """Each pair of neighbours becomes one point: the later step and time, the mean value
    (a gap only where both were gaps). An odd last point stays as it is."""
    out: list[Point] = []
    for k in range(0, len(points) - 1, 2):
        a, b = points[k], points[k + 1]
        values = [v for v in (a[2], b[2]) if v is not None]
        out.append([b[0], b[1], sum(values) / len(values) if values else None])
    if len(points) % 2:
        out.append(points[-1])
    return out


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**62


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
