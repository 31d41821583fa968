"""Deadlines that travel (common/deadline.py): pure logic."""

from __future__ import annotations

import pytest

from common import deadline
from common.errors import DeadlineExceeded
from common.proto import partition_pb2 as pb

NOW_S = 1_800_000_000.0


def test_a_front_end_sets_the_deadline_from_the_timeout_and_replaces_the_senders() -> None:
    request = pb.Request(timeout_ms=750, deadline_ms=1)
    deadline.stamp(request, NOW_S)
    assert request.deadline_ms == NOW_S * 1000 + 750
    assert deadline.remaining_s(request, NOW_S + 0.5) == pytest.approx(0.25)


def test_no_timeout_no_deadline_and_never_expired() -> None:
    request = pb.Request(deadline_ms=1)
    deadline.stamp(request, NOW_S)
    assert request.deadline_ms == 0
    assert deadline.remaining_s(request, NOW_S) is None
    assert not deadline.expired(request, NOW_S + 1e6)
    deadline.check(request, NOW_S + 1e6, "here")  # does not raise


def test_expired_allows_the_clock_skew_unless_told_otherwise() -> None:
    request = pb.Request(deadline_ms=int(NOW_S * 1000))
    within = NOW_S + deadline.CLOCK_SKEW_MS / 1000
    assert not deadline.expired(request, within)
    assert deadline.expired(request, within + 0.002)
    assert deadline.expired(request, NOW_S + 0.002, slack_ms=0)
    with pytest.raises(DeadlineExceeded, match="partition server: dropped"):
        deadline.check(request, NOW_S + 2, "partition server")
