"""Per-account throttling at a front end (§6; WAS §8). Pure: no I/O, time from an injected
`Clock`, randomness from an injected (seeded) source; decisions are return values.

Two mechanisms, both per front end (front ends share nothing):
- Rate limits. Each account has a request bucket and a byte bucket (token buckets, limits
  from `FrontEndLimits`). A request needs one request token and `nbytes` byte tokens; when
  either bucket is short it is refused, nothing is taken, and `retry_after_s` is the time
  until both buckets hold enough. So, over any window of w seconds, an account is admitted at
  most `rate * w + burst` requests and bytes.
- Overload. A partition server reports its queue depth and p99 latency (`observe_server`); at
  or above a threshold it is overloaded until a report says otherwise or the report is older
  than its TTL (a silent server is not throttled for ever). Every request is counted by a
  sample-and-hold of that server's top talkers (frontend/talkers.py), weighed by what it costs
  the server (`request_cost`: a request of 64 KiB is not one of 100 bytes) — counted when
  offered, not when admitted, so a talker that is being refused does not look quiet and get let in
  again all at once. Under overload a request is refused with a probability that rises with
  its account's share of the server's load: a noisy account is mostly refused, while an
  account below `throttle_share_min` or an equal share of the held talkers' (and every
  account never sampled) is not refused at all. Overload is queueing: a server slow but not
  queueing (its p99 at the threshold, its queue below it) refuses no account that is alone on
  it — no other account sent it a request within `overload_alone_window_ms`. Its latency is
  then not another account's load (a slow replica under its commit log, issue 29), and
  refusing the only account would stall its writers for the retry-afters and protect nobody.

Answers whose size is known only once they come (a read's records, a get's value, a peek)
are charged to the account's byte bucket afterwards (`charge`): the bucket may go into debt,
and the account's next requests are refused until it is repaid, so an account reads at most
its byte rate, as it writes and scans.

Contract: `admit` returns `Decision(admitted=True)` only after taking the tokens; a refused
request takes nothing. It raises InvalidArgument for a request that could never be admitted
(more bytes than a full bucket holds). Memory is bounded: at most `accounts_tracked_max`
accounts' buckets, `servers_tracked_max` servers, and `talkers_held_max` talkers per server.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass

from common.clock import Clock
from common.config import FrontEndLimits
from common.errors import InvalidArgument, Throttled
from frontend.talkers import RandomSource, TopTalkers
from frontend.token_bucket import TokenBucket


class Reason(enum.Enum):
    ADMITTED = "admitted"
    ACCOUNT_REQUESTS = "account request rate"
    ACCOUNT_BYTES = "account byte rate"
    SERVER_OVERLOAD = "partition server overloaded"
    ACCOUNTS_TRACKED = "too many active accounts at this front end"


@dataclass(frozen=True)
class Decision:
    admitted: bool
    retry_after_s: float = 0.0
    reason: Reason = Reason.ADMITTED

    def raise_if_refused(self) -> None:
        """For the servicer: a refusal becomes Throttled with its retry-after."""
        if not self.admitted:
            raise Throttled(f"throttled: {self.reason.value}", retry_after_s=self.retry_after_s)


ADMITTED = Decision(admitted=True)


@dataclass
class _AccountBuckets:
    requests: TokenBucket
    bytes: TokenBucket

    def refill(self, now: float) -> None:
        self.requests.refill(now)
        self.bytes.refill(now)

    def full_in_s(self) -> float:
        return max(self.requests.full_in_s(), self.bytes.full_in_s())


@dataclass
class _ServerState:
    talkers: TopTalkers
    overloaded: bool = False
    queueing: bool = False  # overloaded by its queue, not only by its latency
    reported_at: float = 0.0
    # The two accounts that sent requests last, the latest first, and when they last did:
    # whether any account but one sent within a window, in constant space.
    last: tuple[str, float] = ("", float("-inf"))
    before: tuple[str, float] = ("", float("-inf"))

    def saw(self, account: str, now: float) -> None:
        if account != self.last[0]:
            self.before = self.last
        self.last = (account, now)

    def alone(self, account: str, now: float, window_s: float) -> bool:
        """No account but `account` sent a request within `window_s` of `now`."""
        other = self.before if self.last[0] == account else self.last
        return now - other[1] > window_s


# What a request costs a partition server beyond its bytes, in bytes: a request of this many
# bytes costs about twice an empty one. (A small append is about 0.2 ms of a partition
# server's CPU here, a batch of 50 KiB about 1.5 ms: a few KiB per request.)
REQUEST_COST_BYTES = 4096


def request_cost(nbytes: int) -> float:
    """A request's weight in the top talkers' counts: 1 for an empty one, plus its bytes in
    units of REQUEST_COST_BYTES. Counting requests alone would make an account of many tiny
    requests the top talker of a server that another account floods with large batches."""
    return 1.0 + nbytes / REQUEST_COST_BYTES


def refusal_probability(share: float, limits: FrontEndLimits, equal_share: float = 0.0
                        ) -> float:
    """Under overload: 0 up to `throttle_share_min` or `equal_share` (1 / the accounts held,
    when more than one is), whichever is larger, then linear up to `throttle_probability_max`
    at a share of 1. Never 1 by default: a server loaded by one account alone still serves
    some of it, and its next report says whether that is too much.

    Why the equal share: an account that sends no more than an equal share of the load is not
    what overloads the server. Without it, once the top talker backs off (it honours its
    retry-afters), the next account's share rises past `throttle_share_min` while the server
    still reports the overload, and a quiet account is refused — a retry-after in its p99."""
    low = max(limits.throttle_share_min, equal_share)
    if share <= low:
        return 0.0
    return limits.throttle_probability_max * min(1.0, (share - low) / (1.0 - low))


class AccountThrottle:
    def __init__(self, limits: FrontEndLimits, clock: Clock, rng: RandomSource) -> None:
        self._limits = limits
        self._clock = clock
        self._rng = rng
        self._accounts: OrderedDict[str, _AccountBuckets] = OrderedDict()
        self._servers: OrderedDict[str, _ServerState] = OrderedDict()

    def observe_server(self, server: str, queue_ops: int, p99_ms: float) -> None:
        """A partition server's load report: overloaded at or above either threshold."""
        now = self._clock.monotonic()
        state = self._server(server, now)
        state.queueing = queue_ops >= self._limits.overload_queue_ops_min
        state.overloaded = state.queueing or p99_ms >= self._limits.overload_p99_ms_min
        state.reported_at = now

    def is_overloaded(self, server: str) -> bool:
        state = self._servers.get(server)
        return state is not None and self._overloaded(state, self._clock.monotonic())

    def admit(self, account: str, server: str, nbytes: int) -> Decision:
        """Decide one request of `account` to partition server `server` carrying `nbytes`."""
        limits = self._limits
        if nbytes < 0:
            raise InvalidArgument(f"a request cannot carry {nbytes} bytes")
        if nbytes > limits.account_burst_bytes_max:
            raise InvalidArgument(f"a request of {nbytes} bytes exceeds the per-account burst "
                                  f"(front_end.account_burst_bytes_max = "
                                  f"{limits.account_burst_bytes_max})")
        now = self._clock.monotonic()
        state = self._server(server, now)
        state.talkers.count(account, now, request_cost(nbytes))
        state.saw(account, now)
        buckets = self._buckets(account, now)
        if isinstance(buckets, Decision):
            return buckets
        buckets.refill(now)
        wait_requests = buckets.requests.wait_s(1)
        wait_bytes = buckets.bytes.wait_s(nbytes)
        if wait_requests > 0 or wait_bytes > 0:
            reason = (Reason.ACCOUNT_REQUESTS if wait_requests >= wait_bytes
                      else Reason.ACCOUNT_BYTES)
            return Decision(False, max(wait_requests, wait_bytes), reason)
        if self._overloaded(state, now) and (state.queueing or not state.alone(
                account, now, limits.overload_alone_window_ms / 1000.0)):
            # An equal share among the accounts held; an account held alone has none (it
            # is the whole load, and throttled as such).
            held = state.talkers.held_count()
            probability = refusal_probability(state.talkers.share(account, now), limits,
                                              1.0 / held if held > 1 else 0.0)
            if probability > 0.0 and self._rng.random() < probability:
                return Decision(False, self._overload_retry_after_s(probability),
                                Reason.SERVER_OVERLOAD)
        buckets.requests.take(1)
        buckets.bytes.take(nbytes)
        return ADMITTED

    def charge(self, account: str, nbytes: int) -> None:
        """`nbytes` an admitted request of `account` returned, taken from its byte bucket
        (into debt if need be; at most a full bucket's worth at once)."""
        now = self._clock.monotonic()
        buckets = self._buckets(account, now)
        if isinstance(buckets, Decision):
            return  # too many accounts tracked: it was admitted before any of this
        buckets.refill(now)
        buckets.bytes.charge(min(nbytes, self._limits.account_burst_bytes_max))

    def accounts_tracked(self) -> int:
        return len(self._accounts)

    def servers_tracked(self) -> int:
        return len(self._servers)

    def talkers(self, server: str) -> dict[str, float]:
        """The held top talkers of `server` and their counts (empty if unknown)."""
        state = self._servers.get(server)
        return state.talkers.held() if state is not None else {}

    def _overloaded(self, state: _ServerState, now: float) -> bool:
        fresh = now - state.reported_at <= self._limits.overload_report_ttl_ms / 1000.0
        return state.overloaded and fresh

    def _overload_retry_after_s(self, probability: float) -> float:
        # A heavier talker (a higher refusal probability) is told to wait longer; jittered
        # down to half of that, so that the requests refused together (a flood's appenders
        # are refused in the same few milliseconds) do not all come back together.
        low = self._limits.overload_retry_after_ms_min
        high = self._limits.overload_retry_after_ms_max
        scale = probability / self._limits.throttle_probability_max
        wait = (low + scale * (high - low)) * (0.5 + 0.5 * self._rng.random())
        return max(low, wait) / 1000.0

    def _server(self, server: str, now: float) -> _ServerState:
        state = self._servers.get(server)
        if state is None:
            if len(self._servers) >= self._limits.servers_tracked_max:
                # Forgetting a server loses only its talker counts and its last report.
                self._servers.popitem(last=False)
            limits = self._limits
            state = _ServerState(TopTalkers(limits.talker_sample_probability,
                                            limits.talkers_held_max,
                                            limits.talker_window_ms / 1000.0, self._rng, now))
            self._servers[server] = state
        else:
            self._servers.move_to_end(server)
        return state

    def _buckets(self, account: str, now: float) -> _AccountBuckets | Decision:
        buckets = self._accounts.get(account)
        if buckets is not None:
            self._accounts.move_to_end(account)
            return buckets
        if len(self._accounts) >= self._limits.accounts_tracked_max:
            # Evict only a full bucket pair: a new account would get exactly that, so
            # forgetting it cannot let its account exceed its rate. Otherwise refuse the
            # newcomer until the least recently used pair is full.
            oldest = next(iter(self._accounts.values()))
            oldest.refill(now)
            wait = oldest.full_in_s()
            if wait > 0:
                return Decision(False, wait, Reason.ACCOUNTS_TRACKED)
            self._accounts.popitem(last=False)
        limits = self._limits
        buckets = _AccountBuckets(
            TokenBucket(limits.account_requests_per_s_max, limits.account_burst_requests_max,
                        now),
            TokenBucket(limits.account_bytes_per_s_max, limits.account_burst_bytes_max, now))
        self._accounts[account] = buckets
        return buckets
