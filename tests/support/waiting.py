"""Waiting on a condition with a deadline, instead of sleeping and hoping (STYLE.md, Tests).

`wait_for` (async) and `wait_until` (sync) are the only two: both call `check` every
`poll_s` until it returns something truthy and return that value, so a wait can hand over
what it found (a leader's name, a new owner). A `StampError` from `check` counts as "not
yet": while a process restarts or a leader changes, the services answer Unavailable, and a
wait is for the moment they answer again. Past `timeout_s` the wait fails with an
AssertionError naming `what` it waited for (and the last error `check` raised, if any)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from common.errors import StampError

T = TypeVar("T")

POLL_S = 0.05


def _timed_out(timeout_s: float, what: str, error: StampError | None) -> AssertionError:
    last = f" (last error: {error!r})" if error is not None else ""
    return AssertionError(f"timed out after {timeout_s:g}s waiting for {what}{last}")


async def wait_for(check: Callable[[], Awaitable[T | None]], timeout_s: float, what: str,
                   *, poll_s: float = POLL_S) -> T:
    deadline = time.monotonic() + timeout_s
    error: StampError | None = None
    while True:
        try:
            result = await check()
            if result:
                return result
        except StampError as exc:
            error = exc
        if time.monotonic() > deadline:
            raise _timed_out(timeout_s, what, error)
        await asyncio.sleep(poll_s)


def wait_until(check: Callable[[], T | None], timeout_s: float, what: str,
               *, poll_s: float = POLL_S) -> T:
    deadline = time.monotonic() + timeout_s
    error: StampError | None = None
    while True:
        try:
            result = check()
            if result:
                return result
        except StampError as exc:
            error = exc
        if time.monotonic() > deadline:
            raise _timed_out(timeout_s, what, error)
        time.sleep(poll_s)
