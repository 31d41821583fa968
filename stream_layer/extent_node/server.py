"""The extent node's gRPC servicer: protobuf in and out, streams, and error mapping. The
behaviour lives in node.py and store.py."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable

from grpc import aio

from common import faults, rpc, tracing
from common.checksums import crc32c
from common.errors import InvalidArgument, NotFound, ReplicationFailed, StampError, Unavailable
from common.proto import extent_node_pb2 as pb
from common.proto import extent_node_pb2_grpc as pb_grpc
from stream_layer.extent_node.fragments import FragmentStore
from stream_layer.extent_node.node import ExtentNode

log = logging.getLogger(__name__)


class ExtentNodeServicer(pb_grpc.ExtentNodeServicer):
    def __init__(self, node: ExtentNode, name: str, fault_domain: str,
                 upgrade_domain: str, fragments: FragmentStore | None = None) -> None:
        self.node = node
        self.fragments = fragments
        self.store = node.store
        self.limits = node.limits
        self.name = name
        self.fault_domain = fault_domain
        self.upgrade_domain = upgrade_domain

    # ---- appends --------------------------------------------------------------------------

    async def AppendStream(self, request_iterator: AsyncIterator[pb.AppendBatch],
                           context: aio.ServicerContext) -> None:
        """Client -> primary. A message's appends to one extent are placed as one replicated
        write; acks are written as appends complete, batched per message."""
        acks: asyncio.Queue[pb.AppendAck | None] = asyncio.Queue()
        slots = asyncio.Semaphore(self.limits.inflight_appends_max)

        def finish(placed: list[tuple[int, int, int]],
                   future: asyncio.Future[tuple[int, int]]) -> None:
            slots.release()
            if future.cancelled():
                return
            error = future.exception()
            for request_id, offset, end in placed:
                acks.put_nowait(pb.AppendAck(request_id=request_id, offset=offset, end=end)
                                if error is None else _error_ack(request_id, error))

        async def place(extent_id: int, requests: list[pb.AppendRequest]) -> None:
            ids, appends = [], []
            for request in requests:
                try:
                    appends.append(self.node.validate_blocks(request))
                    ids.append(request.request_id)
                except Exception as exc:
                    acks.put_nowait(_error_ack(request.request_id, exc))
            if not appends:
                return
            await slots.acquire()
            try:
                await self.store.wait_for_room(sum(len(a) for a in appends))
                if tracing.enabled:
                    taken = set(ids)
                    future, outcomes = _start_traced(
                        self.node, extent_id, appends,
                        [r.traceparent for r in requests if r.request_id in taken])
                else:
                    future, outcomes = self.node.start_appends(extent_id, appends)
            except Exception as exc:
                slots.release()
                for request_id in ids:
                    acks.put_nowait(_error_ack(request_id, exc))
                return
            placed = []
            for request_id, outcome in zip(ids, outcomes, strict=True):
                if isinstance(outcome, StampError):
                    acks.put_nowait(_error_ack(request_id, outcome))
                else:
                    placed.append((request_id, *outcome))
            if future is None:
                slots.release()
            else:
                future.add_done_callback(lambda f: finish(placed, f))

        async def read_requests() -> None:
            try:
                async for batch in request_iterator:
                    by_extent: dict[int, list[pb.AppendRequest]] = {}
                    for request in batch.appends:
                        by_extent.setdefault(request.extent_id, []).append(request)
                    for extent_id, requests in by_extent.items():
                        await place(extent_id, requests)
            finally:
                acks.put_nowait(None)

        reader = asyncio.get_running_loop().create_task(read_requests())
        try:
            await rpc.write_queued(acks, context, pb.AppendAcks, "acks", "en.primary.before_ack")
        finally:
            reader.cancel()

    async def ForwardStream(self, request_iterator: AsyncIterator[pb.ForwardBatch],
                            context: aio.ServicerContext) -> None:
        """Primary -> secondary. Entries are taken in order; acks say "durable up to"."""
        acks: asyncio.Queue[pb.ForwardAck | None] = asyncio.Queue()

        async def read_entries() -> None:
            try:
                async for batch in request_iterator:
                    for entry in batch.entries:
                        ack = pb.ForwardAck(extent_id=entry.extent_id,
                                            durable_end=entry.offset + len(entry.frames))
                        try:
                            await self.store.wait_for_room(len(entry.frames))
                            # The journal makes entries durable in the order they were taken
                            # and runs this then: the acks go out in order, with no task or
                            # loop turn of their own.
                            if tracing.enabled:
                                _accept_traced(self.node, entry, ack, acks.put_nowait)
                            else:
                                self.node.accept_forward(entry,
                                                         lambda a=ack: acks.put_nowait(a))
                        except Exception as exc:
                            # Acked at once, maybe before earlier entries' acks: the primary
                            # fails the whole pipeline on it, which is what it must do anyway.
                            acks.put_nowait(_error_forward_ack(entry.extent_id, exc))
            finally:
                acks.put_nowait(None)

        reader = asyncio.get_running_loop().create_task(read_entries())
        try:
            await rpc.write_queued(acks, context, pb.ForwardAcks, "acks",
                                   "en.secondary.before_ack")
        finally:
            reader.cancel()

    # ---- unary ----------------------------------------------------------------------------

    @rpc.rpc_errors
    async def CreateExtent(self, request: pb.CreateExtentRequest,
                           context: aio.ServicerContext) -> pb.CreateExtentReply:
        await faults.apoint("en.create")  # a failed create leaves orphans on the others
        await self.node.create(request.extent_id, list(request.replicas))
        return pb.CreateExtentReply()

    @rpc.rpc_errors
    async def Read(self, request: pb.ReadRequest, context: aio.ServicerContext) -> pb.ReadReply:
        await faults.apoint("en.read")
        frames = await self.store.read(request.extent_id, request.offset, request.length)
        return pb.ReadReply(frames=frames)

    @rpc.rpc_errors
    async def CommitLength(self, request: pb.CommitLengthRequest,
                           context: aio.ServicerContext) -> pb.CommitLengthReply:
        if request.fence:
            length, sealed = await self.node.fence(request.extent_id)
        else:
            length, sealed = self.store.commit_length(request.extent_id)
        return pb.CommitLengthReply(length=length, sealed=sealed)

    @rpc.rpc_errors
    async def Seal(self, request: pb.SealRequest, context: aio.ServicerContext) -> pb.SealReply:
        length = await self.node.seal(request.extent_id, request.length, list(request.sources))
        return pb.SealReply(length=length)

    @rpc.rpc_errors
    async def SyncInit(self, request: pb.SyncInitRequest,
                       context: aio.ServicerContext) -> pb.SyncInitReply:
        length, sealed = self.store.commit_length(request.extent_id)
        return pb.SyncInitReply(available_end=length, sealed=sealed)

    @rpc.rpc_errors
    async def SyncReplicate(self, request: pb.SyncReplicateRequest,
                            context: aio.ServicerContext) -> AsyncIterator[pb.SyncChunk]:
        offset = request.from_offset
        while offset < request.to_offset:
            want = min(self.limits.sync_batch_bytes_max, request.to_offset - offset)
            frames = await self.store.read(request.extent_id, offset, want)
            yield pb.SyncChunk(offset=offset, frames=frames)
            offset += len(frames)

    @rpc.rpc_errors
    async def DeleteExtent(self, request: pb.DeleteExtentRequest,
                           context: aio.ServicerContext) -> pb.DeleteExtentReply:
        self.node.forget_pipeline(request.extent_id, NotFound("extent deleted"))
        await self.store.delete(request.extent_id)
        return pb.DeleteExtentReply()

    @rpc.rpc_errors
    async def ListExtents(self, request: pb.ListExtentsRequest,
                          context: aio.ServicerContext) -> pb.ListExtentsReply:
        reply = pb.ListExtentsReply()
        for extent_id, replica in sorted(self.store.replicas.items()):
            length, sealed = self.store.commit_length(extent_id)
            reply.extents.append(pb.ExtentInfo(extent_id=extent_id, length=length,
                                               sealed=sealed, replicas=replica.meta.replicas))
        return reply

    @rpc.rpc_errors
    async def Checkpoint(self, request: pb.CheckpointRequest,
                         context: aio.ServicerContext) -> pb.CheckpointReply:
        await self.store.checkpoint()
        return pb.CheckpointReply(journal_bytes=self.store.journal.held_bytes())

    @rpc.rpc_errors
    async def NodeStatus(self, request: pb.NodeStatusRequest,
                         context: aio.ServicerContext) -> pb.NodeStatusReply:
        return pb.NodeStatusReply(
            name=self.name, fault_domain=self.fault_domain, upgrade_domain=self.upgrade_domain,
            extents=len(self.store.replicas),
            bytes=sum(r.durable_end for r in self.store.replicas.values()),
            journal_bytes=self.store.journal.held_bytes(),
            pending_file_bytes=self.store.pending_bytes, pid=os.getpid(),
            journal_syncs=self.store.journal.syncs, journal_records=self.store.journal.records)

    @rpc.rpc_errors
    async def ScrubExtent(self, request: pb.ScrubExtentRequest,
                          context: aio.ServicerContext) -> pb.ScrubExtentReply:
        found = await self.store.scrub(request.extent_id)
        return pb.ScrubExtentReply(length=found.length, sealed=found.sealed,
                                   frames=found.frames, digest=found.digest,
                                   bad_offset=found.bad_offset, reason=found.reason)

    # ---- erasure-coded fragments ----------------------------------------------------------

    def _fragment_store(self) -> FragmentStore:
        if self.fragments is None:
            raise Unavailable(f"{self.name} keeps no fragments")
        return self.fragments

    @rpc.rpc_errors
    async def WriteFragment(self, request_iterator: AsyncIterator[pb.FragmentChunk],
                            context: aio.ServicerContext) -> pb.FragmentReply:
        store = self._fragment_store()
        writer = None
        try:
            async for chunk in request_iterator:
                if writer is None:
                    writer = await store.begin(chunk.extent_id, chunk.index, chunk.length,
                                               chunk.crc)
                if (chunk.extent_id, chunk.index) != (writer.extent_id, writer.index):
                    raise InvalidArgument("every chunk of a fragment write names one fragment")
                await faults.apoint("en.fragment.write")
                if chunk.data:
                    await store.write(writer, chunk.offset, chunk.data)
            if writer is None:
                raise InvalidArgument("a fragment write without chunks")
            info = await store.finish(writer)
        except BaseException:
            if writer is not None:
                await store.abort(writer)
            raise
        return pb.FragmentReply(length=info.length, crc=info.crc)

    @rpc.rpc_errors
    async def ReadFragment(self, request: pb.ReadFragmentRequest,
                           context: aio.ServicerContext) -> pb.ReadFragmentReply:
        await faults.apoint("en.fragment.read")
        if request.length > self.limits.read_bytes_max:
            raise InvalidArgument(f"a fragment read is at most {self.limits.read_bytes_max} "
                                  f"bytes")
        data = await self._fragment_store().read(request.extent_id, request.index,
                                                 request.offset, request.length)
        return pb.ReadFragmentReply(data=data, crc=crc32c(data))

    @rpc.rpc_errors
    async def VerifyFragment(self, request: pb.FragmentRequest,
                             context: aio.ServicerContext) -> pb.FragmentReply:
        info = await self._fragment_store().verify(request.extent_id, request.index)
        return pb.FragmentReply(length=info.length, crc=info.crc)

    @rpc.rpc_errors
    async def DeleteFragment(self, request: pb.FragmentRequest,
                             context: aio.ServicerContext) -> pb.FragmentReply:
        await self._fragment_store().delete(request.extent_id, request.index)
        return pb.FragmentReply()

    @rpc.rpc_errors
    async def ListFragments(self, request: pb.ListFragmentsRequest,
                            context: aio.ServicerContext) -> pb.ListFragmentsReply:
        return pb.ListFragmentsReply(fragments=[
            pb.FragmentId(extent_id=e, index=i) for e, i in self._fragment_store().list()])


def _error_ack(request_id: int, exc: BaseException) -> pb.AppendAck:
    if not isinstance(exc, StampError):
        log.error("append %d failed unexpectedly", request_id, exc_info=exc)
    return pb.AppendAck(request_id=request_id, error_kind=rpc.error_name(exc),
                        error_message=str(exc),
                        late_replica=exc.late_replica if isinstance(exc, ReplicationFailed)
                        else "")


def _error_forward_ack(extent_id: int, exc: BaseException) -> pb.ForwardAck:
    if not isinstance(exc, StampError):
        log.error("forward to extent %d failed unexpectedly", extent_id, exc_info=exc)
    return pb.ForwardAck(extent_id=extent_id, error_kind=rpc.error_name(exc),
                         error_message=str(exc))


def _start_traced(node: ExtentNode, extent_id: int, appends: list[bytes],
                  traceparents: list[str]
                  ) -> tuple[asyncio.Future[tuple[int, int]] | None,
                             list[tuple[int, int] | StampError]]:
    """`node.start_appends` in a span "en.append" (tracing on) from placing the write until
    every replica has it durable: the child of the first traced append's "stream.append"
    (its request's `traceparent`), linked to the others' (one write serves them all). Its
    journal record's span goes under it, and the entries forwarded carry its context (the
    secondaries' "en.replica_write" go under it: common/tracing.py)."""
    parent, links = tracing.parent_and_links(traceparents)
    span = tracing.begin("en.append", {"extent": extent_id, "appends": len(appends)},
                         parent=parent, links=links)
    try:
        with tracing.using(span):
            future, outcomes = node.start_appends(extent_id, appends)
    except BaseException as exc:
        span.set_attribute("error", type(exc).__name__)
        span.end()
        raise
    placed = [outcome for outcome in outcomes if not isinstance(outcome, StampError)]
    if placed:
        span.set_attributes({"offset": placed[0][0], "end": placed[-1][1]})
    if future is None:
        span.end()
    else:
        future.add_done_callback(lambda _: span.end())
    return future, outcomes


def _accept_traced(node: ExtentNode, entry: pb.ForwardEntry, ack: pb.ForwardAck,
                   send: Callable[[pb.ForwardAck], None]) -> None:
    """`node.accept_forward` in a span "en.replica_write" (tracing on) until the entry is
    durable here and its ack goes: the child of the primary's "en.append" (the entry's
    `traceparent`); its journal record's span goes under it."""
    span = tracing.begin("en.replica_write", {
        "extent": entry.extent_id, "offset": entry.offset,
        "end": entry.offset + len(entry.frames)}, parent=tracing.parent_of(entry.traceparent))

    def durable() -> None:
        span.end()
        send(ack)
    try:
        with tracing.using(span):
            node.accept_forward(entry, durable)
    except BaseException as exc:
        span.set_attribute("error", type(exc).__name__)
        span.end()
        raise
