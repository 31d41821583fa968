"""Overload is queueing (frontend/throttle.py; issue 29): a partition server that is slow but
not queueing — a slow replica under its commit log — refuses no account that is alone on it,
while a server that queues refuses its top talker as before, alone or not, and a slow server
with another account's requests on it refuses the noisy one. Pure: a ManualClock and seeded
random sources."""

from __future__ import annotations

from tests.support.throttle import UNLIMITED, make, run_load

SLOW = (0, 10_000.0)  # a report: nothing queued, p99 far past the threshold
QUEUEING = (UNLIMITED.overload_queue_ops_min, 1.0)


def test_a_lone_account_on_a_slow_server_that_does_not_queue_is_not_refused() -> None:
    throttle, clock = make(UNLIMITED, 3)
    result = run_load(throttle, clock, 1000, {"alone": 8}, report=SLOW)
    assert throttle.is_overloaded("ps-1")
    assert result["alone"] == (8000, 0)


def test_a_lone_account_on_a_queueing_server_is_refused() -> None:
    throttle, clock = make(UNLIMITED, 3)
    offered, refused = run_load(throttle, clock, 1000, {"alone": 8}, report=QUEUEING)["alone"]
    assert refused / offered > 0.6


def test_another_account_on_the_slow_server_makes_the_noisy_one_refused_until_it_leaves(
        ) -> None:
    throttle, clock = make(UNLIMITED, 5)
    result = run_load(throttle, clock, 500, {"noisy": 50, "quiet": 1}, report=SLOW)
    offered, refused = result["noisy"]
    assert refused / offered > 0.6 and result["quiet"][1] == 0
    # The quiet account gone for longer than the window: the noisy one is alone again.
    clock.advance(UNLIMITED.overload_alone_window_ms / 1000)
    result = run_load(throttle, clock, 500, {"noisy": 50}, report=SLOW)
    assert result["noisy"] == (25_000, 0)
