"""Injected time: the SDK's retry and deadline logic reads the clock through a Clock, so it
is testable without sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back; only differences mean anything."""
        ...

    def wall(self) -> float:
        """Seconds since the epoch (request timestamps)."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()
