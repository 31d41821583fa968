"""Every client's retry policy (issue 29: the SDK, the partition, stream-manager and lock
clients): which errors are retried and after how long (`RetryPolicy`), and how long one
attempt waits for its answer (`AttemptTimer`).

Contract of `RetryPolicy.delay`: None for an error that must not be retried (anything but
Unavailable, NotOwner, Throttled, and DeadlineExceeded on an idempotent call); otherwise a
backoff growing exponentially from `backoff_min_s` to `backoff_max_s` with jitter (each
delay uniform in [half, all] of the exponential step, so concurrent clients spread out but
never retry at once), and never less than a Throttled error's `retry_after_s`. Each client
sets its own bounds (a lock-service election is over in tens of milliseconds; the SDK waits
longer between tries of a whole front end). Time and randomness are the caller's.

Contract of `AttemptTimer.timeout_s(attempt, nbytes)`: short at first (ATTEMPT_FIRST_S, or
ATTEMPT_P99_FACTOR times the client's recent p99 when that is longer, plus time to send the
request's bytes) and doubles with each attempt up to ATTEMPT_MAX_S.
- Short, because a frozen or cut-off server answers nothing: about a second of its silence
  is enough to go elsewhere (another front end; a fresh partition map), where a fixed 10 s
  attempt made a frozen front end cost its writers 10 s.
- Safe, because every mutation carries a token: a slow first attempt that still completes
  is applied once, and a retry is answered from it.
- Adaptive and doubling, so a stamp that is merely slow (overload, a partition moving) is
  not flooded with retries, and an honestly slow call still gets its time.

Contract of `LeaderGuess` (the lock-service and stream-manager clients: a Raft group's
leader, found by asking): `address` is where the next attempt goes. `follow(hint, asked)`
takes a NotLeader answer's hint unless it names a replica that is suspect; `timed_out(a)`
makes `a` suspect for `suspect_s` (about an election: a frozen leader's followers go on
naming it until they elect another, and following them back would cost an attempt each
time) and moves on; `failed(a)` (refused, unreachable) moves on; `answered(a)` clears it.
Moving on goes to the next replica in order that is not suspect, if there is one.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from common.errors import DeadlineExceeded, StampError, Throttled, Unavailable

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


class LeaderGuess:
    """Which replica of a Raft group to ask next (module contract). Not thread-safe."""

    def __init__(self, addresses: Sequence[str], monotonic: Callable[[], float],
                 suspect_s: float) -> None:
        self.addresses = list(dict.fromkeys(addresses))
        self.address = self.addresses[0]
        self._monotonic = monotonic
        self._suspect_s = suspect_s
        self._suspect_until: dict[str, float] = {}

    def suspect(self, address: str) -> bool:
        return self._suspect_until.get(address, 0.0) > self._monotonic()

    def answered(self, address: str) -> None:
        self._suspect_until.pop(address, None)
        self.address = address

    def follow(self, hint: str | None, asked: str) -> bool:
        """Go to `hint` (a NotLeader answer from `asked` named it); False if not taken."""
        if not hint or hint == asked or hint not in self.addresses or self.suspect(hint):
            return False
        self.address = hint
        return True

    def timed_out(self, address: str) -> None:
        self._suspect_until[address] = self._monotonic() + self._suspect_s
        self.failed(address)

    def failed(self, address: str) -> None:
        """Move past `address` if it is the guess."""
        if self.address != address or address not in self.addresses:
            return
        start = self.addresses.index(address)
        others = [self.addresses[(start + i) % len(self.addresses)]
                  for i in range(1, len(self.addresses))] or [address]
        self.address = next((a for a in others if not self.suspect(a)), others[0])
