"""The CURP witness's gRPC servicer (issue 32) on a real grpc.aio server in this process, a
store in tmp_path, every RPC through a real channel: verdicts on the wire, payloads in Fence
and not in List, Drop and List by the caller's epoch, Clear, DropPartition, Status, and bad
input answered INVALID_ARGUMENT with the call changing nothing; and the node's gauges of
it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import pytest
from grpc import aio

from common import rpc
from common.clock import ManualClock
from common.config import ExtentNodeLimits
from common.errors import InvalidArgument, Unavailable
from common.proto import witness_pb2 as pb
from common.proto import witness_pb2_grpc as pb_grpc
from stream_layer.extent_node.fragments import FragmentStore
from stream_layer.extent_node.main import watch_store
from stream_layer.extent_node.witness import WitnessStore
from stream_layer.extent_node.witness_server import WitnessServicer
from tests.support.extent_store import open_store

LIMITS = dataclasses.replace(ExtentNodeLimits().witness, call_records_max=4,
                             record_bytes_max=1000, record_keys_max=3)
MESSAGE_BYTES_MAX = 1 << 20
T0_S = 1_700_000_000.0
T0_MS = int(T0_S * 1000)
P = 11  # the partition


def wire(token: str, *keys: str, shared: tuple[str, ...] = (), epoch: int = 1,
         payload: bytes = b"request", deadline_ms: int = 0) -> pb.WitnessRecord:
    return pb.WitnessRecord(token=token.encode(), epoch=epoch,
                            exclusive=[k.encode() for k in keys],
                            shared=[k.encode() for k in shared], payload=payload,
                            deadline_ms=deadline_ms)


Scenario = Callable[[pb_grpc.WitnessStub, WitnessStore, ManualClock], Awaitable[None]]


def serve(directory: Path, scenario: Scenario) -> None:
    """A store on `directory` behind a real server on 127.0.0.1 port 0; run `scenario` with a
    stub on a real channel to it; stop everything."""
    async def run() -> None:
        clock = ManualClock(T0_S)
        store = await WitnessStore.open(directory, LIMITS, clock)
        server = rpc.aio_server(MESSAGE_BYTES_MAX)
        pb_grpc.add_WitnessServicer_to_server(WitnessServicer(store), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        channel = rpc.aio_channel(f"127.0.0.1:{port}", MESSAGE_BYTES_MAX,
                                  credentials=lambda _: None)
        try:
            await scenario(pb_grpc.WitnessStub(channel), store, clock)
        finally:
            await channel.close()
            await server.stop(None)
            await store.stop()
    asyncio.run(run())


async def verdicts(stub: pb_grpc.WitnessStub, *records: pb.WitnessRecord,
                   partition: int = P) -> list[str]:
    reply = await stub.Record(pb.RecordRequest(partition_id=partition, records=records))
    return [pb.Verdict.Name(v) for v in reply.verdicts]


def test_record_answers_a_verdict_per_record(tmp_path: Path) -> None:
    async def scenario(stub: pb_grpc.WitnessStub, store: WitnessStore,
                       clock: ManualClock) -> None:
        assert await verdicts(stub, wire("a", "row1", shared=("group",)),
                              wire("b", "row2", shared=("group",)),
                              wire("c", "group"),
                              wire("d", "x", deadline_ms=T0_MS)) == \
            ["ACCEPTED", "ACCEPTED", "CONFLICT", "EXPIRED"]
        assert await verdicts(stub, wire("a", "row1", shared=("group",))) == ["ACCEPTED"]
        await stub.Fence(pb.FenceRequest(partition_id=P, epoch=2))
        assert await verdicts(stub, wire("e", "y", epoch=1)) == ["FENCED"]
        assert await verdicts(stub) == [], "an empty call is answered empty"
        assert store.table.held_records() == 2
    serve(tmp_path, scenario)


def test_full_is_a_verdict(tmp_path: Path) -> None:
    async def scenario(stub: pb_grpc.WitnessStub, store: WitnessStore,
                       clock: ManualClock) -> None:
        store.table.records_max = 1  # (the table's bound; the store's limits are the same)
        assert await verdicts(stub, wire("a", "k"), wire("b", "j")) == ["ACCEPTED", "FULL"]
    serve(tmp_path, scenario)


def test_fence_answers_the_records_with_payloads_and_list_without(tmp_path: Path) -> None:
    async def scenario(stub: pb_grpc.WitnessStub, store: WitnessStore,
                       clock: ManualClock) -> None:
        first = wire("a", "row1", "row0", shared=("group",), payload=b"put row1",
                     deadline_ms=T0_MS + 9000)
        await verdicts(stub, first)
        clock.advance(2.0)
        second = wire("b", "log", epoch=1, payload=b"append")
        await verdicts(stub, second)
        listed = (await stub.List(pb.ListRequest(partition_id=P, older_than_ms=1000,
                                                 epoch=1))).records
        assert list(listed) == [wire("a", "row0", "row1", shared=("group",), payload=b"",
                                     deadline_ms=T0_MS + 9000)]
        everything = await stub.List(pb.ListRequest(partition_id=P, older_than_ms=0, epoch=1))
        assert [r.token for r in everything.records] == [b"a", b"b"]
        assert all(r.payload == b"" for r in everything.records)
        fenced = await stub.Fence(pb.FenceRequest(partition_id=P, epoch=3))
        # Keys come back sorted within each mode.
        assert list(fenced.records) == [wire("a", "row0", "row1", shared=("group",),
                                             payload=b"put row1", deadline_ms=T0_MS + 9000),
                                        second]
        assert store.table.fence_epoch(P) == 3
    serve(tmp_path, scenario)


def test_drop_and_clear_and_status(tmp_path: Path) -> None:
    async def scenario(stub: pb_grpc.WitnessStub, store: WitnessStore,
                       clock: ManualClock) -> None:
        await verdicts(stub, wire("a", "k1", payload=b"12"), wire("b", "k2", epoch=2),
                       wire("c", "k3", epoch=3))
        await verdicts(stub, wire("z", "k1", payload=b"123"), partition=P + 1)
        status = await stub.Status(pb.StatusRequest())
        assert (status.records, status.bytes, status.partitions) == \
            (4, store.table.held_bytes(), 2)
        dropped = await stub.Drop(pb.DropRequest(partition_id=P, tokens=[b"a", b"unknown"],
                                                 epoch=1))
        assert dropped.dropped == 1
        assert [r.token for r in store.table.records(P)] == [b"b", b"c"]
        nothing = await stub.Drop(pb.DropRequest(partition_id=99, tokens=[b"a"], epoch=1))
        assert nothing.dropped == 0
        await stub.Clear(pb.ClearRequest(partition_id=P, epoch=3))
        assert [r.token for r in store.table.records(P)] == [b"c"]
        assert await verdicts(stub, wire("d", "k9", epoch=2)) == ["FENCED"]
        status = await stub.Status(pb.StatusRequest())
        assert (status.records, status.partitions) == (2, 2)
    serve(tmp_path, scenario)


def test_a_deposed_owner_neither_drops_nor_lists_the_new_owners_records(
        tmp_path: Path) -> None:
    """Old owner epoch 1 records T1; the new owner fences at 2 and records T2; the old
    owner's Drop(epoch 1) is answered "nothing dropped" (no error) and T2 stays held; its
    List answers nothing."""
    async def scenario(stub: pb_grpc.WitnessStub, store: WitnessStore,
                       clock: ManualClock) -> None:
        assert await verdicts(stub, wire("T1", "k1", epoch=1)) == ["ACCEPTED"]
        await stub.Fence(pb.FenceRequest(partition_id=P, epoch=2))
        assert await verdicts(stub, wire("T2", "k2", epoch=2)) == ["ACCEPTED"]
        old = await stub.Drop(pb.DropRequest(partition_id=P, tokens=[b"T2", b"T1"], epoch=1))
        assert old.dropped == 0
        assert [r.token for r in store.table.records(P)] == [b"T1", b"T2"]
        listed = await stub.List(pb.ListRequest(partition_id=P, older_than_ms=0, epoch=1))
        assert list(listed.records) == []
        listed = await stub.List(pb.ListRequest(partition_id=P, older_than_ms=0, epoch=2))
        assert [r.token for r in listed.records] == [b"T1", b"T2"]
        new = await stub.Drop(pb.DropRequest(partition_id=P, tokens=[b"T2"], epoch=2))
        assert new.dropped == 1 and [r.token for r in store.table.records(P)] == [b"T1"]
    serve(tmp_path, scenario)


def test_drop_partition_forgets_it_for_good_and_durably(tmp_path: Path) -> None:
    async def scenario(stub: pb_grpc.WitnessStub, store: WitnessStore,
                       clock: ManualClock) -> None:
        await verdicts(stub, wire("a", "k", epoch=3))
        await verdicts(stub, wire("b", "k"), partition=P + 1)
        await stub.DropPartition(pb.DropPartitionRequest(partition_id=P))
        await stub.DropPartition(pb.DropPartitionRequest(partition_id=P))  # idempotent
        assert store.table.is_dropped(P) and store.table.held_records() == 1
        assert await verdicts(stub, wire("c", "j", epoch=99)) == ["FENCED"]
        assert list((await stub.Fence(pb.FenceRequest(partition_id=P, epoch=100))).records) \
            == []
    serve(tmp_path, scenario)

    async def reopened() -> tuple[bool, int]:
        store = await WitnessStore.open(tmp_path, LIMITS, ManualClock(T0_S))
        try:
            return store.table.is_dropped(P), store.table.held_records()
        finally:
            await store.stop()
    assert asyncio.run(reopened()) == (True, 1)


@pytest.mark.parametrize(("call", "match"), [
    (lambda s: s.Record(pb.RecordRequest(partition_id=P, records=[wire("ok", "k"),
                                                                  wire("", "j")])), "token"),
    (lambda s: s.Record(pb.RecordRequest(partition_id=P, records=[wire("t" * 300)])),
     "token"),
    (lambda s: s.Record(pb.RecordRequest(partition_id=P, records=[wire("a", "k",
                                                                       shared=("k",))])),
     "both"),
    (lambda s: s.Record(pb.RecordRequest(partition_id=P, records=[wire(f"t{i}")
                                                                  for i in range(5)])),
     "5 records in one call"),
    (lambda s: s.Record(pb.RecordRequest(partition_id=P, records=[
        wire("a", "k", payload=b"x" * 1000)])), "bytes"),
    (lambda s: s.Record(pb.RecordRequest(partition_id=P, records=[
        wire("a", "k1", "k2", shared=("k3", "k4"))])), "4 keys"),
    (lambda s: s.Drop(pb.DropRequest(partition_id=P, tokens=[b"t"] * 5)),
     "5 tokens in one call"),
])
def test_bad_input_is_invalid_argument_and_changes_nothing(
        tmp_path: Path, call: Callable[[pb_grpc.WitnessStub], Awaitable[object]],
        match: str) -> None:
    async def scenario(stub: pb_grpc.WitnessStub, store: WitnessStore,
                       clock: ManualClock) -> None:
        with pytest.raises(aio.AioRpcError) as failed:
            await call(stub)
        assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert match in (failed.value.details() or "")
        assert "\n" not in (failed.value.details() or ""), "one line"
        assert isinstance(rpc.from_rpc_error(failed.value), InvalidArgument)
        assert store.table.held_records() == 0 and store.table.partitions() == []
    serve(tmp_path, scenario)


def test_a_stopped_store_answers_unavailable(tmp_path: Path) -> None:
    async def scenario(stub: pb_grpc.WitnessStub, store: WitnessStore,
                       clock: ManualClock) -> None:
        await store.stop()
        with pytest.raises(aio.AioRpcError) as failed:
            await stub.Fence(pb.FenceRequest(partition_id=P, epoch=1))
        assert isinstance(rpc.from_rpc_error(failed.value), Unavailable)
    serve(tmp_path, scenario)


def test_the_nodes_gauges_include_the_witness(tmp_path: Path) -> None:
    async def scenario(stub: pb_grpc.WitnessStub, store: WitnessStore,
                       clock: ManualClock) -> None:
        await verdicts(stub, wire("a", "k", payload=b"12345"))
        fragments = FragmentStore(tmp_path / "fragments")
        try:
            gauges = {family.name: family.samples[0].value
                      for family in watch_store(open_store(tmp_path / "en"), fragments, store)}
        finally:
            fragments.close()
        assert gauges["stamp_en_witness_records"] == 1
        assert gauges["stamp_en_witness_bytes"] == 6
        assert gauges["stamp_en_witness_journal_bytes"] == store.journal_bytes > 0
        # What the witness journal wrote (the counter a bench divides by writes).
        assert gauges["stamp_en_witness_journal_written_bytes"] == store.journal.written_bytes > 0
    serve(tmp_path / "witness", scenario)
