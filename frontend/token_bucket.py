"""A token bucket: a sustained rate with a bounded burst. Pure, on times passed in.

Contract: between any two times t0 <= t1, the amounts taken sum to at most
`rate_per_s * (t1 - t0) + capacity` — the bucket starts full, holds at most `capacity`, and
gains `rate_per_s` a second. `take` is only called after `wait_s` said 0. A clock that goes
back (it should not) adds nothing rather than removing tokens.

`charge` takes an amount known only after the fact (the bytes a read returned) whether or
not it is there: the bucket may go into debt, down to -capacity, and nothing else is taken
until the debt is repaid. Then the amounts taken between t0 and t1 sum to at most
`rate_per_s * (t1 - t0) + capacity` plus the last charge made before t1.

Float times round: a caller that waits exactly the `wait_s` it was told may find the bucket
short by ~1e-10 of a token, and be refused again with a retry-after of 1e-14 s. So an amount
within `SLACK_TOKENS` of what is there counts as there; tokens then never fall below
-SLACK_TOKENS, so the bound above is exceeded by at most that, in total, never cumulatively
(amounts are whole requests and bytes: a millionth of one is nothing anyone can send).
"""

from __future__ import annotations

SLACK_TOKENS = 1e-6


class TokenBucket:
    def __init__(self, rate_per_s: float, capacity: float, now: float) -> None:
        assert rate_per_s > 0 and capacity > 0, "a bucket needs a rate and room"
        self.rate_per_s = rate_per_s
        self.capacity = capacity
        self._tokens = capacity
        self._at = now

    def refill(self, now: float) -> None:
        if now > self._at:
            self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate_per_s)
            self._at = now

    def wait_s(self, amount: float) -> float:
        """Seconds until `amount` can be taken (0: now). The caller refilled first."""
        missing = amount - self._tokens
        return 0.0 if missing <= SLACK_TOKENS else missing / self.rate_per_s

    def take(self, amount: float) -> None:
        assert amount <= self._tokens + SLACK_TOKENS, "take only what wait_s said is there"
        self._tokens -= amount

    def charge(self, amount: float) -> None:
        """Take `amount` (>= 0) after the fact, into debt if need be (module docstring)."""
        assert amount >= 0
        self._tokens = max(-self.capacity, self._tokens - amount)

    def full_in_s(self) -> float:
        """Seconds until the bucket is full again: after that it equals a new one."""
        missing = self.capacity - self._tokens
        return 0.0 if missing <= SLACK_TOKENS else missing / self.rate_per_s

    @property
    def tokens(self) -> float:
        return self._tokens
