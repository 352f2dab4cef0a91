"""Waiting for an event in a test: the one helper every test uses instead of a fixed sleep.

`until(check, timeout, what)` asks `check` again and again (every `interval` seconds) until it
gives a true value, and returns that value; `async_until` does the same on the event loop, for a
`check` that may be a coroutine function. Past `timeout` seconds the test fails with `what`,
the time waited, the last value `check` gave and the last error it raised, so a failure says
what was awaited and what was seen instead.

An error of a type in `ignore` (by default OSError: a server still starting, a file being
replaced) counts as "not yet"; any other error fails the test at once.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

INTERVAL = 0.05


class NotReached(AssertionError):
    """What a test waited for did not happen within its time."""


def _failure(what: str, timeout: float, last: Any, error: BaseException | None) -> NotReached:
    seen = f"; the last error: {error!r}" if error is not None else f"; the last value: {last!r}"
    return NotReached(f"{what}: not reached within {timeout:g} s{seen}"[:4000])


def until(
    check: Callable[[], T],
    timeout: float = 30.0,
    what: str = "the condition",
    interval: float = INTERVAL,
    ignore: tuple[type[BaseException], ...] = (OSError,),
) -> T:
    """The first true value of `check()` within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    error: BaseException | None = None
    while True:
        try:
            last, error = check(), None
        except ignore as err:
            last, error = None, err
        if last:
            return last
        if time.monotonic() >= deadline:
            raise _failure(what, timeout, last, error)
        time.sleep(interval)


async def async_until(
    check: Callable[[], T | Awaitable[T]],
    timeout: float = 30.0,
    what: str = "the condition",
    interval: float = INTERVAL,
    ignore: tuple[type[BaseException], ...] = (OSError,),
) -> T:
    """The first true value of `check()` (awaited if it is a coroutine) within `timeout` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    error: BaseException | None = None
    while True:
        try:
            value = check()
            last, error = (await value) if inspect.isawaitable(value) else value, None
        except ignore as err:
            last, error = None, err
        if last:
            return last
        if loop.time() >= deadline:
            raise _failure(what, timeout, last, error)
        await asyncio.sleep(interval)


def elapsed_until(
    check: Callable[[], Any], timeout: float = 30.0, what: str = "the condition"
) -> float:
    """The seconds it took until `check()` first gave a true value."""
    started = time.monotonic()
    until(check, timeout, what)
    return time.monotonic() - started
