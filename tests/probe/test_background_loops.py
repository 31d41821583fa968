"""Background loops outlive an unexpected exception (issue 29, common/background.py): a fault
point armed with `bug` raises a RuntimeError (no Stamp error) once inside the extent node's
heartbeat and inside the stream manager's node monitor, on a real stamp; the loop goes on
(heartbeats reach the leader again, monitor passes run again). Before the one helper, each
loop caught only Stamp errors and ended for good."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator

import pytest

from common.rpc import arm_remote
from tests.conftest import module_stamp
from tests.support.stamps import log_of
from tests.support.streams import client_for
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

# Heartbeats go every second (StreamManagerLimits.heartbeat_interval_ms) and monitor passes
# every 0.5 s: a loop that still runs shows it within a few of them, even on a loaded machine.
DEADLINE_S = 15.0


@pytest.fixture(scope="module")
def stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    with module_stamp(tmp_path_factory, "loops", extent_nodes=3, stream_managers=1,
                      faults=True) as local:
        yield local


def wait_until_fired(stamp: LocalStamp, name: str, point: str, times: int = 1) -> float:
    """Wait until `point` fired `times` times in `name`'s log; the local time it was seen."""
    pattern = re.compile(rf"fault point {re.escape(point)} fired")
    deadline = time.monotonic() + DEADLINE_S
    while len(pattern.findall(log_of(stamp.record(name).dir))) < times:
        assert time.monotonic() < deadline, f"{point} did not fire {times}x in {name}"
        time.sleep(0.05)
    return time.monotonic()


def test_the_extent_node_heartbeat_survives_an_unexpected_exception(
        stamp: LocalStamp) -> None:
    arm_remote(stamp.address("en-1"), "en.heartbeat=bug,times=1")
    fired_at = wait_until_fired(stamp, "en-1", "en.heartbeat")

    async def heard_since_the_fault() -> float:
        client = client_for(stamp)
        try:
            silent_s = float("inf")
            while time.monotonic() < fired_at + DEADLINE_S:
                nodes = {n.name: n for n in await client.sm.list_nodes()}
                silent_s = nodes["en-1"].silent_s
                # Last heard at (now - silent_s) on this clock, give or take the RPC's time.
                if time.monotonic() - silent_s > fired_at:
                    return silent_s
                await asyncio.sleep(0.1)
            raise AssertionError(f"en-1 not heard since its heartbeat raised: silent for "
                                 f"{silent_s:.1f}s")
        finally:
            await client.close()

    asyncio.run(heard_since_the_fault())


def test_the_stream_manager_monitor_survives_unexpected_exceptions(
        stamp: LocalStamp) -> None:
    """Three passes in a row raise; the fourth runs whole (the helper says it works again)."""
    arm_remote(stamp.address("sm-1"), "sm.monitor=bug,times=3")
    wait_until_fired(stamp, "sm-1", "sm.monitor", times=3)
    deadline = time.monotonic() + DEADLINE_S
    while "monitor pass works again after 3 failures" not in log_of(stamp.record("sm-1").dir):
        assert time.monotonic() < deadline, "the monitor ran no pass after its exceptions"
        time.sleep(0.05)
