"""A CURP witness in a real extent node process (issue 32, §11): what it accepted and the
fence it took survive a SIGKILL, a deposed owner's drop is ignored, a drop it answered is gone
after the next restart, and a partition dropped for good stays refused after one; a stamp's
config puts a node's witness store in a directory of its own."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from common import rpc
from common.config import ExtentNodeLimits
from common.proto import witness_pb2 as pb
from common.proto import witness_pb2_grpc as pb_grpc
from stream_layer.extent_client import AsyncExtentClient
from tests.conftest import stamp_config
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

StampFactory = Callable[..., LocalStamp]
P = 42  # the partition
MESSAGE_BYTES_MAX = ExtentNodeLimits().rpc_message_bytes_max


def wire(token: bytes, exclusive: list[bytes], shared: list[bytes], epoch: int,
         deadline_ms: int = 0) -> pb.WitnessRecord:
    return pb.WitnessRecord(token=token, epoch=epoch, exclusive=exclusive, shared=shared,
                            payload=b"request " + token, deadline_ms=deadline_ms)


async def record(stub: pb_grpc.WitnessStub, *records: pb.WitnessRecord) -> list[str]:
    reply = await stub.Record(pb.RecordRequest(partition_id=P, records=records), timeout=10)
    return [pb.Verdict.Name(v) for v in reply.verdicts]


async def fence(stub: pb_grpc.WitnessStub, epoch: int) -> list[pb.WitnessRecord]:
    return list((await stub.Fence(pb.FenceRequest(partition_id=P, epoch=epoch),
                                  timeout=10)).records)


async def restarted(stamp: LocalStamp, name: str) -> None:
    """SIGKILL the node by its PID, start it again on its directory, wait until it answers."""
    stamp.kill(name)
    assert not stamp.alive(name)
    stamp.start(name)  # waits for its ready.json: it replayed its journals
    client = AsyncExtentClient()
    try:
        await client.wait_serving(stamp.address(name))
    finally:
        await client.close()


def test_witness_records_and_fence_survive_a_sigkill_and_a_drop_after_it(
        stamp_factory: StampFactory) -> None:
    stamp = stamp_factory(1)
    node = stamp.extent_nodes()[0]
    deadline_ms = int(time.time() * 1000) + 3_600_000
    # Two entity writes of one group: they commute (rows exclusive, the group's mark
    # shared); a log operation on the group's name conflicts with both.
    row1 = wire(b"w1", [b"row1"], [b"group"], epoch=1, deadline_ms=deadline_ms)
    row2 = wire(b"w2", [b"row2"], [b"group"], epoch=1)
    log_op = wire(b"w3", [b"group"], [], epoch=1)

    async def before_the_kill() -> None:
        async with rpc.aio_channel(node.address, MESSAGE_BYTES_MAX) as channel:
            stub = pb_grpc.WitnessStub(channel)
            assert await record(stub, row1) == ["ACCEPTED"]
            assert await record(stub, row2) == ["ACCEPTED"]
            assert await record(stub, log_op) == ["CONFLICT"]
            assert await fence(stub, 2) == [row1, row2]

    async def after_the_kill() -> None:
        await restarted(stamp, node.name)
        async with rpc.aio_channel(node.address, MESSAGE_BYTES_MAX) as channel:
            stub = pb_grpc.WitnessStub(channel)
            status = await stub.Status(pb.StatusRequest(), timeout=10)
            assert (status.records, status.partitions) == (2, 1)
            assert await fence(stub, 2) == [row1, row2], "footprints, deadlines, payloads"
            assert await record(stub, wire(b"late", [b"row9"], [], epoch=1)) == ["FENCED"]
            assert await record(stub, log_op) == ["FENCED"]
            # The deposed owner's drop (epoch 1, below the fence) is ignored; the new
            # owner's (epoch 2) drops the records it replayed.
            ignored = await stub.Drop(pb.DropRequest(partition_id=P, tokens=[b"w1", b"w2"],
                                                     epoch=1), timeout=10)
            assert ignored.dropped == 0
            dropped = await stub.Drop(pb.DropRequest(partition_id=P, tokens=[b"w1", b"w2"],
                                                     epoch=2), timeout=10)
            assert dropped.dropped == 2
            # The fence answers what is held now; it returns once everything submitted
            # before it, the drop included, is durable.
            assert await fence(stub, 2) == []

        await restarted(stamp, node.name)
        async with rpc.aio_channel(node.address, MESSAGE_BYTES_MAX) as channel:
            stub = pb_grpc.WitnessStub(channel)
            assert await fence(stub, 2) == [], "the drop survived a SIGKILL"
            assert await record(stub, wire(b"w4", [b"group"], [], epoch=2)) == ["ACCEPTED"]
            assert await record(stub, wire(b"w5", [b"row5"], [], epoch=1)) == ["FENCED"]
            # A split's parent: dropped for good, across the next SIGKILL too.
            await stub.DropPartition(pb.DropPartitionRequest(partition_id=P), timeout=10)
            assert await record(stub, wire(b"w6", [b"row6"], [], epoch=3)) == ["FENCED"]

        await restarted(stamp, node.name)
        async with rpc.aio_channel(node.address, MESSAGE_BYTES_MAX) as channel:
            stub = pb_grpc.WitnessStub(channel)
            status = await stub.Status(pb.StatusRequest(), timeout=10)
            assert (status.records, status.partitions) == (0, 0)
            assert await record(stub, wire(b"w7", [b"row7"], [], epoch=9)) == ["FENCED"], \
                "the dropped partition stays refused"

    asyncio.run(before_the_kill())
    asyncio.run(after_the_kill())


def test_the_stamps_config_puts_the_witness_store_in_its_own_directory(tmp_path: Path) -> None:
    """An extent node's `witness_dir` in the stamp's config (like its `journal_dir`) reaches
    its command line: the witness journal is there, not in the node's directory."""
    witness_dir = tmp_path / "fast-disk" / "witness"
    config = stamp_config(1)
    config = dataclasses.replace(config, extent_nodes=(
        dataclasses.replace(config.extent_nodes[0], witness_dir=str(witness_dir)),))
    stamp = LocalStamp(tmp_path / "stamp", config)
    try:
        stamp.up()
        node = stamp.extent_nodes()[0]
        argv = stamp.record(node.name).argv
        assert argv[argv.index("--witness-dir") + 1] == str(witness_dir)

        async def recorded() -> None:
            async with rpc.aio_channel(node.address, MESSAGE_BYTES_MAX) as channel:
                stub = pb_grpc.WitnessStub(channel)
                assert await record(stub, wire(b"t", [b"k"], [], epoch=1)) == ["ACCEPTED"]
        asyncio.run(recorded())
        assert any(path.stat().st_size > 0 for path in witness_dir.iterdir()), \
            "the accepted record is in the configured directory"
        assert not (Path(stamp.record(node.name).dir) / "witness").exists()
    finally:
        stamp.kill_all()
