"""Whom the overload throttle refuses (frontend/throttle.py, talkers.py; WAS §8), as the probe
tests/probe/test_throttle_overload.py found it must: shares are of the load in bytes, not in
requests; an account within an equal share of the held talkers is not refused; refusals made
together are told to come back at different times; and the partition server's pressure
forgets a past overload within a second or two (partition_layer/stats.PressureGauge).

Pure unit tests: a ManualClock and seeded random sources."""

from __future__ import annotations

import random

import pytest

from common.clock import ManualClock
from common.config import FrontEndLimits
from frontend.talkers import TopTalkers
from frontend.throttle import AccountThrottle, Reason
from partition_layer.stats import LoadStats, PressureGauge

UNLIMITED = FrontEndLimits(account_requests_per_s_max=1e9, account_burst_requests_max=10**9,
                           account_bytes_per_s_max=10**12, account_burst_bytes_max=10**12)
BATCH_BYTES = 50 * 1024


def run(throttle: AccountThrottle, clock: ManualClock, steps: int,
        per_step: dict[str, tuple[int, int]], warm_up: int = 0) -> dict[str, tuple[int, int]]:
    """Every 10 ms each account sends (requests, bytes each), interleaved, to ps-1, reported
    overloaded after the first `warm_up` steps. Returns (offered, refused) per account."""
    counts = {a: [0, 0] for a in per_step}
    order = [(a, nbytes) for a, (n, nbytes) in per_step.items() for _ in range(n)]
    rng = random.Random(3)
    for step in range(steps):
        if step >= warm_up and step % 10 == 0:
            throttle.observe_server("ps-1", 10**9, 0.0)
        rng.shuffle(order)
        for account, nbytes in order:
            decision = throttle.admit(account, "ps-1", nbytes)
            counts[account][0] += 1
            if not decision.admitted:
                assert decision.reason is Reason.SERVER_OVERLOAD
                counts[account][1] += 1
        clock.advance(0.01)
    return {a: (c[0], c[1]) for a, c in counts.items()}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_many_small_requests_are_not_the_top_talker_against_large_batches(seed: int) -> None:
    # "quiet" sends five times the requests of "noisy", but a fiftieth of its bytes.
    throttle = AccountThrottle(UNLIMITED, clock := ManualClock(), random.Random(seed))
    result = run(throttle, clock, 1000, {"noisy": (2, BATCH_BYTES), "quiet": (10, 100)})
    assert result["quiet"][1] == 0, result
    offered, refused = result["noisy"]
    assert refused / offered > 0.3, result


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_account_within_an_equal_share_is_not_refused(seed: int) -> None:
    # After the top talker backed off, "second" sends a quarter of the load: more than
    # throttle_share_min, less than an equal share of two. Only "top" is refused (once both
    # are held: the warm-up).
    throttle = AccountThrottle(UNLIMITED, clock := ManualClock(), random.Random(seed))
    result = run(throttle, clock, 1200, {"top": (3, 100), "second": (1, 100)}, warm_up=200)
    assert result["second"][1] == 0, result
    assert result["top"][1] / result["top"][0] > 0.2, result


def test_refusals_made_together_come_back_at_different_times() -> None:
    limits = FrontEndLimits(talker_sample_probability=1.0)
    throttle = AccountThrottle(limits, ManualClock(), random.Random(5))
    throttle.observe_server("ps-1", 10**9, 0.0)
    waits = [d.retry_after_s for d in (throttle.admit("alone", "ps-1", 100)
                                       for _ in range(200)) if not d.admitted]
    assert len(waits) > 100
    high = limits.overload_retry_after_ms_max / 1000
    # Alone on the server: the heaviest talker's retry-after, jittered down to half of it.
    assert all(high / 2 <= w <= high for w in waits)
    assert max(waits) - min(waits) > high / 4
    assert len(set(waits)) > len(waits) // 2


def test_a_large_request_is_sampled_by_its_bytes() -> None:
    # p = 0.01 per unit: one request weighing 300 units is held with probability ~0.95, while
    # one of weight 1 is held with probability 0.01.
    held_large = sum("a" in _held_after(seed, 300.0) for seed in range(200))
    held_small = sum("a" in _held_after(seed, 1.0) for seed in range(200))
    assert held_large > 170 and held_small < 10, (held_large, held_small)


def _held_after(seed: int, weight: float) -> dict[str, float]:
    talkers = TopTalkers(0.01, 8, 1.0, random.Random(seed), 0.0)
    talkers.count("a", 0.0, weight)
    return talkers.held()


def test_pressure_forgets_an_overload_within_two_seconds() -> None:
    clock = ManualClock()
    stats = LoadStats(clock)
    gauge = PressureGauge(lambda: [stats], clock)
    for _ in range(100):
        stats.record(10, 0.5)  # an overload: half a second per operation
    assert gauge.read()[1] == pytest.approx(500.0)
    clock.advance(2.1)  # the overload ended: the throttled account backed off
    stats.record(10, 0.002)
    clock.advance(0.2)
    assert gauge.read()[1] == pytest.approx(2.0)


def test_pressure_reports_the_operations_open_at_once_not_only_those_open_now() -> None:
    # A group commit answers a flood's 16 appends together, and the report goes out just
    # after: at that instant none is open, yet the server had 16 in flight a moment ago.
    clock = ManualClock()
    gauge = PressureGauge(lambda: [], clock, peak_s=0.25)
    for _ in range(16):
        gauge.open_ops += 1
    for _ in range(16):
        gauge.open_ops -= 1
    assert gauge.open_ops == 0
    assert gauge.read()[0] == 16
    clock.advance(0.3)
    assert gauge.read()[0] == 16  # the period before is still reported
    gauge.open_ops += 1
    clock.advance(0.3)
    assert gauge.read()[0] == 1  # the peak is forgotten; one is still open
    gauge.open_ops -= 1
    clock.advance(1.0)
    assert gauge.read()[0] == 0
