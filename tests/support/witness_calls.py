"""A probe playing a CURP front end (issue 32, partition_layer/curp.py step 3) by hand: hinted
writes sent to a partition's owner, their records sent to its witnesses, and what the
witnesses hold — on real processes, without a front end.

Contracts:
- `hinted(request, hint, epoch)`: the request with a version hint, naming the owner epoch
  whose witnesses it was recorded at (0: none known; the owner answers it when durable, with
  its witnesses and epoch).
- `record_of(request, token, epoch)`: its witness record, as a front end makes it (with the
  request's deadline, if it has one).
- `dated(request, timeout_ms)`: the request with a timeout and the deadline a front end would
  give it now (the owner's sweep condemns by it).
- `record_at(witnesses, partition_id, record)`: each witness's verdict on it, by name.
- `held(address, partition_id)`: the tokens a witness holds for the partition, of any epoch.
- `session_to(address)`: a call session to a partition server (close it).
- `until_owned_by(pc, server)`: until the partition map gives partition 1 to `server`.
"""

from __future__ import annotations

import time

from common import rpc
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from common.proto import witness_pb2 as wpb
from common.proto import witness_pb2_grpc as wpb_grpc
from partition_layer.client import PartitionClient
from partition_layer.curp import footprint_of
from partition_layer.session import CallSession
from tests.support.waiting import wait_for

MESSAGE_BYTES_MAX = 16 << 20
CALL_TIMEOUT_S = 10.0
EVERY_EPOCH = (1 << 64) - 1  # a List at it sees the records of every epoch


def hinted(request: pb.Request, hint: int, epoch: int) -> pb.Request:
    request.version_hint, request.curp_epoch = hint, epoch
    return request


def record_of(request: pb.Request, token: str, epoch: int) -> wpb.WitnessRecord:
    footprint = footprint_of(request)
    assert footprint is not None, f"{request.WhichOneof('op')} takes no fast path"
    return wpb.WitnessRecord(token=token.encode(), epoch=epoch,
                             exclusive=sorted(footprint.exclusive),
                             shared=sorted(footprint.shared),
                             payload=request.SerializeToString(),
                             deadline_ms=request.deadline_ms)


async def record_at(witnesses: list[str], partition_id: int,
                    record: wpb.WitnessRecord) -> list[str]:
    verdicts = []
    for address in witnesses:
        async with rpc.aio_channel(address, MESSAGE_BYTES_MAX) as channel:
            reply = await rpc.call(wpb_grpc.WitnessStub(channel).Record(
                wpb.RecordRequest(partition_id=partition_id, records=[record]),
                timeout=CALL_TIMEOUT_S))
        verdicts += [wpb.Verdict.Name(v) for v in reply.verdicts]
    return verdicts


async def held(address: str, partition_id: int) -> list[bytes]:
    async with rpc.aio_channel(address, MESSAGE_BYTES_MAX) as channel:
        reply = await rpc.call(wpb_grpc.WitnessStub(channel).List(
            wpb.ListRequest(partition_id=partition_id, epoch=EVERY_EPOCH),
            timeout=CALL_TIMEOUT_S))
    return [record.token for record in reply.records]


def session_to(address: str) -> CallSession:
    return CallSession(address, lambda: pb_grpc.PartitionServerStub(
        rpc.aio_channel(address, MESSAGE_BYTES_MAX)))


def dated(request: pb.Request, timeout_ms: int = 10_000) -> pb.Request:
    request.timeout_ms = timeout_ms
    request.deadline_ms = int(time.time() * 1000) + timeout_ms
    return request


async def until_owned_by(pc: PartitionClient, server: str, deadline_s: float = 30.0,
                         partition_id: int = 1) -> None:
    async def owned() -> bool:
        current, _ = await pc.aio.partition_map()
        return current.get(partition_id).server == server
    await wait_for(owned, deadline_s, f"partition {partition_id} to move to {server}")
