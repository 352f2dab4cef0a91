"""Where the suite's time goes: each test's wall time and the machine's CPU time meanwhile,
per phase (setup, call, teardown), written as JSON lines when GPUWS_TEST_TIMINGS names a file.

The CPU time is the whole machine's (every process: the test's servers, kernels and store
servers included), read from /proc/stat through psutil. In a run of one process at a time on a
quiet machine it is the test's own work; wall time beyond it is waiting. scripts/test_timings.py
turns the file into docs/testing.md's tables.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psutil
import pytest

TIMINGS = os.environ.get("GPUWS_TEST_TIMINGS")


def _busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since it started."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def _record(item: pytest.Item, phase: str, start: float, wall: float, cpu: float) -> None:
    assert TIMINGS
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    line = {
        "test": item.nodeid,
        "phase": phase,
        "start": start,
        "wall": wall,
        "cpu": cpu,
        "worker": worker,
    }
    with open(TIMINGS, "a") as out:  # one short write a line: workers' lines stay whole
        out.write(json.dumps(line) + "\n")


@contextmanager
def _timed(item: pytest.Item, phase: str) -> Iterator[None]:
    if not TIMINGS:
        yield
        return
    start, wall, cpu = time.time(), time.monotonic(), _busy_seconds()
    try:
        yield
    finally:
        _record(item, phase, start, time.monotonic() - wall, _busy_seconds() - cpu)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[Any]:
    with _timed(item, "setup"):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[Any]:
    with _timed(item, "call"):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[Any]:
    with _timed(item, "teardown"):
        return (yield)
