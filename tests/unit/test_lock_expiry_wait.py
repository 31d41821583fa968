"""The lock service's expiry pass sleeps until the next lease is due (lock_service/server.py
`expiry_wait`, issue 29), within bounds that keep expiries prompt."""

from __future__ import annotations

import pytest

from lock_service import limits
from lock_service.server import EXPIRY_CHECK_MAX_S, EXPIRY_CHECK_MIN_S, expiry_wait


def test_sleeps_until_the_next_expiry() -> None:
    assert expiry_wait(100.0, 100.05) == pytest.approx(0.05)


def test_no_lease_or_a_far_one_waits_the_longest_wait() -> None:
    assert expiry_wait(100.0, None) == EXPIRY_CHECK_MAX_S
    assert expiry_wait(100.0, 160.0) == EXPIRY_CHECK_MAX_S


def test_a_due_or_overdue_lease_is_looked_at_again_soon_not_in_a_busy_loop() -> None:
    assert expiry_wait(100.0, 99.0) == EXPIRY_CHECK_MIN_S
    assert expiry_wait(100.0, 100.001) == EXPIRY_CHECK_MIN_S


def test_a_lease_granted_during_the_longest_wait_is_not_due_before_the_next_pass() -> None:
    assert EXPIRY_CHECK_MAX_S < limits.TTL_MIN_S
