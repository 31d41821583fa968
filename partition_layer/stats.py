"""A partition's load as the PM sees it (§4 heartbeats): operations and bytes per second and
latency percentiles over a sliding window of the last `window_s` seconds; and a partition
server's pressure as front ends see it on every response batch (`PressureGauge`).

Contract: `figures()` only reads. Heartbeats to the PM and the Status RPC (`stamp partition
ls`) both read the same figures, and neither erases what the other, or the PM's balancing
pass, will see (issue 15 hole 9: a reading that reset the window stole the PM's figures).
Time comes from an injected clock. Bounded: the window is `WINDOW_BUCKETS` buckets, each
with a fixed reservoir of latency samples.

Where to split for load (issue 17): `finder` counts the requests routed to the partition
(requests.py calls `sample_key` / `sample_span`) around its candidate split keys
(load_finder.py); `figures()` carries its candidates (`samples`) and the requests they come
from (`requests_sampled`) to the heartbeat.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from common.clock import Clock, SystemClock
from partition_layer.load_finder import LoadFinder

LATENCY_SAMPLES_MAX = 2048
# The PM's balancing pass looks every few seconds (§4: 15 s in the paper); heartbeats come
# every second: a window of 8 s is what the pass balances on. With 15 s, a load that had
# shifted showed in the figures only half-way after 8 s: the first cut of a PS that turned
# hot was too small, and the next waited out the cooldown (stamp bench balance, skewed).
WINDOW_S = 8.0
WINDOW_BUCKETS = 15


@dataclass(slots=True)
class _Bucket:
    started: float
    ops: int = 0
    nbytes: int = 0
    latencies: list[float] = field(default_factory=list)


class LoadStats:
    def __init__(self, clock: Clock | None = None, window_s: float = WINDOW_S) -> None:
        self._clock = (clock or SystemClock()).monotonic
        self._window_s = window_s
        self._bucket_s = window_s / WINDOW_BUCKETS
        self._samples_per_bucket = max(1, LATENCY_SAMPLES_MAX // WINDOW_BUCKETS)
        self._started = self._clock()
        self._buckets: deque[_Bucket] = deque()
        self._random = random.Random(0)
        self.finder = LoadFinder(clock)
        # Bound methods: the request path calls them for every request it routes here.
        self.sample_key = self.finder.record
        self.sample_span = self.finder.record_span

    def record(self, nbytes: int, seconds: float) -> None:
        now = self._clock()
        if not self._buckets or now - self._buckets[-1].started >= self._bucket_s:
            self._buckets.append(_Bucket(now))
            while self._buckets and now - self._buckets[0].started >= self._window_s \
                    + self._bucket_s:
                self._buckets.popleft()  # wholly outside any window figures() can ask for
        bucket = self._buckets[-1]
        bucket.ops += 1
        bucket.nbytes += nbytes
        # Reservoir sampling keeps percentiles honest at any rate in bounded memory.
        if len(bucket.latencies) < self._samples_per_bucket:
            bucket.latencies.append(seconds)
        else:
            slot = self._random.randrange(bucket.ops)
            if slot < self._samples_per_bucket:
                bucket.latencies[slot] = seconds

    def recent_latencies(self, seconds: float) -> list[float]:
        """The latency samples (seconds) of the buckets begun in the last `seconds`."""
        since = self._clock() - seconds
        return [x for b in self._buckets if b.started >= since for x in b.latencies]

    def figures(self) -> dict[str, Any]:
        """Rates and latency percentiles over the last `window_s` seconds (or since the
        partition started serving, if that is shorter), and the load finder's candidates
        (partition.proto LoadSample tuples) with the requests counted. Changes nothing the
        next reader would see differently."""
        now = self._clock()
        since = max(now - self._window_s, self._started)
        elapsed = max(now - since, 1e-6)
        recent = [b for b in self._buckets if b.started >= since]
        ordered = sorted(x for b in recent for x in b.latencies)

        def pct(p: float) -> float:
            return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000 if ordered else 0.0
        samples, requests = self.finder.report()
        return {"ops_per_s": sum(b.ops for b in recent) / elapsed,
                "bytes_per_s": sum(b.nbytes for b in recent) / elapsed,
                "p50_ms": pct(0.50), "p99_ms": pct(0.99),
                "samples": samples, "requests_sampled": requests}


# Pressure: the p99 over the last second or two (the buckets begun within PRESSURE_WINDOW_S:
# LoadStats's buckets are a second long), recomputed at most this often — every response
# batch carries it, and sorting the samples per batch would cost more than the batch. Short,
# because front ends throttle on it: an overload shows at once, and so does its end — a
# window of several seconds kept reporting an overload for seconds after the throttled
# account had backed off, and the accounts still sending then were refused instead.
PRESSURE_WINDOW_S = 1.0
PRESSURE_RECOMPUTE_S = 0.1
# The open operations reported are the most open at once over the last 0.25-0.5 s, not the
# number at the instant of the report: a report is written just after a group commit
# answered its requests, so at that instant a flood's appends were nearly all answered (the
# probe saw 0 open in most reports of a server with 16 appends in flight).
PRESSURE_PEAK_S = 0.25


class PressureGauge:
    """A partition server's pressure (partition.proto ServerPressure): operations accepted
    and not yet answered, across its partitions (`open_ops`, kept by the servicer), and the
    p99 latency of its partitions' operations over the last PRESSURE_WINDOW_S seconds.

    Contract: `read()` is cheap — the p99 is recomputed only when the last one is older than
    PRESSURE_RECOMPUTE_S; the open operations read are the most that were open at once since
    between PRESSURE_PEAK_S and twice that ago (and at least those open now). Changing
    `open_ops` is cheap too (a compare: the servicer does it per request). Time comes from an
    injected clock."""

    def __init__(self, stats: Callable[[], Iterable[LoadStats]], clock: Clock | None = None,
                 window_s: float = PRESSURE_WINDOW_S,
                 recompute_s: float = PRESSURE_RECOMPUTE_S,
                 peak_s: float = PRESSURE_PEAK_S) -> None:
        self._stats = stats
        self._clock = (clock or SystemClock()).monotonic
        self._window_s = window_s
        self._recompute_s = recompute_s
        self._peak_s = peak_s
        self._computed_at: float | None = None
        self._p99_ms = 0.0
        self._open = 0
        # The peak of the current period (begun at _period_start) and of the one before.
        self._peak = 0
        self._peak_before = 0
        self._period_start = self._clock()

    @property
    def open_ops(self) -> int:
        """Operations open now (the servicer adds and subtracts)."""
        return self._open

    @open_ops.setter
    def open_ops(self, value: int) -> None:
        self._open = value
        if value > self._peak:
            self._peak = value

    def read(self) -> tuple[int, float]:
        """(open operations, p99 latency in ms)."""
        now = self._clock()
        if now - self._period_start >= self._peak_s:
            # A new period; a silent period's peak is what is open at its start.
            periods = int((now - self._period_start) / self._peak_s)
            self._peak_before = self._peak if periods == 1 else self._open
            self._peak = self._open
            self._period_start += periods * self._peak_s
        if self._computed_at is None or now - self._computed_at >= self._recompute_s:
            samples = sorted(x for stats in self._stats()
                             for x in stats.recent_latencies(self._window_s))
            self._p99_ms = samples[min(len(samples) - 1, int(0.99 * len(samples)))] * 1000 \
                if samples else 0.0
            self._computed_at = now
        return max(0, self._open, self._peak, self._peak_before), self._p99_ms
