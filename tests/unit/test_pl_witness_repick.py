"""Replacing a lost witness while the owner serves (partition_layer/witness_repick.py), its
failure path on real witness stores behind real gRPC servers in this process: a re-pick that
fenced part of a new set and failed gives the old set up for good (its List sees nothing
there any more) and answers nothing early, and the next try moves to a set and names it."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from grpc import aio

from common import rpc
from common.clock import ManualClock
from common.config import ExtentNodeLimits, PartitionLimits
from common.errors import PreconditionFailed, Unavailable
from common.proto import stream_manager_pb2 as sm_pb
from common.proto import witness_pb2 as wpb
from common.proto import witness_pb2_grpc as wpb_grpc
from partition_layer.witness_repick import repick
from partition_layer.witness_set import OwnerCalls, WitnessSet, set_epoch
from stream_layer.extent_node.witness import WitnessStore
from stream_layer.extent_node.witness_server import WitnessServicer
from tests.support.partitions import serving_partition

MESSAGE_BYTES_MAX = 1 << 20


class Switchable(WitnessServicer):
    """A witness that answers Unavailable while `down` (a node away)."""

    down = False

    def _check(self) -> None:
        if self.down:
            raise Unavailable("down")

    @rpc.rpc_errors
    async def Fence(self, request: Any, context: aio.ServicerContext) -> Any:
        self._check()
        return await super().Fence(request, context)

    @rpc.rpc_errors
    async def List(self, request: Any, context: aio.ServicerContext) -> Any:
        self._check()
        return await super().List(request, context)


def test_a_failed_repick_gives_the_old_set_up_and_the_next_one_moves(tmp_path: Path) -> None:
    async def scenario() -> None:
        names = ("a", "b", "c", "d")  # a in fd-1, b in fd-2, c and d in fd-3
        stores, servers, servicers, addresses = [], [], {}, {}
        for name in names:
            store = await WitnessStore.open(tmp_path / name, ExtentNodeLimits().witness,
                                            ManualClock(1_700_000_000.0))
            servicer = Switchable(store)
            server = rpc.aio_server(MESSAGE_BYTES_MAX)
            wpb_grpc.add_WitnessServicer_to_server(servicer, server)
            addresses[name] = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
            await server.start()
            stores.append(store)
            servers.append(server)
            servicers[name] = servicer
        domains = {"a": "fd-1", "b": "fd-2", "c": "fd-3", "d": "fd-3"}

        async def list_nodes() -> list[sm_pb.NodeInfo]:
            return [sm_pb.NodeInfo(name=n, address=addresses[n], fault_domain=domains[n],
                                   state="alive") for n in names]
        p = serving_partition(dataclasses.replace(PartitionLimits(), curp=True))
        p.client = SimpleNamespace(sm=SimpleNamespace(list_nodes=list_nodes))  # type: ignore
        p.witness_channels = rpc.ChannelCache(MESSAGE_BYTES_MAX)
        first = set_epoch(p.epoch)
        old = OwnerCalls(p.witness_channels,
                         WitnessSet(first, (addresses["a"], addresses["b"], addresses["c"])),
                         p.id, first)
        await old.fence(every=True)
        await old.clear(every=True)
        p.witnesses, p.committer.speculation.epoch = old, first
        try:
            servicers["c"].down = True  # silent to the sweep
            servicers["d"].down = True  # and the node that would replace it, away too
            assert not await repick(p, old, {addresses["c"]})
            # a's fence was raised by the try: the old set sees nothing there any more,
            # so it is given up, and nothing is answered early meanwhile.
            stub = wpb_grpc.WitnessStub(p.witness_channels.get(addresses["a"]))
            record = wpb.WitnessRecord(token=b"t", epoch=first, exclusive=[b"k"])
            reply = await stub.Record(wpb.RecordRequest(partition_id=p.id, records=[record]))
            assert [wpb.Verdict.Name(v) for v in reply.verdicts] == ["FENCED"]
            assert old.abandoned and p.committer.speculation.epoch == 0
            assert p.witnesses is old and p.meta is not None and p.meta.witnesses is None

            servicers["d"].down = False
            assert await repick(p, old, {addresses["c"]})  # the next round of a set given up
            new = p.witnesses
            assert new is not old and new is not None
            assert new.epoch == set_epoch(p.epoch, 1)
            assert set(new.members.addresses) == {addresses[n] for n in "abd"}
            assert p.committer.speculation.epoch == new.epoch
            assert p.meta.witnesses == new.members  # named before it is used

            # A split quiesced it: no set may be named after its last checkpoint.
            with pytest.raises(PreconditionFailed):
                await p.checkpointer.record_witnesses(old.members, lambda: False)
            assert p.meta.witnesses == new.members
        finally:
            await p.stop("test over")
            await p.closed()
            await p.witness_channels.close()
            for server in servers:
                await server.stop(None)
            for store in stores:
                await store.stop()
    asyncio.run(scenario())
