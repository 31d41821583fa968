"""Fault points above the extent node's append path that no other test arms, each armed to
prove what it guards (issue 15):

- `ps.checkpoint.before_meta`: a partition server dies with a checkpoint's run written but
  not yet in the metadata stream; the next owner replays the commit log and loses nothing
  that was acknowledged.
- `lock.before_propose`: the lock service's leader dies between taking a request and
  proposing it; the clients go on against the new leader and the history stays
  linearizable.
- `en.fragment.write`: a fragment write fails on one node during erasure coding; the
  conversion fails loudly, leaves no partial fragment and the extent sealed and readable, and
  a rerun completes it.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Callable

import pytest

from common import process
from common.rpc import arm_remote
from lock_service.client import LockClient
from lock_service.group import LocalLockGroup
from partition_layer.client import AsyncPartitionClient, PartitionClient
from stream_layer.ec.convert import convert_extent
from tests.support.erasure import check_reads, sealed_extent
from tests.support.locks import PROGRESS_TIMEOUT_S, CasWorkload, converged
from tests.support.stamps import log_of, owner_of, partition_stamp
from tests.support.streams import client_for
from tests.support.waiting import wait_until
from tools.chaos.extents import check_logs
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

StampFactory = Callable[..., LocalStamp]


async def padded_append_load(client: AsyncPartitionClient, writers: int, stop: asyncio.Event,
                             acked: list[tuple[str, int, bytes]]) -> None:
    """Like test_partition_failover's append_load, with 2 KB records, so a small memtable
    fills (and checkpoints) every few dozen appends."""

    async def writer(index: int) -> None:
        n = 0
        while not stop.is_set():
            log, record = f"log-{index % 4}", f"w{index}-{n}|".encode().ljust(2000, b".")
            seq = await client.append("acct", log, [record])
            acked.append((log, seq, record))
            n += 1
    await asyncio.gather(*(writer(i) for i in range(writers)))


def test_ps_crash_between_checkpoint_run_and_metadata_loses_nothing(
        stamp_factory: StampFactory) -> None:
    """The owner writes a checkpoint's run to the row stream, then dies before the record
    that names it reaches the metadata stream. The run is unreferenced; the new owner starts
    from the previous record's replay point, so the commit log still holds everything the
    frozen memtable held: every acknowledged record is read back at its sequence number,
    and the new owner's own checkpoints (no fault armed there) carry on."""
    stamp = partition_stamp(stamp_factory, memtable_bytes_max=128 * 1024)
    point = "ps.checkpoint.before_meta"
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        victim = owner_of(stamp, pc)
        survivor = next(r.name for r in stamp.partition_servers() if r.name != victim)
        victim_dir = stamp.record(victim).dir
        arm_remote(stamp.address(victim), f"{point}=crash")
        acked: list[tuple[str, int, bytes]] = []

        async def scenario() -> None:
            stop = asyncio.Event()
            load = asyncio.ensure_future(padded_append_load(pc.aio, 8, stop, acked))
            deadline = time.monotonic() + 60
            while stamp.alive(victim):  # its first checkpoint kills it
                assert time.monotonic() < deadline, "the owner never checkpointed"
                assert not load.done(), "the load stopped"
                await asyncio.sleep(0.02)
            crashed_at = len(acked)
            while len(acked) < crashed_at + 300:  # well past another memtable's worth
                assert time.monotonic() < deadline + 60, "appends did not resume"
                assert not load.done(), "the load stopped"
                await asyncio.sleep(0.02)
            stop.set()
            await load
        pc.run(scenario())
        stamp.kill(victim)  # reaps it
        assert f"fault point {point}: crashing" in log_of(victim_dir), "died of something else"
        assert owner_of(stamp, pc) == survivor
        check_logs(pc, acked)
        assert "checkpoint 1 at lsn" in log_of(stamp.record(survivor).dir)


def test_lock_leader_crash_before_proposing_keeps_the_history_linearizable(
        lock_group: LocalLockGroup, make_client: Callable[[str], LockClient]) -> None:
    """Compare-and-set clients run while the leader dies after taking a request, before
    handing it to Raft: the request was never proposed, the clients find the new leader, and
    every read and write they saw fits one linear order; the restarted replica agrees."""
    point = "lock.before_propose"
    probe = make_client("probe")
    workload = CasWorkload(make_client)
    try:
        workload.wait_for_more(50, "operations before the fault")
        leader = lock_group.replicas[lock_group.leader(probe)]
        arm_remote(leader.address, f"{point}=crash,after=10")
        wait_until(lambda: not process.is_alive(leader.pid or 0), PROGRESS_TIMEOUT_S,
                   "the leader to crash there")
        lock_group.kill(leader.name)  # reap it
        workload.wait_for_more(50, "operations under the new leader")
        lock_group.start(leader.name)
        workload.wait_for_more(50, "operations after its restart")
    finally:
        writes = workload.stop_and_check()
    assert writes >= 20
    assert f"fault point {point}: crashing" in log_of(leader.dir), "it died of something else"
    wait_until(lambda: converged(lock_group, probe), PROGRESS_TIMEOUT_S,
               "the three replicas to apply the same log")


def test_failed_fragment_write_fails_the_conversion_and_leaves_no_fragment(
        stamp_factory: StampFactory, rng: random.Random) -> None:
    """One node refuses a fragment chunk (en.fragment.write=fail): the conversion raises, the
    node keeps no partial fragment of the extent, the extent stays sealed with its replicas
    and reads back whole; the rerun codes it and the coded reads are exact."""
    stamp = stamp_factory(5, 3)  # RS(3,2): a fragment on every node
    point = "en.fragment.write"

    async def scenario() -> None:
        client = client_for(stamp)
        stream, acked = await sealed_extent(client, rng, blocks=40)
        extent_id = acked[0][0].extent_id
        refusing = stamp.extent_nodes()[3]
        arm_remote(refusing.address, f"{point}=fail,times=1")
        with pytest.raises(Exception, match=re.escape(f"fault injected at {point}")):
            await convert_extent(client.sm, client.extents, extent_id, k=3, m=2)
        assert f"fault point {point} fired: fail" in log_of(refusing.dir)
        held = await client.extents.list_fragments(refusing.address)
        assert [f for f in held if f[0] == extent_id] == [], "a partial fragment was kept"
        info = await client.sm.get_extent(extent_id)
        assert info.state == "sealed" and len(info.replicas) == 3
        assert [(loc, data) async for loc, data in stream.blocks()] == acked

        info = await convert_extent(client.sm, client.extents, extent_id, k=3, m=2)
        assert info.state == "erasure_coded" and not info.replicas
        await check_reads(stream, acked, rng)
        await client.close()
    asyncio.run(scenario())
