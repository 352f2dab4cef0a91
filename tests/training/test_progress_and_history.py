"""The pace, the ETA's verdict against the deadline, and the bounded curves (pure arithmetic)."""

from __future__ import annotations

import math

import pytest

from jupyter_gpu_ws.training.history import History, HistoryError
from jupyter_gpu_ws.training.progress import DeadlineView, RateMeter, duration, forecast

NOW = 1_000_000.0


def deadline(in_seconds: float, lead: float = 600.0) -> DeadlineView:
    return DeadlineView(NOW + in_seconds, "max_runtime", NOW + in_seconds - lead, lead)


def test_the_pace_is_measured_over_the_last_minute_and_anew_after_a_resume() -> None:
    meter = RateMeter(window=60)
    for k in range(0, 200):
        meter.add(NOW + k, k * 10)  # 10 steps a second for 200 s …
    for k in range(200, 230):
        meter.add(NOW + k, 2000 + (k - 200) * 2)  # … then 2 a second for 30 s
    assert meter.rate == pytest.approx((2058 - 1690) / 60, rel=1e-6)  # only the last minute counts
    meter.add(NOW + 231, 100)  # resumed from an earlier step
    assert meter.rate is None


def test_a_run_with_time_to_spare_finishes_with_its_margin() -> None:
    v = forecast(step=999, total=5000, rate=10.0, now=NOW, deadline=deadline(3 * 3600))
    assert v["state"] == "finishes" and v["eta"] == pytest.approx(400.0)
    assert v["margin"] == pytest.approx(3 * 3600 - 400)
    assert v["message"].startswith("Finishes 2 h 53 min before the runtime ends")


def test_a_run_that_finishes_inside_the_persist_lead_is_tight() -> None:
    assert forecast(999, 5000, 10.0, NOW, deadline(700, lead=600))["state"] == "tight"


def test_a_run_past_the_deadline_says_by_how_much_and_the_step_the_persist_will_hold() -> None:
    v = forecast(step=999, total=50_000, rate=10.0, now=NOW, deadline=deadline(3600, lead=600))
    assert v["state"] == "short"
    assert v["short_by"] == pytest.approx(4900 - 3600)
    assert v["steps_by_deadline"] == 1000 + 36000
    assert v["persist_step"] == 999 + 30000  # 3,000 s of steps until the automatic persist
    assert "22 min short" in v["message"] and "about step 30,999" in v["message"]


def test_after_the_automatic_persist_its_checkpoint_is_what_it_holds() -> None:
    v = forecast(
        step=999,
        total=50_000,
        rate=10.0,
        now=NOW,
        deadline=deadline(300, lead=600),
        checkpoint_step=990,
    )
    assert v["state"] == "short" and v["persist_step"] == 990


@pytest.mark.parametrize(
    ("step", "total", "rate", "dl", "state"),
    [
        (10, None, 5.0, 3600, "no-total"),
        (4999, 5000, 5.0, 3600, "done"),
        (10, 5000, None, 3600, "unknown"),
        (10, 5000, 5.0, None, "no-deadline"),
    ],
)
def test_what_cannot_be_judged_says_why(
    step: int, total: int | None, rate: float | None, dl: float | None, state: str
) -> None:
    v = forecast(step, total, rate, NOW, None if dl is None else deadline(dl))
    assert v["state"] == state and v["message"]


def test_durations_read_as_people_say_them() -> None:
    assert [duration(s) for s in (40, 600, 7800)] == ["40 s", "10 min", "2 h 10 min"]


def test_a_long_series_halves_itself_and_keeps_its_shape() -> None:
    history = History(max_points=100)
    for i in range(10_000):
        history.add("loss", i, NOW + i, 1000.0 / (i + 1))
    points = history.points("loss")
    assert 50 <= len(points) <= 101
    assert points[0][0] < 200 and points[-1][0] == 9_999
    gaps = [
        b[0] - a[0] for a, b in zip(points, points[1:-1], strict=False)
    ]  # the last one is still filling
    assert max(gaps) <= 2 * min(gaps)  # evenly spread: old steps are not squeezed into a few points
    assert all(
        a[2] >= b[2] for a, b in zip(points, points[1:], strict=False)
    )  # still falling everywhere


def test_a_sparkline_overview_spans_the_whole_run_not_its_last_points() -> None:
    history = History()
    for i in range(200):
        history.add("loss", i, NOW + i, 1.0 / (i + 1))
    overview = history.overview("loss", 60)
    steps = [p[0] for p in overview]
    assert len(overview) == 60 and steps[0] == 0 and steps[-1] == 199
    assert steps == sorted(set(steps))  # every point once, in order
    assert (
        max(b - a for a, b in zip(steps, steps[1:], strict=False)) <= 4
    )  # evenly spread, not a tail
    assert history.overview("loss", 500) == history.points("loss")  # short enough: all of it


def test_a_resume_forgets_the_points_after_its_step() -> None:
    history = History()
    for i in range(20):
        history.add("loss", i, NOW + i, float(i))
        history.add("lr", i, NOW + i, 0.1)
    history.truncate_after(9)
    assert [p[0] for p in history.points("loss")] == list(range(10)) and history.last_step() == 9


def test_a_non_finite_value_is_a_gap_in_the_curve() -> None:
    history = History()
    history.add("loss", 1, NOW, math.nan)
    assert history.points("loss") == [[1, NOW, None]]


@pytest.mark.parametrize(
    "bad",
    [
        None,
        [],
        {"format": 2, "series": {}},
        {"format": 1, "series": {"loss": [[1, 2]]}},
        {"format": 1, "series": {"loss": [["1", 2.0, 3.0]]}},
        {"format": 1, "series": {"loss": [[1, float("nan"), 3.0]]}},
        {"format": 1, "series": {"\x00": []}},
        {"format": 1, "series": {"loss": [[True, 2.0, 3.0]]}},
    ],
)
def test_a_history_from_the_store_is_checked_point_by_point(bad: object) -> None:
    with pytest.raises(HistoryError):
        History.from_dict(bad)


def test_a_history_round_trips_through_json() -> None:
    history = History()
    history.add("val/acc", 5, NOW, 0.5)
    assert History.from_dict(history.to_dict()).points("val/acc") == [[5, NOW, 0.5]]
