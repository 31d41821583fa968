"""The load split finder (issue 17): where to cut a partition so that each side gets about
half of its requests. Ours follows CockroachDB's kv/kvserver/split/finder.go and TiKV's
raftstore split_controller.rs, which both do this:

- a reservoir of SAMPLES_MAX candidate keys, sampled uniformly from the requests' start keys;
- each candidate counts the requests since it was taken that fall wholly to its left, to its
  right (a request at the candidate itself goes right: it would be the right child's first
  key), or span it (scans);
- a candidate is refused with too few requests counted, a balance score |L-R|/(L+R) at or
  above 0.25, or a contained score C/(L+R+C) at or above 0.5 (a scan across the cut costs two
  partitions a request each); of the rest the one with the lowest sum of both scores wins.

Ours adds one thing: a cut that gives one side a chosen share of the load rather than half
(`best_key(share=...)`), so the policy can cut off just the load an overloaded server should
give away; the balance score is then the side's relative distance from that share.

Contract: the keys recorded are partition-name starts (keys.encode_key(account, pname,
KIND_META, b""): requests.route_key), so every candidate is a legal split key — a split never
cuts a partition name (split17.md). All load on one name gives no key: every candidate is that
name's start, and every request falls right of it (balance score 1).

Windows: requests are counted in a window of `window_s` seconds; the report is the last
complete window's, or the current one once it is half a window old or has counted more, so a
load that stops fades within two windows. Cost on the hot path (every request routed, tens of
thousands a second): a clock read, a random number, a bisect and one increment — point
requests are counted per gap between the sorted candidates and folded into the candidates'
counters only when a candidate changes or the report is read. Time comes from an injected
clock; randomness from a seeded generator.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from common.clock import Clock, SystemClock

SAMPLES_MAX = 20
WINDOW_S = 10.0
# CockroachDB's splitKeyMinCounter, splitKeyThreshold, splitKeyContainedThreshold.
REQUESTS_MIN = 100
BALANCE_SCORE_MAX = 0.25
CONTAINED_SCORE_MAX = 0.5

# (key, left, right, contained): partition.proto LoadSample.
Sample = tuple[bytes, int, int, int]


class _Reservoir:
    """One window's candidates, sorted by key, with their counters."""

    __slots__ = ("_random", "contained", "count", "gaps", "keys", "left", "right", "started")

    def __init__(self, started: float, rng: random.Random) -> None:
        self.started = started
        self.count = 0  # requests recorded in this window
        self.keys: list[bytes] = []
        self.left: list[int] = []
        self.right: list[int] = []
        self.contained: list[int] = []
        # gaps[i]: point requests not yet folded in with exactly i candidates at or below
        # their key (so right of candidates 0..i-1, left of candidates i..).
        self.gaps = [0]
        self._random = rng.random

    def _slot(self) -> int:
        """Where this request's key goes in the reservoir: an index below SAMPLES_MAX
        (Algorithm R: the n-th request replaces a candidate with probability SAMPLES_MAX/n),
        or SAMPLES_MAX: it is only counted."""
        count = self.count
        self.count += 1
        if count < SAMPLES_MAX:
            return count
        return int(self._random() * (count + 1))

    def point(self, key: bytes) -> None:
        slot = self._slot()
        if slot < SAMPLES_MAX:
            self._take(slot, key)
        else:
            self.gaps[bisect.bisect_right(self.keys, key)] += 1

    def span(self, start: bytes, end: bytes | None, candidate: bytes) -> None:
        slot = self._slot()
        if slot < SAMPLES_MAX:
            self._take(slot, candidate)
            return
        self.fold()
        for i, key in enumerate(self.keys):
            if start < key and (end is None or key < end):
                self.contained[i] += 1
            elif key <= start:
                self.right[i] += 1
            else:
                self.left[i] += 1

    def _take(self, slot: int, key: bytes) -> None:
        """Key becomes a candidate with empty counters, replacing the slot-th (in key order:
        as uniform a victim as any) once the reservoir is full."""
        self.fold()
        if slot < len(self.keys):
            for column in (self.keys, self.left, self.right, self.contained):
                del column[slot]
        at = bisect.bisect_right(self.keys, key)
        self.keys.insert(at, key)
        for column in (self.left, self.right, self.contained):
            column.insert(at, 0)
        self.gaps = [0] * (len(self.keys) + 1)

    def fold(self) -> None:
        """Add the counted gaps to the candidates' counters."""
        gaps = self.gaps
        if not any(gaps):
            return
        below = 0
        total = sum(gaps)
        for i in range(len(self.keys)):
            below += gaps[i]
            self.left[i] += below
            self.right[i] += total - below
        self.gaps = [0] * len(gaps)

    def samples(self) -> tuple[Sample, ...]:
        self.fold()
        return tuple(zip(self.keys, self.left, self.right, self.contained, strict=True))


class LoadFinder:
    """The candidates of one partition, fed by the requests routed to it."""

    def __init__(self, clock: Clock | None = None, window_s: float = WINDOW_S,
                 seed: int = 0) -> None:
        self._clock = (clock or SystemClock()).monotonic
        self._window_s = window_s
        self._random = random.Random(seed)
        self._current = _Reservoir(self._clock(), self._random)
        self._previous: _Reservoir | None = None

    def _window(self) -> _Reservoir:
        now = self._clock()
        current = self._current
        if now - current.started >= self._window_s:
            # A window with no request in it leaves nothing to report after it.
            stale = now - current.started >= 2 * self._window_s
            self._previous = None if stale else current
            current = self._current = _Reservoir(now, self._random)
        return current

    def record(self, key: bytes) -> None:
        """A request to one partition name; `key` is its start (requests.route_key)."""
        self._window().point(key)

    def record_span(self, start: bytes, end: bytes | None, candidate: bytes) -> None:
        """A request over keys [start, end) (end None: to the partition's end), e.g. a scan;
        `candidate` is the start of the partition name holding `start`."""
        self._window().span(start, end, candidate)

    def report(self) -> tuple[tuple[Sample, ...], int]:
        """(candidates, requests counted) of the window the policy should read."""
        current = self._window()
        previous = self._previous
        half_done = self._clock() - current.started >= self._window_s / 2
        if previous is None or half_done or current.count >= previous.count:
            return current.samples(), current.count
        return previous.samples(), previous.count


@dataclass(frozen=True)
class Scores:
    key: bytes
    requests: int
    balance: float
    contained: float


def scores(sample: Sample, share: float = 0.5) -> Scores:
    """A candidate's scores. `share`: the share of the load one side should get — a half for
    a split that halves the load, less to cut a piece off. The balance score is how far the
    nearer side's share is from it, relative to it: for a half that is |L-R|/(L+R), as
    CockroachDB and TiKV score; for a piece it refuses (at 0.25) the same relative error."""
    key, left, right, contained = sample
    sides = left + right
    total = sides + contained
    if sides:
        left_share = left / sides
        balance = min(abs(left_share - share), abs(1 - left_share - share)) / share
    else:
        balance = 1.0
    return Scores(key, total, balance, contained / total if total else 0.0)


def best_key(samples: Iterable[Sample], low: bytes, high: bytes | None,
             requests_min: int = REQUESTS_MIN, balance_max: float = BALANCE_SCORE_MAX,
             contained_max: float = CONTAINED_SCORE_MAX, share: float = 0.5
             ) -> tuple[bytes | None, str]:
    """(the best candidate strictly inside (low, high), why it won) or (None, why none did):
    the one with the lowest balance + contained score of those with enough requests and each
    score under its limit. `share` (at most a half): the share of the load one side should
    get (scores). Pure: the policy calls it on the samples a heartbeat carried."""
    if not 0.0 < share <= 0.5:
        raise ValueError(f"a share of the load to cut off is in (0, 0.5], not {share}")
    refused = {"outside the range": 0, "too few requests": 0, "contained": 0,
               "unbalanced": 0}
    best: Scores | None = None
    for sample in samples:
        s = scores(sample, share)
        if not (low < s.key and (high is None or s.key < high)):
            refused["outside the range"] += 1
        elif s.requests < requests_min:
            refused["too few requests"] += 1
        elif s.contained >= contained_max:  # first: a candidate only scans span is both
            refused["contained"] += 1
        elif s.balance >= balance_max:
            refused["unbalanced"] += 1
        elif best is None or s.balance + s.contained < best.balance + best.contained:
            best = s
    if best is None:
        why = ", ".join(f"{n} {what}" for what, n in refused.items() if n)
        return None, f"no load key ({why or 'no samples'})"
    target = "" if share == 0.5 else f" for a {share:.2f} share"
    return best.key, (f"load key of {best.requests} requests{target}: balance "
                      f"{best.balance:.2f}, contained {best.contained:.2f}")


def sample_of(samples: Sequence[Sample], key: bytes) -> Sample | None:
    """The candidate `key`'s counters, if it is one."""
    for sample in samples:
        if sample[0] == key:
            return sample
    return None
