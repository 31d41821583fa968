"""Deadlines that travel (common/deadline.py): pure logic."""

from __future__ import annotations

import pytest

from common import deadline
from common.errors import DeadlineExceeded
from common.proto import partition_pb2 as pb

NOW_S = 1_800_000_000.0


def taken_up(at_s: float, timeout_ms: int) -> pb.Request:
    """A request a front end took up at `at_s` by its clock."""
    request = pb.Request(timeout_ms=timeout_ms)
    deadline.stamp(request, at_s)
    return request


def test_a_front_end_sets_the_deadline_from_the_timeout_and_replaces_the_senders() -> None:
    request = pb.Request(timeout_ms=750, deadline_ms=1)
    deadline.stamp(request, NOW_S)
    assert request.deadline_ms == NOW_S * 1000 + 750
    assert deadline.remaining_s(request, NOW_S + 0.5) == pytest.approx(0.25)
    deadline.check(request, NOW_S + 0.75, "front end")
    with pytest.raises(DeadlineExceeded, match="front end: dropped"):
        deadline.check(request, NOW_S + 0.752, "front end")


def test_no_timeout_no_deadline_and_never_dropped() -> None:
    request = pb.Request(deadline_ms=1)
    deadline.stamp(request, NOW_S)
    assert request.deadline_ms == 0
    assert deadline.remaining_s(request, NOW_S) is None
    deadline.check(request, NOW_S + 1e6, "here")
    deadline.SenderClock("here").check(request, NOW_S + 1e6)


@pytest.mark.parametrize("skew_s", [-3600.0, -2.0, 0.0, 2.0, 3600.0])
def test_a_partition_server_judges_by_the_senders_clock_whatever_the_skew(
        skew_s: float) -> None:
    """The front end's clock is `skew_s` ahead of the partition server's; requests take
    2 ms to arrive, except a backlog held 5 s (a frozen server)."""
    sender = deadline.SenderClock("partition server")
    here_s = NOW_S
    for _ in range(100):  # a healthy stream: nothing dropped
        sender.check(taken_up(here_s + skew_s, 750), here_s + 0.002)
        here_s += 0.01
    held = [taken_up(here_s + skew_s + i * 0.01, 750) for i in range(10)]
    thawed_s = here_s + 5.0
    for request in held:
        with pytest.raises(DeadlineExceeded, match="passed 4"):
            sender.check(request, thawed_s)
    sender.check(taken_up(thawed_s + skew_s, 750), thawed_s + 0.002)  # fresh: taken
    # Late by less than its wait plus the slack: still wanted.
    sender.check(taken_up(thawed_s + skew_s, 750),
                 thawed_s + 0.75 + deadline.SLACK_MS / 1000 - 0.01)


@pytest.mark.parametrize("rate", [0.0005, -0.0005])
def test_the_offset_follows_a_clock_that_is_slewed(rate: float) -> None:
    """The sender's clock gains (or loses) 0.5 ms a second on ours for an hour: nothing is
    dropped."""
    sender = deadline.SenderClock("partition server")
    for second in range(3600):
        here_s = NOW_S + second
        sender.check(taken_up(here_s + second * rate, 750), here_s + 0.002)


def test_a_request_with_a_deadline_and_no_timeout_teaches_the_offset_nothing() -> None:
    """A front end's follow-up (CURP's SyncOp) carrying only an earlier request's deadline:
    taken as sent at that deadline, it taught an offset 790 ms off, and every later request
    of the stream with a shorter wait than that was dropped as late on arrival. It is
    judged by what the others taught, and teaches nothing."""
    sender = deadline.SenderClock("partition server")
    sender.check(pb.Request(deadline_ms=int((NOW_S + 0.8) * 1000)), NOW_S)  # nothing known
    sender.check(taken_up(NOW_S, 800), NOW_S + 0.002)
    sender.check(pb.Request(deadline_ms=int((NOW_S + 0.8) * 1000)), NOW_S + 0.01)
    for step in range(1, 50):  # fresh requests with a short wait, 2 ms on the way
        here_s = NOW_S + step * 0.01
        sender.check(taken_up(here_s, 200), here_s + 0.002)
    with pytest.raises(DeadlineExceeded, match="passed"):  # a follow-up past its deadline
        sender.check(pb.Request(deadline_ms=int(NOW_S * 1000)), NOW_S + 1.0)


def test_a_sender_is_skewed_past_a_bound_by_what_its_requests_teach() -> None:
    sender = deadline.SenderClock("partition server")
    assert not sender.skewed(10.0)  # nothing learnt
    sender.check(taken_up(NOW_S - 30.0, 800), NOW_S + 0.002)  # its clock 30 s behind
    assert sender.skewed(10.0) and not sender.skewed(60.0)
    close = deadline.SenderClock("partition server")
    close.check(taken_up(NOW_S + 1.0, 800), NOW_S + 0.002)
    assert not close.skewed(10.0)
