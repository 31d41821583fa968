"""Injected time: the SDK's retry and deadline logic reads the clock through a Clock, so it
is testable without sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """What the SDK reads time from: a monotonic clock for deadlines and backoff, and the
    wall clock for request timestamps. Tests pass a fake one."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back; only differences mean anything."""
        ...

    def wall(self) -> float:
        """Seconds since the epoch (request timestamps)."""
        ...


class SystemClock:
    """The process's clocks: the Clock a client uses unless given another."""

    def monotonic(self) -> float:
        """time.monotonic(): seconds that never go back."""
        return time.monotonic()

    def wall(self) -> float:
        """time.time(): seconds since the epoch; a front end refuses a request whose
        timestamp is more than 5 minutes from its own clock."""
        return time.time()
