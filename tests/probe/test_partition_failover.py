"""The partition layer under faults (issue 6): kill -9 a partition server under load, kill
the PM leader, freeze a deposed owner mid-commit, reload a large checkpointed partition."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from common import rpc
from common.errors import NotOwner
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from partition_layer.client import PartitionClient
from partition_layer.payload_crc import payload_crcs
from partition_layer.session import CallSession
from tests.support.partitions import aserving
from tests.support.stamps import StampFactory, log_says, owner_of, partition_stamp
from tests.support.waiting import wait_until
from tools.chaos.extents import append_load, check_logs
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow



def serving(stamp: LocalStamp, name: str, partition_id: int = 1) -> bool:
    return asyncio.run(aserving(stamp, name, partition_id))


def test_kill_ps_during_append_load(stamp_factory: StampFactory) -> None:
    stamp = partition_stamp(stamp_factory)
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        victim = owner_of(stamp, pc)
        survivor = next(r.name for r in stamp.partition_servers() if r.name != victim)
        acked: list[tuple[str, int, bytes]] = []

        async def scenario() -> None:
            stop = asyncio.Event()
            load = asyncio.ensure_future(append_load(pc.aio, 32, stop, acked))
            while len(acked) < 300:
                await asyncio.sleep(0.01)
            stamp.kill(victim)
            killed_at = len(acked)
            deadline = time.monotonic() + 30
            while len(acked) < killed_at + 300:  # appends go on at the new owner
                assert time.monotonic() < deadline, "appends did not resume after the kill"
                await asyncio.sleep(0.01)
            stop.set()
            await load
        pc.run(scenario())
        assert owner_of(stamp, pc) == survivor
        check_logs(pc, acked)


def test_kill_pm_leader_then_a_ps(stamp_factory: StampFactory) -> None:
    stamp = partition_stamp(stamp_factory)

    def leader() -> str | None:
        async def ask() -> str | None:
            for rec in stamp.partition_managers():
                if not stamp.alive(rec.name):
                    continue
                stub = pb_grpc.PartitionManagerStub(rpc.aio_channel(rec.address, 16 << 20))
                reply = await rpc.call(stub.Status(pb.ManagerStatusRequest(), timeout=2))
                if reply.leader:
                    return rec.name
            return None
        return asyncio.run(ask())

    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        pc.append("acct", "log", [b"before"])
        old_leader = wait_until(leader, 10, "a PM leader")
        stamp.kill(old_leader)
        new_leader = wait_until(leader, 15, "the standby PM to lead")
        assert new_leader != old_leader
        # The new leader does the PM's work: a dead PS's partitions move.
        victim = owner_of(stamp, pc)
        stamp.kill(victim)
        wait_until(lambda: owner_of(stamp, pc) != victim, 15, "the partition to be reassigned")
        assert pc.append("acct", "log", [b"after"]) == 1
        assert pc.read("acct", "log", 0, 10) == [(0, b"before"), (1, b"after")]


@pytest.mark.serial  # timing-sensitive: run alone (`make test`)
def test_deposed_owner_cannot_make_a_write_visible(stamp_factory: StampFactory) -> None:
    """The owner is frozen (SIGSTOP: a long GC pause, a stuck VM) in the middle of a commit;
    its lease lapses and the other PS loads the partition; then it wakes up and carries on
    with the commit. That append must fail, and the record never appear."""
    stamp = partition_stamp(stamp_factory)
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        pc.append("acct", "log", [b"r0"])
        old = owner_of(stamp, pc)
        new = next(r.name for r in stamp.partition_servers() if r.name != old)
        # Its commit stalls; once it wakes it is slow to notice that its lease is gone, so
        # the commit goes on against streams the new owner has fenced.
        rpc.arm_remote(stamp.address(old), "ps.commit.before_append=delay:1000,times=1; "
                                           "ps.lease_lost=delay:3000")

        async def stale_append() -> pb.Response:
            # Straight to the old owner, no retries: we want its own answer.
            session = CallSession(stamp.address(old), lambda: pb_grpc.PartitionServerStub(
                rpc.aio_channel(stamp.address(old), 16 << 20)))
            try:
                return await session.call(pb.Request(account="acct", pname="log",
                                                     append=pb.AppendOp(
                                                         records=[b"stale"],
                                                         crcs=payload_crcs([b"stale"]),
                                                         token="stale-1")), 60)
            finally:
                await session.close()

        async def scenario() -> pb.Response | Exception:
            pending = asyncio.ensure_future(stale_append())
            while not log_says(stamp, old, "fault point ps.commit.before_append fired"):
                await asyncio.sleep(0.01)
            os.kill(stamp.record(old).pid, signal.SIGSTOP)
            try:
                deadline = time.monotonic() + 30
                while not await aserving(stamp, new):
                    assert time.monotonic() < deadline, "the other PS did not take over"
                    await asyncio.sleep(0.05)
                # The new owner has loaded: the stale record is not there...
                assert await pc.aio.read("acct", "log", 0, 10) == [(0, b"r0")]
            finally:
                os.kill(stamp.record(old).pid, signal.SIGCONT)
            try:
                return await pending
            except Exception as exc:  # a broken stream is an answer too
                return exc
        answer = pc.run(scenario())
        # ...and the old owner's commit, resumed after the takeover, failed.
        assert isinstance(answer, Exception) or answer.error, f"stale append acked: {answer}"
        wait_until(lambda: log_says(stamp, old, "partition 1 stops serving"), 10,
                   "the old owner to stop serving")
        assert log_says(stamp, old, "commit-log append failed: Fenced"), \
            "the stale commit was not refused by the fence"
        assert pc.read("acct", "log", 0, 10) == [(0, b"r0")]
        assert pc.peek("acct", "log") == (0, 1)
        assert pc.append("acct", "log", [b"r1"]) == 1
        with pytest.raises(NotOwner):
            async def direct_read() -> None:
                session = CallSession(stamp.address(old), lambda: pb_grpc.PartitionServerStub(
                    rpc.aio_channel(stamp.address(old), 16 << 20)))
                try:
                    response = await session.call(pb.Request(
                        account="acct", pname="log", read=pb.ReadOp(from_seq=0, limit=5)), 10)
                    if response.error:
                        raise rpc.error_from_name(response.error, response.message)
                finally:
                    await session.close()
            pc.run(direct_read())


def test_load_cost_does_not_grow_with_checkpointed_data(stamp_factory: StampFactory) -> None:
    """A partition with ~8 MB checkpointed: a PS that loads it replays only the commit log
    since the last checkpoint (indexes load on first use: tests/unit/test_pl_run_cache.py)."""
    stamp = partition_stamp(stamp_factory, memtable_bytes_max=1 << 20)
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        value = b"v" * 8000
        for start in range(0, 1000, 50):
            pc.batch("acct", "big", [("put", f"row-{i:05d}", value) for i in
                                     range(start, start + 50)])
        pc.append("acct", "tail-log", [b"after the checkpoints"])
        old = owner_of(stamp, pc)
        stamp.kill(old)
        new = wait_until(lambda: owner_of(stamp, pc) != old and owner_of(stamp, pc), 20,
                         "the partition to move")
        wait_until(lambda: serving(stamp, new), 20, "the new owner to serve")

        async def load_report() -> pb.LoadReply:
            stub = pb_grpc.PartitionServerStub(rpc.aio_channel(stamp.address(new), 16 << 20))
            current, _ = await pc.aio.partition_map()
            return await rpc.call(stub.Load(pb.LoadRequest(
                partition_id=1, range=current.get(1).range_pb()), timeout=10))
        report = pc.run(load_report())
        data_bytes = 1000 * len(value)
        assert report.runs >= 1
        # At most the live memtable and the one being checkpointed (1 MiB each) replay.
        assert report.replayed_bytes < data_bytes / 2, report
        assert pc.get("acct", "big", "row-00999")[0] == value
        assert pc.read("acct", "tail-log", 0, 5) == [(0, b"after the checkpoints")]
