"""Network partitions on real processes (issue 15): a process is cut off from every other
process of the stamp (`tools.cmd_isolate.isolate`, both directions, gRPC and Raft) without
being killed. In each case the isolated process loses its role, cannot make a write
visible, and the stamp goes on without it; after the heal nothing it did while cut off
shows. The test process itself is a client outside the stamp, never cut, so it can still
reach the isolated process and try to write through it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from common import rpc
from common.errors import StampError
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from common.proto import stream_manager_pb2 as sm_pb
from common.proto import stream_manager_pb2_grpc as sm_grpc
from lock_service.client import LockClient
from partition_layer.client import PartitionClient
from partition_layer.payload_crc import payload_crcs
from partition_layer.session import CallSession
from stream_layer.client import AsyncStream, AsyncStreamClient
from stream_layer.extent_client import AsyncExtentClient
from tests.support.partitions import aserving
from tests.support.stamps import log_says, owner_of, partition_stamp
from tests.support.streams import (
    assert_all_readable,
    client_for,
    converged_digests,
    leader_name,
    start_load,
)
from tests.support.waiting import wait_for, wait_until
from tools.chaos.extents import acknowledged, append_load, check_logs
from tools.cmd_isolate import heal, isolate
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

StampFactory = Callable[..., LocalStamp]
T = TypeVar("T")


async def outcome(call: Awaitable[T]) -> T | StampError:
    """A call's reply, or the Stamp error it failed with (both are answers here)."""
    try:
        return await call
    except StampError as exc:
        return exc


def test_isolated_stream_manager_leader_loses_leadership(stamp_factory: StampFactory) -> None:
    """The SM leader is cut off from everyone (Raft and gRPC). It steps down and cannot
    commit a stream change (a create sent straight to it fails, and the stream never exists);
    the other two elect a leader that serves the stream client meanwhile; the cut-off replica
    hears none of it (its applied index stands still: no Raft message crosses the cut); after
    the heal it catches up and every replica holds the same state."""
    stamp = stamp_factory(3, 3)

    async def scenario() -> None:
        client = client_for(stamp)
        before = await client.create_stream("before")
        await before.append([b"b0"])
        old = await leader_name(stamp, client)
        old_address = stamp.address(old)
        isolate(stamp, old)
        stub = sm_grpc.StreamManagerStub(rpc.aio_channel(old_address, 1 << 20))
        # Straight to the cut-off leader, no retries or redirects: its own answer.
        stale = await outcome(rpc.call(stub.CreateStream(sm_pb.StreamRequest(name="stale"),
                                                         timeout=10)))
        assert isinstance(stale, StampError), f"a cut-off leader committed a change: {stale}"

        async def stepped_down() -> bool:
            return not (await client.sm.status(old_address)).leader
        await wait_for(stepped_down, 15, "the cut-off leader to step down")
        new = await wait_for(lambda: _leader_other_than(stamp, client, old), 20,
                             "a new leader among the others")
        assert new != old
        cut_index = (await client.sm.status(old_address)).applied_index
        during = await client.create_stream("during")  # the stamp goes on: new leader
        acked = [(loc, b"d0") for loc in await during.append([b"d0"])]
        assert (await client.sm.status(old_address)).applied_index == cut_index, \
            "the cut-off replica applied entries from across the cut"
        assert not (await client.sm.status(old_address)).leader

        heal(stamp, old)
        digests = await converged_digests(stamp, client)
        assert len(digests) == 1, "stream manager replicas disagree after the heal"
        names = {s.name for s in await client.list_streams()}
        assert {"before", "during"} <= names and "stale" not in names, names
        await assert_all_readable(during, acked)
        await client.close()
    asyncio.run(scenario())


async def _leader_other_than(stamp: LocalStamp, client: AsyncStreamClient,
                             old: str) -> str | None:
    for rec in stamp.stream_managers():
        if rec.name != old and (await client.sm.status(rec.address)).leader:
            return rec.name
    return None


def test_isolated_primary_extent_node_is_sealed_around(stamp_factory: StampFactory) -> None:
    """The primary of a stream's open extent is cut off from every other process. Appends
    sent to it (the client outside the stamp still reaches it) cannot be acknowledged (its
    forwards do not cross the cut); the client seals the extent at what the secondaries hold
    and goes on elsewhere; every acknowledged block stays readable. After the heal the node
    is told the sealed length: its replica is sealed at that length and bitwise equal to the
    others (the bytes it took while cut off are gone)."""
    stamp = stamp_factory(6, 3)

    async def scenario() -> None:
        client = client_for(stamp)
        stream = await client.create_stream("log")
        stop, acked, load = start_load(stream, 4)
        await acknowledged(acked, 100)
        cut_extent = stream.extents[-1]
        primary = stamp.name_of(cut_extent.addresses[0])
        isolate(stamp, primary)
        await wait_for(lambda: _grown(stream, 2), 20, "the stream to continue elsewhere")
        await acknowledged(acked, len(acked) + 100)
        stop.set()
        await load
        extents = {e.extent_id: e for e in (await stream.refresh()).extents}
        sealed = extents[cut_extent.extent_id]
        assert sealed.state == "sealed"
        later = [e for e in extents.values() if e.extent_id > cut_extent.extent_id]
        assert later and all(primary not in e.replicas for e in later), \
            "a new extent was placed on the cut-off node"
        await assert_all_readable(stream, acked)

        heal(stamp, primary)
        extent_client = AsyncExtentClient(stamp.config.extent_node)

        async def told_the_seal() -> bool:
            length, is_sealed = await extent_client.commit_length(stamp.address(primary),
                                                                  cut_extent.extent_id)
            return is_sealed and length == sealed.sealed_length
        await wait_for(told_the_seal, 30, "the healed node to be told the sealed length")
        images = {address: await extent_client.read_frames(address, cut_extent.extent_id, 0,
                                                           sealed.sealed_length)
                  for address in sealed.addresses}
        assert len(set(images.values())) == 1, "sealed replicas differ after the heal"
        await extent_client.close()
        await client.close()
    asyncio.run(scenario())


async def _grown(stream: AsyncStream, extents: int) -> bool:
    await stream.refresh()
    return len(stream.extents) >= extents


def test_isolated_partition_server_loses_its_partition(stamp_factory: StampFactory) -> None:
    """The partition's owner is cut off from the lock service, the extent nodes, the stream
    managers and the partition managers, while clients keep appending. It loses its lease
    and stops serving; the other PS loads the partition and the clients ride through. Appends
    sent straight to the cut-off owner meanwhile are never acknowledged and never read by
    anyone, before or after the heal; every acknowledged append is there, in order."""
    stamp = partition_stamp(stamp_factory)
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        old = owner_of(stamp, pc)
        new = next(r.name for r in stamp.partition_servers() if r.name != old)
        acked: list[tuple[str, int, bytes]] = []
        stale_answers: list[pb.Response | StampError] = []

        async def stale_writer(stop: asyncio.Event) -> None:
            session = CallSession(stamp.address(old), lambda: pb_grpc.PartitionServerStub(
                rpc.aio_channel(stamp.address(old), 16 << 20)))
            n = 0
            try:
                while not stop.is_set():
                    records = [b"stale-%d" % n]
                    request = pb.Request(account="acct", pname=f"log-{n % 4}",
                                         append=pb.AppendOp(records=records,
                                                            crcs=payload_crcs(records),
                                                            token=f"stale-{n}"))
                    stale_answers.append(await outcome(session.call(request, 10)))
                    n += 1
            finally:
                await session.close()

        async def scenario() -> None:
            stop = asyncio.Event()
            load = asyncio.ensure_future(append_load(pc.aio, 8, stop, acked))
            await _until(lambda: len(acked) >= 200, 30, "appends before the cut")
            isolate(stamp, old)
            stale_stop = asyncio.Event()
            stale = asyncio.ensure_future(stale_writer(stale_stop))
            cut_at = len(acked)
            deadline = time.monotonic() + 60
            while not await _quietly(aserving(stamp, new)):
                assert time.monotonic() < deadline, "the other PS did not take over"
                await asyncio.sleep(0.1)
            await _until(lambda: len(acked) >= cut_at + 200, 60, "appends at the new owner")
            await _until(lambda: log_says(stamp, old, "partition 1 stops serving"), 60,
                         "the cut-off owner to stop serving")
            await _until(lambda: len(stale_answers) >= 3, 60, "answers from the cut-off owner")
            stale_stop.set()
            await stale
            stop.set()
            await load
        pc.run(scenario())
        assert owner_of(stamp, pc) == new
        acknowledged_stale = [a for a in stale_answers
                              if not isinstance(a, StampError) and not a.error]
        assert not acknowledged_stale, f"the cut-off owner acknowledged {acknowledged_stale}"
        check_logs(pc, acked)
        _assert_no_stale_record(pc)
        heal(stamp, old)
        pc.append("acct", "log-0", [b"after the heal"])
        check_logs(pc, acked)
        _assert_no_stale_record(pc)


def _assert_no_stale_record(pc: PartitionClient) -> None:
    for log in (f"log-{i}" for i in range(4)):
        first, next_seq = pc.peek("acct", log)
        records = pc.read("acct", log, first, next_seq - first + 1) if next_seq > first else []
        stale = [r for _, r in records if r.startswith(b"stale-")]
        assert not stale, f"{log}: a record written through the cut-off owner is visible"


async def _quietly(check: Awaitable[bool]) -> bool:
    try:
        return await check
    except StampError:
        return False


async def _until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout_s}s waiting for {what}"
        await asyncio.sleep(0.05)


def _cli(stamp: LocalStamp, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir", str(stamp.data_dir),
                           *args], capture_output=True, text=True, timeout=120)


def test_stamp_isolate_and_heal_a_lock_service_leader(stamp_factory: StampFactory) -> None:
    """`stamp isolate` / `stamp heal` as an operator runs them, on the lock service (Raft):
    the cut-off leader steps down, hears nothing (its applied count stands still while the
    others commit), and after the heal every replica holds the same state. User mistakes get
    one line, not a traceback."""
    stamp = stamp_factory(0, lock_servers=3)
    client = LockClient([r.address for r in stamp.lock_servers()], holder="test")
    client.put("before", b"1")
    old = next(r for r in stamp.lock_servers() if client.status(r.address).role == "leader")
    others = [r for r in stamp.lock_servers() if r.name != old.name]
    done = _cli(stamp, "isolate", old.name, "--from", ",".join(r.name for r in others))
    assert done.returncode == 0, done.stderr
    assert f"{old.name}: cut off from" in done.stdout

    def new_leader() -> bool:
        return any(client.status(r.address).role == "leader" for r in others)
    wait_until(lambda: client.status(old.address).role != "leader", 15,
               "the old leader to step down")
    wait_until(new_leader, 15, "a leader among the others")
    applied = client.status(old.address).applied
    client.put("during", b"2")  # the stamp goes on
    assert client.status(old.address).applied == applied, "a Raft entry crossed the cut"

    assert _cli(stamp, "heal", old.name).returncode == 0

    def converged() -> bool:
        replies = [client.status(r.address, with_digest=True) for r in stamp.lock_servers()]
        return len({(r.applied, r.digest) for r in replies}) == 1
    wait_until(converged, 15, "the lock replicas to converge after the heal")
    got = client.get("during")
    assert got is not None and got[0] == b"2"

    for args in (("isolate", "lock-9", "--from-all"), ("isolate", old.name, "--from", old.name),
                 ("heal", "nobody")):
        wrong = _cli(stamp, *args)
        assert wrong.returncode == 1 and "Traceback" not in wrong.stderr, wrong.stderr
        assert len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr
    client.close()


