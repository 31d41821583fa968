"""What a partition server measures for the balancing policy, through real processes: the
requests routed to a partition feed its load finder, and the Status RPC (the heartbeat's
message, partition.proto PartitionLoad) carries the candidates, from which the policy names a
split key that is a partition name's start inside the partition's range."""

from __future__ import annotations

import asyncio

import pytest

from common import rpc
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from partition_layer.balance_policy import DefaultPolicy, PartitionSnapshot
from partition_layer.client import PartitionClient
from partition_layer.requests import route_key
from tests.support.stamps import StampFactory, owner_of, partition_stamp

pytestmark = pytest.mark.slow

LOGS = 32
ROUNDS = 8


async def status(address: str) -> pb.ServerLoad:
    async with rpc.aio_channel(address, 16 << 20) as channel:
        return await rpc.call(pb_grpc.PartitionServerStub(channel).Status(
            pb.ServerStatusRequest(), timeout=5))


def test_requests_reach_the_heartbeat_as_load_samples(stamp_factory: StampFactory) -> None:
    stamp = partition_stamp(stamp_factory)
    logs = [f"log-{i:03d}" for i in range(LOGS)]
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        for round_ in range(ROUNDS):
            for log in logs:
                pc.append("acct", log, [f"r{round_}".encode()])
        current, _ = pc.partition_map()
        entry = current.get(1)
        owner = owner_of(stamp, pc)
        (load,) = [p for p in asyncio.run(status(stamp.address(owner))).partitions
                   if p.partition_id == 1]
    assert load.state == "serving" and load.requests_sampled >= LOGS * ROUNDS
    names = {route_key("acct", log) for log in logs}
    assert len(load.samples) == 20 and {s.key for s in load.samples} <= names
    snapshot = PartitionSnapshot(1, entry.low, entry.high, owner, ops_per_s=load.ops_per_s,
                                 samples=tuple((s.key, s.left, s.right, s.contained)
                                               for s in load.samples),
                                 requests_sampled=load.requests_sampled)
    key, how = DefaultPolicy(stamp.config.partition_manager).split_key(snapshot)
    assert how == "load" and key in names, how
