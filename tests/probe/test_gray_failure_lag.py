"""A slow disk under a timeout it never reaches is sealed away all the same (issue 29; §2 "a
slow or frozen node is a failed one"). On a loaded stamp the per-replica timeout is 4 x a
p99 of 60 ms and up, so a disk that makes every journal write 200 ms late is never past it;
here every timeout is set to a second (the primary's on its replicas, the client's on the
primary) so that only the lag rule (replication.py: a replica far behind its peers on the
same appends, answer after answer) can find it. Under steady appenders the stream moves on to
a new extent within about a second, every acknowledged append reads back, and new extents
keep off the slow node. Before the lag rule the stream never moved on (the 10 s wait
failed), the slow replica holding every append to 200-400 ms."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from common.rpc import arm_remote, disarm_remote
from tests.support.steady_appends import GAP_BOUND_S, SLOW_DISK, start_steady
from tests.support.streams import assert_all_readable, client_for
from tests.support.waiting import wait_for
from tools.chaos.extents import acknowledged
from tools.local_stamp import LocalStamp

# serial: its bound is a timing; `make test` runs it alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

# Timeouts no +200 ms replica reaches: the primary's on each replica, its silence bound, and
# the client's on the primary.
UNREACHED_TIMEOUTS = {"replica_timeout_min_ms": 1000, "replica_timeout_max_ms": 1000,
                      "replica_silent_timeout_min_ms": 1000, "append_timeout_min_ms": 2000,
                      "append_deadline_ms": 2000}
ROLLOVERS_AFTER_SLOW = 4


@pytest.mark.parametrize("replica", [0, 1], ids=["primary", "secondary"])
def test_a_slow_disk_under_the_timeout_is_sealed_away_for_its_lag(
        stamp_factory: Callable[..., LocalStamp], replica: int) -> None:
    stamp = stamp_factory(extent_nodes=6, stream_managers=1, extent_node=UNREACHED_TIMEOUTS)

    async def scenario() -> None:
        client = client_for(stamp)
        stream, stop, acks, load = await start_steady(client, f"lagging-{replica}")
        slow = stream.extents[-1].addresses[replica]
        known = {e.extent_id for e in stream.extents}
        arm_remote(slow, SLOW_DISK)
        slowed_at = time.monotonic()
        try:
            async def moved_on() -> bool:
                return any(loc.extent_id not in known for loc, _ in acks.acked)
            await wait_for(moved_on, 10, f"the stream to seal {slow} (a slow disk) away")
            moved_at = min(t for (loc, _), t in zip(acks.acked, acks.at, strict=True)
                           if loc.extent_id not in known)
            for _ in range(ROLLOVERS_AFTER_SLOW):  # new extents keep off the slow node
                await stream.seal_last()
                await stream.ensure_open()
            await acknowledged(acks.acked, len(acks.acked) + 20)
            gap = acks.longest_gap(slowed_at, time.monotonic())
        finally:
            disarm_remote(slow)
        stop.set()
        await load
        assert not acks.errors, f"appends failed: {acks.errors[:3]}"
        print(f"slow disk under the timeout: sealed away after "
              f"{(moved_at - slowed_at) * 1000:.0f} ms, longest gap {gap * 1000:.0f} ms")
        assert moved_at - slowed_at <= GAP_BOUND_S, (
            f"the slow disk was sealed away only after {moved_at - slowed_at:.2f}s")
        assert gap <= GAP_BOUND_S, f"writers waited {gap:.2f}s with a slow disk"
        placed = [e for e in stream.extents if e.extent_id not in known]
        assert len(placed) > ROLLOVERS_AFTER_SLOW
        assert not [e.extent_id for e in placed if slow in e.addresses], (
            f"new extents placed on the slow node {slow}")
        await assert_all_readable(stream, acks.acked)
        await client.close()
    asyncio.run(scenario())
