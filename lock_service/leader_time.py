"""The time a leader stamps into the commands it proposes (§3: expiry is decided inside the
replicated state from leader-stamped time, never from each replica's own clock).

A leader's time is the state's time when it took office (the `now` its first barrier saw:
every command of earlier leaders is applied by then) advanced by the leader's own monotonic
clock. Consequences, each of which the lease protocol relies on:
- it never goes back, within a leader or across leaders (the state also takes the max);
- it never runs faster than the leader's monotonic clock, so a lease stamped at time T
  expires no earlier, in real time, than `ttl` after the leader stamped it, and a client
  that counts `ttl` from before it sent its request stops claiming first;
- it stands still between leaders (and while the whole group is down): an election extends
  leases, it never shortens them. Wall-clock jumps on any host change nothing.
"""

from __future__ import annotations

from common.clock import Clock


class LeaderTime:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.term: int | None = None
        self._base = 0.0
        self._since = 0.0
        self._last = 0.0

    def anchor(self, term: int, state_now: float) -> None:
        """Take office in `term`: the state's time was `state_now` after the barrier."""
        self.term = term
        self._base = state_now
        self._since = self._clock.monotonic()
        self._last = state_now

    def resign(self) -> None:
        self.term = None

    def now(self) -> float:
        assert self.term is not None, "only an anchored leader stamps time"
        stamped = self._base + (self._clock.monotonic() - self._since)
        self._last = max(self._last, stamped)
        return self._last
