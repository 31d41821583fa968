"""The CURP witness's gRPC servicer (§11, issue 32; common/proto/witness.proto): protobuf in
and out, the bounds of a call, nothing else. The behaviour lives in witness.py (durability)
and witness_table.py (decisions).

Contracts:
- Errors go through the one mapping (common/rpc.py `rpc_errors`): bad input — a call past
  the witness limits (common/config.py ExtentNodeLimits.witness_*), a malformed record
  (witness_table.py: an empty or long token, a key in both modes) — is InvalidArgument
  (gRPC INVALID_ARGUMENT, one line), and the whole call changes nothing; a store not
  running is Unavailable. A refusal of a well-formed record is a verdict, never an error.
- Record answers once every ACCEPTED record is durable; Fence, Clear and DropPartition once
  their change (and the records Fence answers) are durable; Drop at once (durable with the
  next group commit: WitnessStore.gc); List and Status read memory.
- Drop and List go by the caller's epoch (witness_table.py): a caller below the fence is
  answered as if nothing were held — no error — and a newer owner's records are neither
  dropped nor listed.
- RecordStream: each request of the stream is a Record of its own, answered by its `id` as
  it finishes (in any order, replies batched per write); one that fails answers with its
  error's class name and message, and the stream goes on. The stream ends when the caller
  ends it or the store stops; requests in flight then are answered first.
- Verdicts go on the wire by value: witness_table.Verdict's values are the proto enum's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable

from grpc import aio

from common import rpc
from common.config import WitnessLimits
from common.errors import InvalidArgument, StampError
from common.proto import witness_pb2 as pb
from common.proto import witness_pb2_grpc as pb_grpc
from stream_layer.extent_node.witness import WitnessStore
from stream_layer.extent_node.witness_table import Record

log = logging.getLogger(__name__)

# RecordStream requests one stream may have in flight (each bounded by the witness limits).
STREAM_IN_FLIGHT_MAX = 4096


class WitnessServicer(pb_grpc.WitnessServicer):
    """The Witness service over one started WitnessStore (module doc)."""

    def __init__(self, store: WitnessStore) -> None:
        self.store = store
        self.limits: WitnessLimits = store.limits

    @rpc.rpc_errors
    async def Record(self, request: pb.RecordRequest,
                     context: aio.ServicerContext) -> pb.RecordReply:
        return await self._record(request)

    async def RecordStream(self, request_iterator: AsyncIterator[pb.RecordRequests],
                           context: aio.ServicerContext) -> None:
        replies: asyncio.Queue[pb.RecordReply | None] = asyncio.Queue()
        tasks: set[asyncio.Task[None]] = set()
        slots = asyncio.Semaphore(STREAM_IN_FLIGHT_MAX)  # past it the stream is not read

        async def one(request: pb.RecordRequest) -> None:
            try:
                reply = await self._record(request)
            except StampError as exc:
                reply = pb.RecordReply(error=type(exc).__name__, message=str(exc)[:1024])
            except Exception as exc:  # a bug: answered, logged, the stream goes on
                log.exception("witness: a streamed Record failed")
                reply = pb.RecordReply(error="Internal", message=repr(exc)[:1024])
            finally:
                slots.release()
            reply.id = request.id
            replies.put_nowait(reply)

        async def read() -> None:
            try:
                async for batch in request_iterator:
                    for request in batch.requests:
                        await slots.acquire()
                        task = asyncio.get_running_loop().create_task(one(request))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
            finally:
                if tasks:
                    await asyncio.gather(*tasks, return_exceptions=True)
                replies.put_nowait(None)

        reader = asyncio.get_running_loop().create_task(read())
        try:
            await rpc.write_queued(replies, context, pb.RecordReplies, "replies")
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def _record(self, request: pb.RecordRequest) -> pb.RecordReply:
        _check_count("records", len(request.records), self.limits.call_records_max)
        records = [record_of(message, self.limits) for message in request.records]
        verdicts = await self.store.record(request.partition_id, records)
        return pb.RecordReply(verdicts=[verdict.value for verdict in verdicts])

    @rpc.rpc_errors
    async def Drop(self, request: pb.DropRequest, context: aio.ServicerContext) -> pb.DropReply:
        _check_count("tokens", len(request.tokens), self.limits.call_records_max)
        if request.durable:
            dropped = await self.store.gc_durable(request.partition_id, request.tokens,
                                                  epoch=request.epoch)
        else:
            dropped = self.store.gc(request.partition_id, request.tokens, epoch=request.epoch)
        return pb.DropReply(dropped=dropped)

    @rpc.rpc_errors
    async def List(self, request: pb.ListRequest, context: aio.ServicerContext) -> pb.ListReply:
        held = self.store.list(request.partition_id, request.older_than_ms,
                               epoch=request.epoch)
        return pb.ListReply(records=messages_of(held, payloads=False))

    @rpc.rpc_errors
    async def Fence(self, request: pb.FenceRequest,
                    context: aio.ServicerContext) -> pb.FenceReply:
        held = await self.store.fence(request.partition_id, request.epoch)
        log.info("witness: partition %d fenced at epoch %d, %d records answered",
                 request.partition_id, request.epoch, len(held))
        return pb.FenceReply(records=messages_of(held, payloads=True))

    @rpc.rpc_errors
    async def Clear(self, request: pb.ClearRequest,
                    context: aio.ServicerContext) -> pb.ClearReply:
        await self.store.clear(request.partition_id, request.epoch)
        return pb.ClearReply()

    @rpc.rpc_errors
    async def DropPartition(self, request: pb.DropPartitionRequest,
                            context: aio.ServicerContext) -> pb.DropPartitionReply:
        await self.store.drop_partition(request.partition_id)
        log.info("witness: partition %d dropped for good", request.partition_id)
        return pb.DropPartitionReply()

    @rpc.rpc_errors
    async def Status(self, request: pb.StatusRequest,
                     context: aio.ServicerContext) -> pb.StatusReply:
        table = self.store.table
        return pb.StatusReply(records=table.held_records(), bytes=table.held_bytes(),
                              partitions=len(table.partitions()))


def record_of(message: pb.WitnessRecord, limits: WitnessLimits) -> Record:
    """The record a message stands for; InvalidArgument past the per-record limits. (The
    table checks the rest — token, modes — before anything changes.) A key listed twice in
    one mode is one key."""
    keys = len(message.exclusive) + len(message.shared)
    if keys > limits.record_keys_max:
        raise InvalidArgument(f"witness: a record holds {keys} keys, more than "
                              f"{limits.record_keys_max}")
    record = Record(message.token, message.epoch, frozenset(message.exclusive),
                    frozenset(message.shared), message.payload, message.deadline_ms)
    if record.size > limits.record_bytes_max:
        raise InvalidArgument(f"witness: a record of {record.size} bytes (payload and keys), "
                              f"more than {limits.record_bytes_max}")
    return record


def messages_of(records: Iterable[Record], payloads: bool) -> list[pb.WitnessRecord]:
    """Records on the wire, with their payloads or without (List: the sweep needs none)."""
    return [pb.WitnessRecord(token=r.token, epoch=r.epoch, exclusive=sorted(r.exclusive),
                             shared=sorted(r.shared), payload=r.payload if payloads else b"",
                             deadline_ms=r.deadline_ms)
            for r in records]


def _check_count(what: str, count: int, count_max: int) -> None:
    if count > count_max:
        raise InvalidArgument(f"witness: {count} {what} in one call, more than {count_max}")
