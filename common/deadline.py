"""Deadlines that travel with a request (issue 29): work nobody waits for is not done.

The SDK puts each attempt's wait in the request (`Request.timeout_ms`, signed with the rest).
A front end turns it into a deadline by its own wall clock as it takes the request
(`deadline_ms`, ms since the epoch; `stamp`), stops retrying once that passes (`check` with
no slack: its own clock), and forwards both fields. A partition server drops a request it
takes up after the deadline, answering DeadlineExceeded having done nothing of it: the caller
gave up on this attempt (and may already be retrying it elsewhere, with the same token), so
its answer would be read by no one. The case this is for: a partition server frozen, or a
stream stalled, with requests piling up in its socket; once thawed it would otherwise spend
seconds doing work every caller abandoned.

Dropping is always safe: an attempt that timed out is, to its caller, one that may or may not
have run, and a request dropped here did not run. It is a matter of liveness only. So that it
needs no agreement between clocks, a partition server judges a front end's deadlines by that
front end's clock, as seen on the stream they share (`SenderClock`): it learns the offset
between the two clocks from the requests themselves (when each was taken up by the front end,
`deadline_ms - timeout_ms`, against when it arrives here; the smallest gap is the offset plus
the least delay), so a request is late by how much longer it took than the fastest one did.
A front end judges the SDK's timeouts the same way, by the SDK's clock, on each Call stream:
the signature's timestamp is when the SDK sent the attempt (a frozen front end's backlog is
dropped as it thaws). A request without a timeout (operators' tools, internal callers) has no
deadline.
"""

from __future__ import annotations

from common.errors import DeadlineExceeded
from common.proto import partition_pb2 as pb

# A request judged by another process's clock is dropped only this long past its deadline:
# the offset's estimate is off by the scheduling noise of the fastest request.
SLACK_MS = 100
# The offset is the smallest gap seen over the last two windows of this length: it follows
# a clock that is slewed (NTP moves one by at most 0.5 ms a second) without forgetting the
# gap before a freeze of up to one window.
OFFSET_WINDOW_S = 30.0


def stamp(request: pb.Request, now_s: float) -> None:
    """At a front end, as it takes `request` at wall-clock time `now_s`: its deadline from the
    SDK's timeout (none without one). Whatever the sender put in `deadline_ms` is replaced:
    it is the front end's to set."""
    request.deadline_ms = int(now_s * 1000) + request.timeout_ms if request.timeout_ms else 0


def remaining_s(request: pb.Request, now_s: float) -> float | None:
    """Seconds left until `request`'s deadline by the clock that set it (negative once
    passed); None: no deadline."""
    if not request.deadline_ms:
        return None
    return request.deadline_ms / 1000 - now_s


def check(request: pb.Request, now_s: float, where: str) -> None:
    """DeadlineExceeded if the deadline of `request`, set by this process's own clock (now
    `now_s`), has passed: its caller gave up before `where` took it up."""
    left_s = remaining_s(request, now_s)
    if left_s is not None and left_s < 0:
        raise DeadlineExceeded(f"{where}: dropped, its caller's deadline passed "
                               f"{int(-left_s * 1000)} ms ago")


class SenderClock:
    """Judges the deadlines one sender (a front end, on one stream) set by its own clock.

    `check(request, now_s)` learns from every request with a deadline and raises
    DeadlineExceeded for one taken up more than SLACK_MS after its deadline, in the sender's
    time: the offset between the clocks is estimated as the smallest gap between a request's
    being taken up there and here over the last two OFFSET_WINDOW_S windows (module doc)."""

    def __init__(self, where: str) -> None:
        self.where = where
        self._window_ends_s = 0.0
        self._gap_ms: int | None = None  # smallest gap in the current window
        self._previous_gap_ms: int | None = None  # and in the one before

    def check(self, request: pb.Request, now_s: float) -> None:
        """For a request whose deadline a front end set (`stamp`). One with a deadline and
        no timeout (a front end's own follow-up of an earlier request, such as CURP's
        SyncOp) cannot say when it was taken up: it is judged by what the others taught,
        and teaches nothing (taken as sent at its deadline, it would make every later
        request look late by a whole timeout)."""
        if not request.deadline_ms:
            return
        if request.timeout_ms:
            self.check_times(request.deadline_ms - request.timeout_ms, request.deadline_ms,
                             now_s)
        elif self._gap_ms is not None or self._previous_gap_ms is not None:
            self._judge(self._offset_ms(), request.deadline_ms, now_s)

    def check_times(self, sent_ms: int, deadline_ms: int, now_s: float) -> None:
        """For a request the sender took up at `sent_ms` with a deadline at `deadline_ms`,
        both by its clock, taken up here at `now_s`."""
        self._judge(self._learn(sent_ms, now_s), deadline_ms, now_s)

    def skewed(self, bound_s: float) -> bool:
        """Whether the sender's clock is off this one's by more than `bound_s`, as far as
        the requests so far tell (the offset, network delay included; none learnt: no)."""
        if self._gap_ms is None and self._previous_gap_ms is None:
            return False
        return abs(self._offset_ms()) > bound_s * 1000

    def _judge(self, offset_ms: int, deadline_ms: int, now_s: float) -> None:
        late_ms = int(now_s * 1000) - offset_ms - deadline_ms
        if late_ms > SLACK_MS:
            raise DeadlineExceeded(f"{self.where}: dropped, its caller's deadline passed "
                                   f"{late_ms} ms ago")

    def _learn(self, sent_ms: int, now_s: float) -> int:
        if now_s >= self._window_ends_s:
            self._previous_gap_ms, self._gap_ms = self._gap_ms, None
            if now_s >= self._window_ends_s + OFFSET_WINDOW_S:
                self._previous_gap_ms = None  # two windows with nothing: forget it all
            self._window_ends_s = now_s + OFFSET_WINDOW_S
        gap_ms = int(now_s * 1000) - sent_ms
        if self._gap_ms is None or gap_ms < self._gap_ms:
            self._gap_ms = gap_ms
        return self._offset_ms()

    def _offset_ms(self) -> int:
        """The smallest gap of the two windows (at least one seen)."""
        gaps = [g for g in (self._gap_ms, self._previous_gap_ms) if g is not None]
        return min(gaps)
