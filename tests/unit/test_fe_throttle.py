"""Per-account throttling at a front end (frontend/throttle.py; WAS §8): the rate limits hold
with their bursts, a noisy account is refused under overload while quiet ones are not, memory
stays bounded, and — a hypothesis property against a brute-force check — admitted requests
and bytes per account over any window never exceed rate × window + burst.

Pure unit tests: a ManualClock that only moves when told, and seeded random sources (the seed
is in each test's id, so a failure replays)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.config import FrontEndLimits
from common.errors import InvalidArgument, Throttled
from frontend.throttle import Decision, Reason, refusal_probability
from tests.support.throttle import UNLIMITED, make, run_load

# Rates small enough to count by hand; the overload machinery as configured by default.
SMALL = FrontEndLimits(account_requests_per_s_max=10.0, account_burst_requests_max=20,
                       account_bytes_per_s_max=1000, account_burst_bytes_max=2000)


def test_a_new_account_gets_its_burst_then_the_rate() -> None:
    throttle, clock = make(SMALL)
    assert all(throttle.admit("a", "ps-1", 0).admitted for _ in range(20))
    refused = throttle.admit("a", "ps-1", 0)
    assert refused == Decision(False, pytest.approx(0.1), Reason.ACCOUNT_REQUESTS)
    clock.advance(0.1)
    assert throttle.admit("a", "ps-1", 0).admitted
    assert not throttle.admit("a", "ps-1", 0).admitted
    # Another account has its own buckets.
    assert throttle.admit("b", "ps-1", 0).admitted


def test_sustained_requests_are_admitted_at_the_configured_rate() -> None:
    throttle, clock = make(SMALL)
    admitted = 0
    for _ in range(10_000):  # 100 s, a try every 10 ms (10x the rate)
        admitted += throttle.admit("a", "ps-1", 0).admitted
        clock.advance(0.01)
    # The burst, then 10/s for the 100 s the clock moved (less a step's worth of rounding).
    assert 20 + 10 * 100 - 1 <= admitted <= 20 + 10 * 100


def test_bytes_are_limited_and_a_refusal_takes_nothing() -> None:
    throttle, clock = make(SMALL)
    assert throttle.admit("a", "ps-1", 1500).admitted
    refused = throttle.admit("a", "ps-1", 1500)
    assert refused == Decision(False, pytest.approx(1.0), Reason.ACCOUNT_BYTES)
    # The refused request took neither bytes nor a request: the 500 left still fit.
    assert throttle.admit("a", "ps-1", 500).admitted
    assert not throttle.admit("a", "ps-1", 1).admitted
    clock.advance(1.5)
    assert throttle.admit("a", "ps-1", 1500).admitted


def test_retrying_after_retry_after_succeeds() -> None:
    throttle, clock = make(SMALL)
    for nbytes in (1900, 1700, 300, 2000, 1):
        decision = throttle.admit("a", "ps-1", nbytes)
        if not decision.admitted:
            # At most the time to fill the whole byte burst (a token's rounding aside).
            assert 0 < decision.retry_after_s <= SMALL.account_burst_bytes_max / 1000 + 1e-6
            clock.advance(decision.retry_after_s)
            assert throttle.admit("a", "ps-1", nbytes).admitted


def test_a_request_that_could_never_be_admitted_is_an_invalid_argument() -> None:
    throttle, _ = make(SMALL)
    with pytest.raises(InvalidArgument, match="account_burst_bytes_max"):
        throttle.admit("a", "ps-1", 2001)
    with pytest.raises(InvalidArgument):
        throttle.admit("a", "ps-1", -1)
    assert throttle.admit("a", "ps-1", 2000).admitted


def test_a_refusal_raises_throttled_with_its_retry_after() -> None:
    Decision(True).raise_if_refused()
    with pytest.raises(Throttled, match="byte rate") as info:
        Decision(False, 0.25, Reason.ACCOUNT_BYTES).raise_if_refused()
    assert info.value.retry_after_s == 0.25


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_under_overload_a_noisy_account_is_refused_and_quiet_ones_are_not(seed: int) -> None:
    throttle, clock = make(UNLIMITED, seed)
    quiet = {f"quiet-{i}": 1 for i in range(10)}
    # Warm up the talker counts without overload, then overload the server.
    run_load(throttle, clock, 200, {"noisy": 100, **quiet})
    assert "noisy" in throttle.talkers("ps-1")
    result = run_load(throttle, clock, 1000, {"noisy": 100, **quiet}, report=(50_000, 10.0))
    offered, refused = result["noisy"]
    # Its share is ~100/110: refused with probability ~0.9 * (0.91 - 0.1) / 0.9 = 0.81.
    assert refused / offered > 0.7, f"seed {seed}: noisy refused {refused}/{offered}"
    quiet_offered = sum(result[a][0] for a in quiet)
    quiet_refused = sum(result[a][1] for a in quiet)
    assert quiet_refused / quiet_offered < 0.01, f"seed {seed}: {quiet_refused}/{quiet_offered}"


def test_a_noisy_account_is_caught_even_without_a_warm_up() -> None:
    throttle, clock = make(UNLIMITED, 5)
    result = run_load(throttle, clock, 1000, {"noisy": 50, "quiet": 1}, report=(0, 500.0))
    offered, refused = result["noisy"]
    assert refused / offered > 0.6
    assert result["quiet"][1] == 0


def test_without_overload_only_the_account_limits_refuse() -> None:
    throttle, clock = make(UNLIMITED, 3)
    # Reports below both thresholds: the noisy account is admitted every time.
    below = (UNLIMITED.overload_queue_ops_min - 1, UNLIMITED.overload_p99_ms_min - 1)
    result = run_load(throttle, clock, 500, {"noisy": 100, "quiet": 1}, report=below)
    assert result["noisy"] == (50_000, 0) and result["quiet"] == (500, 0)
    # Overload on another server does not throttle requests to this one.
    throttle.observe_server("ps-2", 10**6, 10_000.0)
    result = run_load(throttle, clock, 100, {"noisy": 100, "quiet": 1})
    assert result["noisy"] == (10_000, 0)


def test_overload_starts_and_ends_with_the_reports_and_expires_without_them() -> None:
    throttle, clock = make(UNLIMITED)
    assert not throttle.is_overloaded("ps-1")
    throttle.observe_server("ps-1", UNLIMITED.overload_queue_ops_min, 1.0)
    assert throttle.is_overloaded("ps-1")
    throttle.observe_server("ps-1", 0, 1.0)
    assert not throttle.is_overloaded("ps-1")
    throttle.observe_server("ps-1", 0, UNLIMITED.overload_p99_ms_min)
    assert throttle.is_overloaded("ps-1")
    clock.advance(UNLIMITED.overload_report_ttl_ms / 1000)
    assert throttle.is_overloaded("ps-1")
    clock.advance(0.001)
    assert not throttle.is_overloaded("ps-1"), "a stale report must not throttle for ever"


def test_refusal_probability_rises_with_the_share() -> None:
    limits = FrontEndLimits()
    assert refusal_probability(0.0, limits) == 0.0
    assert refusal_probability(limits.throttle_share_min, limits) == 0.0
    shares = [0.2, 0.4, 0.6, 0.8, 1.0]
    probabilities = [refusal_probability(s, limits) for s in shares]
    assert probabilities == sorted(probabilities) and len(set(probabilities)) == len(shares)
    assert probabilities[-1] == limits.throttle_probability_max


def test_overload_retry_after_is_bounded_and_longer_for_a_heavier_talker() -> None:
    limits = dataclasses.replace(UNLIMITED, talker_sample_probability=1.0)
    retry_after: dict[str, list[float]] = defaultdict(list)
    throttle, clock = make(limits, 11)
    throttle.observe_server("ps-1", 10**6, 0.0)
    for _ in range(500):
        for account, n in (("heavy", 12), ("medium", 8), ("light", 1)):
            for _ in range(n):
                decision = throttle.admit(account, "ps-1", 0)
                if not decision.admitted:
                    retry_after[account].append(decision.retry_after_s)
        clock.advance(0.01)
    low, high = limits.overload_retry_after_ms_min / 1000, limits.overload_retry_after_ms_max / 1000
    assert retry_after["heavy"] and retry_after["medium"]
    assert all(low <= r <= high for rs in retry_after.values() for r in rs)
    assert min(retry_after["heavy"]) > max(retry_after["medium"])
    # "light" sends 1/21 of the requests: below throttle_share_min, never refused.
    assert retry_after["light"] == []


def test_memory_stays_bounded_with_many_accounts_and_servers() -> None:
    limits = dataclasses.replace(SMALL, accounts_tracked_max=100, talkers_held_max=8,
                                 servers_tracked_max=4, talker_sample_probability=0.2)
    throttle, clock = make(limits, 4)
    for i in range(20_000):
        # 100 accounts in 3 s: every bucket is full again before its account is evicted,
        # so every newcomer finds room.
        assert throttle.admit(f"acct-{i}", f"ps-{i % 10}", 10).admitted
        clock.advance(0.03)
        assert throttle.accounts_tracked() <= 100
        assert throttle.servers_tracked() <= 4
    assert all(len(throttle.talkers(f"ps-{i}")) <= 8 for i in range(10))


def test_a_bucket_that_is_not_full_is_not_evicted() -> None:
    limits = dataclasses.replace(SMALL, accounts_tracked_max=2)
    throttle, clock = make(limits)
    assert throttle.admit("a", "ps-1", 2000).admitted  # a's bytes are empty: full in 2 s
    assert throttle.admit("b", "ps-1", 0).admitted
    refused = throttle.admit("c", "ps-1", 0)
    assert refused == Decision(False, pytest.approx(2.0), Reason.ACCOUNTS_TRACKED)
    # Forgetting "a" now would hand it a fresh, full bucket: its limit would not hold.
    assert not throttle.admit("a", "ps-1", 2000).admitted
    clock.advance(refused.retry_after_s)
    assert throttle.admit("c", "ps-1", 0).admitted
    assert throttle.accounts_tracked() == 2


def test_bad_front_end_limits_are_a_clear_error() -> None:
    for change in ({"account_requests_per_s_max": 0}, {"talker_sample_probability": 0.0},
                   {"throttle_share_min": 1.0}, {"throttle_probability_max": 1.5},
                   {"overload_retry_after_ms_min": 3000}, {"accounts_tracked_max": 0}):
        with pytest.raises(InvalidArgument, match="front_end"):
            FrontEndLimits(**change)  # type: ignore[arg-type]


# The property: over every window between two admitted requests of an account, what it was
# admitted never exceeds rate × window + burst — with overload reports, several servers and
# a table small enough that accounts are evicted (or refused) on the way.
PROPERTY_LIMITS = dataclasses.replace(SMALL, accounts_tracked_max=3, talkers_held_max=2,
                                      talker_sample_probability=0.5)
operations = st.lists(
    st.tuples(st.floats(min_value=0.0, max_value=0.5),           # clock advance, s
              st.sampled_from(["a", "b", "c", "d", "e"]),        # account
              st.sampled_from(["ps-1", "ps-2"]),                 # server
              st.integers(min_value=0, max_value=2000),          # bytes
              st.sampled_from([None, (0, 0.0), (10**6, 0.0)])),  # a report before it
    max_size=150)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(operations, st.integers(min_value=0, max_value=2**32))
def test_admitted_per_account_never_exceeds_rate_times_window_plus_burst(
        ops: list[tuple[float, str, str, int, tuple[int, float] | None]], seed: int) -> None:
    throttle, clock = make(PROPERTY_LIMITS, seed)
    admitted: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for advance, account, server, nbytes, report in ops:
        clock.advance(advance)
        if report is not None:
            throttle.observe_server(server, *report)
        decision = throttle.admit(account, server, nbytes)
        if decision.admitted:
            admitted[account].append((clock.monotonic(), nbytes))
        else:
            assert decision.retry_after_s > 0
    # The floating-point clock may round a token's worth by ~1e-9; anything more is a bug.
    slack = 1e-6
    limits = PROPERTY_LIMITS
    for events in admitted.values():
        for i in range(len(events)):
            window_bytes = 0
            for j in range(i, len(events)):
                window_bytes += events[j][1]
                window_s = events[j][0] - events[i][0]
                requests = j - i + 1
                assert requests <= (limits.account_requests_per_s_max * window_s
                                    + limits.account_burst_requests_max + slack)
                assert window_bytes <= (limits.account_bytes_per_s_max * window_s
                                        + limits.account_burst_bytes_max + slack)


def test_a_refusal_for_overload_takes_no_tokens() -> None:
    # Every request sampled, and an account alone on a server is refused every time.
    limits = dataclasses.replace(SMALL, talker_sample_probability=1.0, throttle_share_min=0.0,
                                 throttle_probability_max=1.0)
    throttle, _ = make(limits)
    throttle.observe_server("ps-1", 10**6, 0.0)
    decisions = [throttle.admit("a", "ps-1", 100) for _ in range(50)]
    assert all(d.reason is Reason.SERVER_OVERLOAD for d in decisions)
    # Its buckets are untouched: the whole burst is still there for a server not overloaded.
    assert all(throttle.admit("a", "ps-2", 100).admitted for _ in range(20))
    assert throttle.admit("a", "ps-2", 0).reason is Reason.ACCOUNT_REQUESTS


def test_bytes_a_read_returned_are_charged_and_paid_back_at_the_rate() -> None:
    """Issue 28: reads, gets and peeks are charged by the bytes they return (only known after
    the answer): the bucket goes into debt, and the account's next request waits it out."""
    throttle, clock = make(SMALL)
    assert throttle.admit("a", "ps-1", 64).admitted
    throttle.charge("a", 1900)  # 64 + 1900 of a burst of 2000 taken: 36 left
    refused = throttle.admit("a", "ps-1", 64)
    assert refused == Decision(False, pytest.approx(0.028), Reason.ACCOUNT_BYTES)
    assert throttle.admit("b", "ps-1", 64).admitted  # another account's bucket is its own
    clock.advance(0.028)
    assert throttle.admit("a", "ps-1", 64).admitted
    throttle.charge("a", 10**9)  # a full bucket owed at most, whatever was returned
    assert throttle.admit("a", "ps-1", 0) == Decision(False, pytest.approx(2.0),
                                                      Reason.ACCOUNT_BYTES)
