"""frontend/witness_stream.py: Record calls to a real witness (in this process, on a real
channel) on one RecordStream — answered by id while others are in flight, a refused request
failing alone, the stream's loss failing the calls in flight and the next call reconnecting."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from common import rpc
from common.clock import ManualClock
from common.config import ExtentNodeLimits
from common.errors import InvalidArgument, Unavailable
from common.proto import witness_pb2 as wpb
from common.proto import witness_pb2_grpc as wpb_grpc
from frontend.witness_stream import StreamedWitness
from stream_layer.extent_node.witness import WitnessStore
from stream_layer.extent_node.witness_server import WitnessServicer
from tests.support.waiting import wait_for

ACCEPTED = wpb.Verdict.Value("ACCEPTED")
CONFLICT = wpb.Verdict.Value("CONFLICT")


def request(partition_id: int, token: bytes, key: bytes) -> wpb.RecordRequest:
    return wpb.RecordRequest(partition_id=partition_id, records=[wpb.WitnessRecord(
        token=token, epoch=1, exclusive=[key], payload=b"request")])


async def serving(directory: Path, port: int = 0) -> tuple[WitnessStore, object, int]:
    store = await WitnessStore.open(directory, ExtentNodeLimits().witness,
                                    ManualClock(1_700_000_000.0))
    server = rpc.aio_server(1 << 22)
    wpb_grpc.add_WitnessServicer_to_server(WitnessServicer(store), server)
    port = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return store, server, port


def test_calls_in_flight_on_one_stream_each_get_their_own_reply(tmp_path: Path) -> None:
    async def scenario() -> None:
        store, server, port = await serving(tmp_path)
        channel = rpc.aio_channel(f"127.0.0.1:{port}", 1 << 22)
        witness = StreamedWitness(wpb_grpc.WitnessStub(channel))
        try:
            replies = await asyncio.gather(
                witness.Record(request(1, b"a", b"k"), 5.0),
                witness.Record(request(2, b"b", b"k"), 5.0),  # another partition: no clash
                witness.Record(request(1, b"c", b"k"), 5.0),  # the same key: a conflict
                witness.Record(request(1, b"", b"k2"), 5.0),  # an empty token: refused
                return_exceptions=True)
            assert [r.verdicts for r in replies[:3]] == [[ACCEPTED], [ACCEPTED], [CONFLICT]]
            assert isinstance(replies[3], InvalidArgument)
            # The stream goes on after a refused request.
            assert (await witness.Record(request(3, b"d", b"k"), 5.0)).verdicts == [ACCEPTED]
        finally:
            await witness.close()
            await channel.close()
            await server.stop(None)  # type: ignore[attr-defined]
            await store.stop()
    asyncio.run(scenario())


def test_a_lost_stream_fails_its_calls_and_the_next_call_opens_another(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        store, server, port = await serving(tmp_path / "one")
        channel = rpc.aio_channel(f"127.0.0.1:{port}", 1 << 22)
        witness = StreamedWitness(wpb_grpc.WitnessStub(channel))
        try:
            assert (await witness.Record(request(1, b"a", b"k"), 5.0)).verdicts == [ACCEPTED]
            await server.stop(None)  # type: ignore[attr-defined]
            await store.stop()
            with pytest.raises(Unavailable):
                await witness.Record(request(1, b"b", b"k2"), 5.0)
            store, server, _ = await serving(tmp_path / "two", port)
            # The channel reconnects on its own schedule: Unavailable until it has.
            reply = await wait_for(lambda: witness.Record(request(1, b"c", b"k3"), 5.0), 5.0,
                                   "a call on a new stream to the witness back")
            assert reply.verdicts == [ACCEPTED]
        finally:
            await witness.close()
            await channel.close()
            await server.stop(None)  # type: ignore[attr-defined]
            await store.stop()
    asyncio.run(scenario())
