"""When to hold a short commit-log block back for a moment (committer.py).

Closed-loop writers (each waits for its append before sending the next) split into groups
that take turns: a block of half of them is in flight while the other half queues for the
next block. The groups never merge by themselves, so a partition with 16 appenders makes
twice as many blocks of 8 as it needs, and each block costs a replicated append and an
fsync on three extent nodes: on a CPU-bound stamp, two partitions then did half the records
per second of one (issue 17's `stamp bench balance`).

`Linger` remembers the most operations the partition had outstanding (queued, being
decided, in flight) lately. With the pipeline empty, a block shorter than most of that
waits up to `linger_s` for the writers just answered to come back, so the groups merge into
one block. A lone writer, or a queue already that long, is never held; nor is a block that
is full anyway (the committer asks only below its operation limit).

Contract: `wait_s` is 0 or the seconds left of the one wait a block may have (counted from
the first time it was asked since the last `sent`); the peak is forgotten `window_s` after
it was last reached, so writers that left stop costing waits within a window.
"""

from __future__ import annotations

import math

# A block waits while it has fewer than this share of the recent peak.
PEAK_SHARE = 0.75


class Linger:
    def __init__(self, linger_s: float, window_s: float) -> None:
        self.linger_s = linger_s
        self.window_s = window_s
        self._peak = 0
        self._peak_at = -math.inf
        self._since: float | None = None

    def observe(self, outstanding: int, now: float) -> None:
        """Operations outstanding now (called as one is queued)."""
        if outstanding >= self._peak or now - self._peak_at > self.window_s:
            self._peak, self._peak_at = outstanding, now

    def wait_s(self, queued: int, cap: int, now: float) -> float:
        """How much longer a block of `queued` operations (at most `cap` fit one) waits."""
        if self.linger_s <= 0 or now - self._peak_at > self.window_s:
            return 0.0
        if queued >= min(math.ceil(self._peak * PEAK_SHARE), cap):
            return 0.0
        if self._since is None:
            self._since = now
        return max(0.0, self._since + self.linger_s - now)

    def sent(self) -> None:
        """A block went out: the next one gets a wait of its own."""
        self._since = None
