"""Deadlines that travel with a request (issue 29): work nobody waits for is not done.

The SDK puts each attempt's wait in the request (`Request.timeout_ms`, signed with the rest).
A front end turns it into a wall-clock deadline (`deadline_ms`, ms since the epoch by its
clock) as it takes the request (`stamp`), and forwards that. Whoever takes the request up
later drops it if the deadline has passed (`expired`), answering DeadlineExceeded having done
nothing of it: the caller gave up on this attempt (and may already be retrying it elsewhere,
with the same token), so its answer would be read by no one. The case this is for: a partition
server or front end frozen, or a stream stalled, with requests piling up in its socket; once
thawed it would otherwise spend seconds doing work every caller abandoned.

Dropping is always safe: an attempt that timed out is, to its caller, one that may or may
not have run, and a request dropped here did not run. It is a matter of liveness only, and
so is the one assumption: the stamp's clocks agree within CLOCK_SKEW_MS (`expired` at a
partition server allows that much; a front end checks the deadline it set by its own clock
with no slack). A request without a timeout (operators' tools, internal callers) has no
deadline.
"""

from __future__ import annotations

from common.errors import DeadlineExceeded
from common.proto import partition_pb2 as pb

# How far apart two processes' clocks may be: a process checking a deadline another process
# set by its own clock drops the request only this long after it.
CLOCK_SKEW_MS = 500


def stamp(request: pb.Request, now_s: float) -> None:
    """At a front end, as it takes `request` at wall-clock time `now_s`: its deadline from the
    SDK's timeout (none without one). Whatever the sender put in `deadline_ms` is replaced:
    it is the front end's to set."""
    request.deadline_ms = int(now_s * 1000) + request.timeout_ms if request.timeout_ms else 0


def remaining_s(request: pb.Request, now_s: float) -> float | None:
    """Seconds left until `request`'s deadline (negative once passed); None: no deadline."""
    if not request.deadline_ms:
        return None
    return request.deadline_ms / 1000 - now_s


def expired(request: pb.Request, now_s: float, slack_ms: int = CLOCK_SKEW_MS) -> bool:
    """Whether `request`'s deadline passed more than `slack_ms` before wall-clock `now_s`."""
    return bool(request.deadline_ms) and int(now_s * 1000) > request.deadline_ms + slack_ms


def check(request: pb.Request, now_s: float, where: str, slack_ms: int = CLOCK_SKEW_MS
          ) -> None:
    """DeadlineExceeded if `request` `expired`: its caller gave up before `where` took it."""
    if expired(request, now_s, slack_ms):
        late_ms = int(now_s * 1000) - request.deadline_ms
        raise DeadlineExceeded(f"{where}: dropped, its caller's deadline passed {late_ms} ms "
                               "ago")
