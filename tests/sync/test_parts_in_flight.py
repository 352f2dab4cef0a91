"""The number of parts a restore keeps in flight, fed synthetic throughput curves on a simulated
clock: where it settles when throughput grows until a cap, is flat from the start, or is noisy."""

from __future__ import annotations

import random
from collections.abc import Callable

from jupyter_gpu_ws.sync.parts_in_flight import PartsInFlight

MB = 1_000_000
TICK = 0.05  # simulated seconds between two chunks received


def run(
    controller: PartsInFlight,
    rate: Callable[[int], float],
    seconds: float = 120.0,
    saturated: Callable[[float], bool] = lambda t: True,
) -> list[int]:
    """Feed the controller what `rate(limit)` (bytes per second) delivers, tick by tick; the
    limits it chose, one per tick."""
    limits, now = [], 0.0
    while now < seconds:
        now += TICK
        limits.append(controller.add(int(rate(controller.limit) * TICK), now, saturated(now)))
    return limits


def capped(per_part: float, cap: float) -> Callable[[int], float]:
    """Each part at `per_part` bytes/s until the link's `cap`: S3's per-connection cap on a NIC."""
    return lambda limit: min(limit * per_part, cap)


def test_throughput_that_grows_until_a_cap_settles_on_the_first_level_at_the_cap() -> None:
    controller = PartsInFlight(start=8, most=64)
    run(controller, capped(100 * MB, 2_000 * MB))  # the link is full from 20 parts
    assert controller.settled
    assert controller.limit == 32  # 8 → 16 → 32 grew; 64 bought nothing and was given back
    assert sorted({level for level, _ in controller.history}) == [8, 16, 32, 64]


def test_throughput_that_keeps_growing_stops_at_the_bound() -> None:
    controller = PartsInFlight(start=4, most=32)
    run(controller, capped(100 * MB, 10**12))
    assert controller.settled and controller.limit == 32


def test_flat_throughput_from_the_start_stays_where_it_started() -> None:
    controller = PartsInFlight(start=8, most=64)
    run(controller, lambda limit: 300 * MB)  # a link already full with 8 parts (or a bandwidth cap)
    assert controller.settled and controller.limit == 8
    assert (
        max(level for level, _ in controller.history) == 16
    )  # one step up was tried, and given back


def test_a_small_gain_is_not_growth() -> None:
    controller = PartsInFlight(start=8, most=64)
    run(controller, lambda limit: (300 + limit) * MB)  # 8 → 16 brings under 3 %
    assert controller.settled and controller.limit == 8


def test_noisy_throughput_settles_at_the_same_level_as_clean() -> None:
    curve = capped(100 * MB, 2_000 * MB)
    for seed in range(20):
        rng = random.Random(seed)
        controller = PartsInFlight(start=8, most=64)
        run(controller, lambda limit: curve(limit) * rng.uniform(0.8, 1.2))  # ±20 % chunk by chunk
        assert controller.settled and controller.limit == 32, f"seed {seed}: {controller.history}"


def test_noisy_flat_throughput_does_not_climb() -> None:
    for seed in range(20):
        rng = random.Random(seed)
        controller = PartsInFlight(start=8, most=64)
        run(controller, lambda limit: 500 * MB * rng.uniform(0.8, 1.2))
        assert controller.settled and controller.limit == 8, f"seed {seed}: {controller.history}"


def test_one_bad_window_is_not_a_plateau() -> None:
    per_level = {8: 800 * MB, 16: 1_600 * MB, 32: 2_000 * MB, 64: 2_000 * MB}
    controller = PartsInFlight(start=8, most=64)

    def rate(limit: int) -> float:
        # The first window at 16 parts is slow (a neighbour's burst); the second shows the growth.
        judged_here = sum(1 for level, _ in controller.history if level == limit)
        return 700 * MB if limit == 16 and judged_here == 0 else per_level[limit]

    run(controller, rate)
    assert controller.limit == 32 and controller.settled


def test_windows_where_parts_were_not_waiting_are_not_judged() -> None:
    controller = PartsInFlight(start=8, most=64)
    # The end of a file: fewer parts left than slots, throughput falling; nothing is concluded.
    run(controller, lambda limit: 100 * MB, seconds=30, saturated=lambda now: False)
    assert not controller.settled and controller.limit == 8 and controller.history == []
    # Then a large file with every slot wanted: growth is seen as before.
    run(controller, capped(100 * MB, 2_000 * MB))
    assert controller.settled and controller.limit == 32


def test_a_start_at_the_bound_is_a_fixed_number() -> None:
    controller = PartsInFlight(start=8, most=8)
    assert controller.settled
    assert set(run(controller, capped(100 * MB, 10**12), seconds=10)) == {8}
