"""The SDK's retry decisions (DESIGN §5): which errors are retried, after how long, how long
one attempt waits, and which front end the next attempt goes to. Pure: time and randomness
are injected, so the policy is tested without sleeping. (The stamp's own clients follow the
same policy, their own copy: the SDK shares no code with the server.)

Contract of `RetryPolicy.delay`: None for an error that must not be retried (anything but
Unavailable, NotOwner, Throttled, and DeadlineExceeded on an idempotent call); otherwise a
backoff growing exponentially from `backoff_min_s` to `backoff_max_s` with jitter (each
delay uniform in [half, all] of the exponential step), and never less than a Throttled
error's `retry_after_s`.

Contract of `AttemptTimer.timeout_s(attempt, nbytes)`: short at first (ATTEMPT_FIRST_S, or
ATTEMPT_P99_FACTOR times the client's recent p99 when that is longer, plus time to send the
request's bytes) and doubling with each attempt up to ATTEMPT_MAX_S: a frozen front end
costs about a second before the call goes elsewhere, and every mutation carries a token, so
a slow first attempt that still completes is applied once.

Contract of `Endpoints`: `pick` returns an endpoint no failure is held against, in a fixed
rotation from a random first one (clients spread over the front ends); a front end that
failed (`failed`) is avoided for `avoid_s`; when every endpoint is avoided, the one whose
avoidance ends first is tried anyway (a call never waits for lack of a front end).
"""

from __future__ import annotations

import collections
import random
from collections.abc import Sequence
from dataclasses import dataclass

from stampsdk.clock import Clock
from stampsdk.errors import DeadlineExceeded, NotOwner, StampError, Throttled, Unavailable

__all__ = ["AttemptTimer", "Endpoints", "RetryPolicy", "endpoint_failed", "retryable"]

BACKOFF_MIN_S = 0.02
BACKOFF_MAX_S = 1.0
# Throttled answers carry the server's retry-after; never wait longer than this for one
# (a confused server must not park a client for an hour).
RETRY_AFTER_MAX_S = 30.0

ATTEMPT_FIRST_S = 0.75
ATTEMPT_MAX_S = 10.0
ATTEMPT_P99_FACTOR = 3.0
# A request's bytes get this much time to be sent on top (4 MiB: half a second).
ATTEMPT_BYTES_PER_S = 8e6
# The p99 is of the last LATENCIES_KEPT answered attempts, worked out again every
# P99_EVERY of them (a sort of a few hundred floats per call would cost the hot path).
LATENCIES_KEPT = 256
P99_EVERY = 32


def retryable(error: StampError, idempotent: bool) -> bool:
    """Whether another attempt may succeed and cannot do harm (module contract)."""
    if isinstance(error, (Unavailable, Throttled)):  # NotOwner is an Unavailable
        return True
    return isinstance(error, DeadlineExceeded) and idempotent


@dataclass(frozen=True)
class RetryPolicy:
    """Whether and when to try again (module contract)."""

    backoff_min_s: float = BACKOFF_MIN_S
    backoff_max_s: float = BACKOFF_MAX_S
    retry_after_max_s: float = RETRY_AFTER_MAX_S

    def delay(self, error: StampError, attempt: int, idempotent: bool, rng: random.Random
              ) -> float | None:
        """Seconds to wait before attempt `attempt + 1` (attempt counts from 0) after `error`;
        None: do not retry (module contract)."""
        if not retryable(error, idempotent):
            return None
        step = min(self.backoff_max_s, self.backoff_min_s * (2 ** min(attempt, 32)))
        wait = rng.uniform(step / 2, step)
        if isinstance(error, Throttled):
            wait = max(wait, min(self.retry_after_max_s, max(0.0, error.retry_after_s)))
        return wait


class AttemptTimer:
    """How long one attempt of a call waits for its answer (module contract). Not
    thread-safe: one per client, used from its event loop."""

    def __init__(self, first_s: float = ATTEMPT_FIRST_S, max_s: float = ATTEMPT_MAX_S,
                 p99_factor: float = ATTEMPT_P99_FACTOR) -> None:
        self.first_s = first_s
        self.max_s = max_s
        self.p99_factor = p99_factor
        self._latencies: collections.deque[float] = collections.deque(maxlen=LATENCIES_KEPT)
        self._unsorted = 0
        self._p99 = 0.0

    def observe(self, latency_s: float) -> None:
        """An attempt was answered after `latency_s`."""
        self._latencies.append(latency_s)
        self._unsorted += 1
        if self._unsorted >= P99_EVERY:
            ordered = sorted(self._latencies)
            self._p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
            self._unsorted = 0

    def timeout_s(self, attempt: int, nbytes: int = 0) -> float:
        """The wait for attempt `attempt` (from 0) of a request of `nbytes`."""
        base = max(self.first_s, self.p99_factor * self._p99) + nbytes / ATTEMPT_BYTES_PER_S
        return min(self.max_s, base * 2 ** min(attempt, 16))


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
        """Every endpoint, in the order given (a copy)."""
        return list(self._endpoints)

    def pick(self) -> str:
        """The endpoint the next attempt goes to (module contract): the first of the
        rotation that is not avoided, else the one whose avoidance ends first."""
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

