"""The SDK under faults (issue 16): 32 writers append through one asyncio client while a
front end and then a partition server are SIGKILLed; a subscriber follows one of the logs
through a blocking client. A checker, not hope: every acknowledged append reads back once, at
its sequence number, each writer's records in the order it wrote them, no record twice; the
subscriber saw its log exactly as it reads back."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from stampsdk import Client, aio
from stampsdk.errors import StampError

from common.clock import SystemClock
from frontend.accounts import AccountStore
from lock_service.client import LockClient
from partition_layer.client import PartitionClient
from partition_layer.requests import route_key
from tests.support.waiting import wait_until
from tools.chaos.extents import read_whole_log
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

WRITERS = 32
LOGS = 8
FOLLOWED = "load-0"
# Each phase waits for this many more acknowledged appends: the load goes on across a kill.
PHASE_APPENDS = 150
TIMEOUT_S = 90.0


def partition_server_of(stamp: LocalStamp, log: str) -> str:
    """The partition server the partition map names for `log` of the account."""
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        current, _ = pc.partition_map()
    return current.lookup(route_key("load", log)).server


def test_writers_and_a_subscriber_across_front_end_and_partition_server_kills(
        stamp_factory: Callable[..., LocalStamp]) -> None:
    stamp = stamp_factory(3, 1, lock_servers=3, partition_managers=1, partition_servers=2,
                          front_ends=2)
    with LockClient.from_stamp(stamp.data_dir, holder="test-sdk") as locks:
        account = AccountStore(locks, SystemClock()).create("load")
    endpoints = [stamp.address(n) for n in ("fe-1", "fe-2")]
    acked: list[tuple[str, int, bytes]] = []
    failed: list[tuple[str, bytes, StampError]] = []
    stop = threading.Event()

    async def load() -> None:
        c = aio.Client(endpoints, "load", key=account.keys[0], timeout_s=TIMEOUT_S)

        async def writer(index: int) -> None:
            log, number = f"load-{index % LOGS}", 0
            while not stop.is_set():
                record = f"w{index}-n{number}".encode()
                number += 1
                try:
                    acked.append((log, await c.append(log, [record]), record))
                except StampError as exc:
                    failed.append((log, record, exc))
        try:
            await asyncio.gather(*(writer(i) for i in range(WRITERS)))
        finally:
            await c.close()

    followed: list[tuple[int, bytes]] = []
    follower_error: list[BaseException] = []

    def follow() -> None:
        try:
            with Client(endpoints, "load", key=account.keys[0], timeout_s=TIMEOUT_S) as c:
                followed.extend(c.subscribe(FOLLOWED, 0))
        except BaseException as exc:  # reported by the test thread
            follower_error.append(exc)

    writers = threading.Thread(target=lambda: asyncio.run(load()), daemon=True)
    follower = threading.Thread(target=follow, daemon=True)
    writers.start()
    follower.start()
    try:
        wait_until(lambda: len(acked) >= PHASE_APPENDS, 120, "appends before the kills")
        stamp.kill("fe-1")
        mark = len(acked)
        wait_until(lambda: len(acked) >= mark + PHASE_APPENDS, 120, "appends after fe-1 died")
        owner = partition_server_of(stamp, FOLLOWED)
        stamp.kill(owner)
        mark = len(acked)
        wait_until(lambda: len(acked) >= mark + PHASE_APPENDS, 180, f"appends after {owner} "
                   f"died")
        assert partition_server_of(stamp, FOLLOWED) != owner  # the partition moved
    finally:
        stop.set()
        writers.join(timeout=TIMEOUT_S + 30)
    assert not writers.is_alive()
    assert not failed, failed[:5]  # the SDK's retries rode out both kills
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        with Client([stamp.address("fe-2")], "load", key=account.keys[0]) as c:
            c.seal(FOLLOWED)
        follower.join(timeout=TIMEOUT_S + 30)
        assert not follower.is_alive() and not follower_error, follower_error
        for log in sorted({log for log, _, _ in acked}):
            records = read_whole_log(pc, "load", log)  # asserts no gap below next_seq
            at = dict(records)
            datas = [d for _, d in records]
            assert len(datas) == len(set(datas)), f"{log}: a record appended twice"
            for _, seq, record in (a for a in acked if a[0] == log):
                assert at.get(seq) == record, f"{log}: acknowledged {record!r} not at {seq}"
            last: dict[str, int] = {}
            for data in datas:  # each writer's records in the order it wrote them
                writer, number = data.decode().split("-n")
                assert int(number) > last.get(writer, -1), f"{log}: {data!r} out of order"
                last[writer] = int(number)
            if log == FOLLOWED:
                assert followed == records  # the subscriber: every record once, in order
    assert len(acked) >= 3 * PHASE_APPENDS
