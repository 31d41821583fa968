"""The SDK's retry decisions (issue 16, DESIGN §5): which errors are retried, after how long,
and which front end the next attempt goes to. Pure: time and randomness are injected, so
the policy is tested without sleeping (tests/unit/test_sdk_retry.py).

Contracts:
- `RetryPolicy.delay` (common/retry.py, every client's retry policy; the SDK's bounds are
  its defaults) says whether an error is retried and after how long: exponential backoff
  with jitter, never less than a Throttled error's retry-after.
- How long one attempt waits before the next one (on another front end: a silent front
  end counts as failed) is common/retry.py's AttemptTimer, shared with the partition client.
- `Endpoints.pick` returns an endpoint no failure is held against, in a fixed rotation from a
  random first one (clients spread over the front ends); a front end that failed
  (`failed`) is avoided for `avoid_s`; when every endpoint is avoided, the one whose
  avoidance ends first is tried anyway (a call never waits for lack of a front end).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from common.clock import Clock
from common.errors import DeadlineExceeded, NotOwner, StampError, Unavailable
from common.retry import RetryPolicy, retryable

__all__ = ["Endpoints", "RetryPolicy", "endpoint_failed", "retryable"]

# A front end that failed a call is not asked again for this long while others remain.
ENDPOINT_AVOID_S = 5.0


def endpoint_failed(error: StampError) -> bool:
    """Whether `error` says the front end itself is in trouble (try another one), rather than
    something behind it (a partition moving: NotOwner) or the account (Throttled)."""
    if isinstance(error, NotOwner):
        return False
    return isinstance(error, (Unavailable, DeadlineExceeded))


class Endpoints:
    """Which front end to ask next (module contract)."""

    def __init__(self, endpoints: Sequence[str], clock: Clock, rng: random.Random,
                 avoid_s: float = ENDPOINT_AVOID_S) -> None:
        if not endpoints:
            raise ValueError("at least one endpoint")
        self._endpoints = list(endpoints)
        self._clock = clock
        self._avoid_s = avoid_s
        self._first = rng.randrange(len(self._endpoints))
        self._avoid_until: dict[str, float] = {}

    @property
    def all(self) -> list[str]:
        return list(self._endpoints)

    def pick(self) -> str:
        if not self._avoid_until:  # none failed lately: the first of the rotation
            return self._endpoints[self._first]
        now = self._clock.monotonic()
        n = len(self._endpoints)
        rotation = [self._endpoints[(self._first + i) % n] for i in range(n)]
        for endpoint in rotation:
            if self._avoid_until.get(endpoint, 0.0) <= now:
                return endpoint
        return min(rotation, key=lambda e: self._avoid_until[e])

    def failed(self, endpoint: str) -> None:
        """`endpoint` failed a call: avoid it for a while; the rotation moves past it."""
        self._avoid_until[endpoint] = self._clock.monotonic() + self._avoid_s
        if self._endpoints[self._first] == endpoint:
            self._first = (self._first + 1) % len(self._endpoints)

    def answered(self, endpoint: str) -> None:
        """`endpoint` answered: nothing is held against it any more."""
        self._avoid_until.pop(endpoint, None)

