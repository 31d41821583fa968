"""A partition's load as the PM sees it (§4 heartbeats): operations and bytes per second and
latency percentiles over the last heartbeat interval. Bounded: a fixed reservoir of samples."""

from __future__ import annotations

import random
import time

LATENCY_SAMPLES_MAX = 2048


class LoadStats:
    def __init__(self) -> None:
        self._random = random.Random(0)
        self._reset()

    def _reset(self) -> None:
        self._started = time.monotonic()
        self._ops = 0
        self._bytes = 0
        self._latencies: list[float] = []
        self._seen = 0

    def record(self, nbytes: int, seconds: float) -> None:
        self._ops += 1
        self._bytes += nbytes
        self._seen += 1
        # Reservoir sampling keeps percentiles honest at any rate in bounded memory.
        if len(self._latencies) < LATENCY_SAMPLES_MAX:
            self._latencies.append(seconds)
        else:
            slot = self._random.randrange(self._seen)
            if slot < LATENCY_SAMPLES_MAX:
                self._latencies[slot] = seconds

    def take(self) -> dict[str, float]:
        """The window's rates and percentiles; starts the next window."""
        now = time.monotonic()
        elapsed = max(now - self._started, 1e-6)
        ordered = sorted(self._latencies)

        def pct(p: float) -> float:
            return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000 if ordered else 0.0
        window = {"ops_per_s": self._ops / elapsed, "bytes_per_s": self._bytes / elapsed,
                  "p50_ms": pct(0.50), "p99_ms": pct(0.99)}
        self._reset()
        return window
