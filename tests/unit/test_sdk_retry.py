"""The SDK's retry policy and endpoint rotation (stampsdk/retry.py), on an injected clock and
seeded randomness; and that it is the policy of the stamp's own clients (common/retry.py:
one policy, two copies, since the SDK shares no code with the server)."""

from __future__ import annotations

import random

import pytest
from stampsdk import errors as sdk_errors
from stampsdk.errors import (
    ChecksumError,
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    NotOwner,
    PermissionDenied,
    PreconditionFailed,
    Sealed,
    StampError,
    Throttled,
    Trimmed,
    Unauthenticated,
    Unavailable,
)
from stampsdk.retry import (
    AttemptTimer,
    Endpoints,
    RetryPolicy,
    endpoint_failed,
    retryable,
)

from common import errors as server_errors
from common import retry as server_retry
from common.clock import ManualClock


@pytest.mark.parametrize("error", [Unavailable("x"), NotOwner("x"), Throttled("x", 0.1)])
def test_transient_errors_are_retried_with_or_without_idempotence(error: StampError) -> None:
    assert retryable(error, idempotent=True)
    assert retryable(error, idempotent=False)


def test_a_deadline_is_retried_only_for_an_idempotent_call() -> None:
    assert retryable(DeadlineExceeded("x"), idempotent=True)
    assert not retryable(DeadlineExceeded("x"), idempotent=False)


@pytest.mark.parametrize("error", [
    InvalidArgument("x"), Unauthenticated("x"), PermissionDenied("x"), PreconditionFailed("x"),
    NotFound("x"), Sealed("x"), Trimmed("x"), ChecksumError("x"), StampError("x")])
def test_final_errors_are_never_retried(error: StampError) -> None:
    assert RetryPolicy().delay(error, 0, True, random.Random(1)) is None


def test_backoff_grows_exponentially_with_jitter_up_to_the_cap() -> None:
    policy = RetryPolicy(backoff_min_s=0.01, backoff_max_s=0.5)
    rng = random.Random(7)
    for attempt in range(12):
        step = min(0.5, 0.01 * 2 ** attempt)
        delays = [policy.delay(Unavailable("x"), attempt, True, rng) for _ in range(50)]
        assert all(d is not None and step / 2 <= d <= step for d in delays)
        assert len(set(delays)) > 1  # jittered, not one fixed value
    huge = policy.delay(Unavailable("x"), 10_000, True, rng)
    assert huge is not None and huge <= 0.5


def test_throttled_waits_at_least_its_retry_after_but_not_forever() -> None:
    policy = RetryPolicy(backoff_min_s=0.01, backoff_max_s=0.5, retry_after_max_s=5.0)
    rng = random.Random(3)
    assert policy.delay(Throttled("x", retry_after_s=2.0), 0, True, rng) == 2.0
    assert policy.delay(Throttled("x", retry_after_s=3600.0), 0, True, rng) == 5.0
    small = policy.delay(Throttled("x", retry_after_s=0.0), 3, True, rng)
    assert small is not None and 0.04 <= small <= 0.08


def test_only_a_failing_front_end_is_avoided() -> None:
    assert endpoint_failed(Unavailable("x"))
    assert endpoint_failed(DeadlineExceeded("x"))
    assert not endpoint_failed(NotOwner("x"))  # the partition moved, not the front end
    assert not endpoint_failed(Throttled("x"))
    assert not endpoint_failed(InvalidArgument("x"))


def test_endpoints_rotate_past_a_failed_one_and_return_after_the_avoid_time() -> None:
    clock = ManualClock()
    endpoints = Endpoints(["a:1", "b:2", "c:3"], clock, random.Random(0), avoid_s=5.0)
    first = endpoints.pick()
    assert endpoints.pick() == first  # sticky while it works
    endpoints.failed(first)
    second = endpoints.pick()
    assert second != first
    endpoints.failed(second)
    third = endpoints.pick()
    assert third not in (first, second)
    endpoints.failed(third)
    # All avoided: the one whose avoidance ends first is tried anyway.
    assert endpoints.pick() == first
    clock.advance(5.0)
    assert endpoints.pick() in (first, second, third)
    endpoints.answered(second)
    assert endpoints.pick() != third


def test_clients_start_on_different_front_ends() -> None:
    clock = ManualClock()
    firsts = {Endpoints(["a:1", "b:2", "c:3"], clock, random.Random(seed)).pick()
              for seed in range(30)}
    assert firsts == {"a:1", "b:2", "c:3"}


def test_picking_reads_no_clock_while_no_endpoint_failed() -> None:
    """`pick` runs once per call: while nothing failed it is the first of the rotation,
    without reading the clock or building the rotation."""
    clock = ManualClock(0.0)
    reads: list[float] = []
    monotonic = clock.monotonic
    clock.monotonic = lambda: reads.append(monotonic()) or reads[-1]  # type: ignore[method-assign]
    endpoints = Endpoints(["a:1", "b:2"], clock, random.Random(3))
    first = endpoints.pick()
    assert endpoints.pick() == first and reads == []
    endpoints.failed(first)
    assert endpoints.pick() != first and reads
    endpoints.answered(first)
    assert endpoints.pick() != first  # the rotation moved past it


def test_a_first_attempt_is_short_and_each_next_one_twice_as_long_up_to_the_cap() -> None:
    timer = AttemptTimer(first_s=0.75, max_s=10.0)
    assert [timer.timeout_s(n) for n in range(6)] == [0.75, 1.5, 3.0, 6.0, 10.0, 10.0]
    # A big request gets time to be sent on top: 4 MiB at 8 MB/s.
    assert timer.timeout_s(0, 4_000_000) == pytest.approx(0.75 + 0.5)


def test_a_slow_stamp_lengthens_the_first_attempt_so_retries_do_not_flood_it() -> None:
    timer = AttemptTimer(first_s=0.75, max_s=10.0, p99_factor=3.0)
    for _ in range(256):
        timer.observe(0.001)
    assert timer.timeout_s(0) == 0.75  # a fast stamp: the floor
    for _ in range(256):
        timer.observe(0.5)  # calls now take half a second
    assert timer.timeout_s(0) == pytest.approx(1.5)
    assert timer.timeout_s(5) == 10.0


@pytest.mark.parametrize("name", ["Unavailable", "NotOwner", "Throttled", "DeadlineExceeded",
                                  "NotFound", "PreconditionFailed", "InvalidArgument"])
def test_the_sdk_retries_as_the_stamps_own_clients_do(name: str) -> None:
    sdk_error = getattr(sdk_errors, name)("x")
    server_error = getattr(server_errors, name)("x")
    for attempt in range(8):
        for idempotent in (True, False):
            assert RetryPolicy().delay(sdk_error, attempt, idempotent, random.Random(
                attempt)) == server_retry.RetryPolicy().delay(
                server_error, attempt, idempotent, random.Random(attempt))
    sdk_timer, server_timer = AttemptTimer(), server_retry.AttemptTimer()
    for latency in (0.01, 0.5, 2.0) * 40:
        sdk_timer.observe(latency)
        server_timer.observe(latency)
    assert [sdk_timer.timeout_s(a, 1 << 20) for a in range(6)] == \
        [server_timer.timeout_s(a, 1 << 20) for a in range(6)]
