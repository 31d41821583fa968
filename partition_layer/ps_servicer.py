"""The partition server's gRPC face (common/proto/partition.proto, service
PartitionServer): the multiplexed Call stream of data requests, Subscribe and Scan streams,
and the PM's Load, Unload, Split, Merge, ReleaseExtents and Status, mapped onto
`PartitionServer` (server.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from functools import partial

from grpc import aio

from common import deadline, metrics, rpc, tracing
from common.errors import NotOwner, StampError, Unavailable
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from partition_layer import keys
from partition_layer.extent_release import release_extents
from partition_layer.geo_shipping import Shipping
from partition_layer.partition_map import range_from_pb
from partition_layer.read_replies import records_reply
from partition_layer.requests import answered, error_response, route_key, start_small_append
from partition_layer.scan_stream import serve as serve_scan
from partition_layer.server import PartitionServer
from partition_layer.speculation import Speculative
from partition_layer.witness_sweep import CLOCK_SKEW_S

SUBSCRIBE_RECHECK_S = 1.0
RESPONSES_PER_MESSAGE_MAX = 4096
_UNTRACED = contextlib.nullcontext()


class PartitionServicer(pb_grpc.PartitionServerServicer):
    def __init__(self, server: PartitionServer, address: str,
                 shipping: Shipping | None = None) -> None:
        """`shipping`: the server's inter-stamp replication (GeoCopy), if any."""
        self.server = server
        self.shipping = shipping
        self.address = address
        # The operations the Call streams carry, by kind (null objects while metrics are
        # off): how many, with what outcome, and how long each took here.
        self.op_seconds = metrics.histogram("stamp_ps_op_seconds", "latency of partition "
                                            "operations at the server, by kind", ("op",))
        self.ops = metrics.counter("stamp_ps_ops", "partition operations answered, by kind "
                                   "and outcome (ok, or the error's name)", ("op", "outcome"))
        self._append_seconds = self.op_seconds.labels("append")
        self._append_ok = self.ops.labels("append", "ok")
        # Call messages read and written: requests per message is how well callers batch
        # (`stamp bench fe-append` compares a front end's forwarding with a direct client).
        messages = metrics.counter("stamp_ps_call_messages", "Call stream messages a "
                                   "partition server read (in) and wrote (out)", ("direction",))
        self._messages_in, self._messages_out = messages.labels("in"), messages.labels("out")

    async def Call(self, request_iterator: AsyncIterator[pb.RequestBatch],
                   context: aio.ServicerContext) -> None:
        """Many requests in flight on one stream; each answered when done, in any order."""
        responses: asyncio.Queue[pb.Response | None] = asyncio.Queue()
        tasks: set[asyncio.Task[None]] = set()
        # Small appends are answered by the committer's callback, not a task: how many are
        # still unanswered, and an event set whenever none is.
        appends_open = 0
        appends_answered = asyncio.Event()
        limits = self.server.limits
        # Every request read counts as open in the server's pressure until it is answered
        # (or its task is cancelled with the stream).
        pressure = self.server.pressure
        clock = time.perf_counter
        sender = deadline.SenderClock("partition server")  # the deadlines its caller set

        async def run(request: pb.Request) -> None:
            started = clock()
            response = await self.server.handle(request)
            op = request.WhichOneof("op") or "none"
            self.op_seconds.labels(op).observe(clock() - started)
            self.ops.labels(op, response.error or "ok").inc()
            responses.put_nowait(response)

        def ran(task: asyncio.Task[None]) -> None:  # also when cancelled before it began
            tasks.discard(task)
            pressure.open_ops -= 1

        def appended(request_id: int, started: float, first_seq: int | Speculative | None,
                     error: StampError | None) -> None:
            nonlocal appends_open
            self._append_seconds.observe(clock() - started)
            if error is None:
                self._append_ok.inc()
                response = pb.Response(id=request_id)
                response.first_seq = answered(first_seq, response)  # early (CURP), maybe
                responses.put_nowait(response)
            else:
                self.ops.labels("append", type(error).__name__).inc()
                responses.put_nowait(error_response(request_id, error))
            pressure.open_ops -= 1
            appends_open -= 1
            if not appends_open:
                appends_answered.set()

        async def read_requests() -> None:
            nonlocal appends_open
            try:
                async for batch in request_iterator:
                    self._messages_in.inc()
                    pressure.open_ops += len(batch.requests)
                    for request in batch.requests:
                        # Tracing on: the committer's "ps.commit" (begun in the current
                        # context) continues the request's trace (common/tracing.py).
                        with (tracing.continued(request.traceparent) if tracing.enabled
                              else _UNTRACED):
                            # Small appends, the bulk of the traffic, need no task of their own.
                            try:
                                # Taken up after its caller gave up (this server was frozen,
                                # say): dropped, not done (common/deadline.py).
                                sender.check(request, time.time())
                                if request.version_hint and sender.skewed(CLOCK_SKEW_S):
                                    # Its owner's sweep trusts the front end's deadlines
                                    # within CLOCK_SKEW_S (witness_sweep.py): a front end
                                    # further off gets no early answer.
                                    request.version_hint = 0
                                if start_small_append(request, self.server.find, limits,
                                                      partial(appended, request.id, clock())):
                                    appends_open += 1
                                    appends_answered.clear()
                                    continue
                            except StampError as exc:
                                if not (isinstance(exc, NotOwner) and self.server.held(request)):
                                    self.ops.labels(request.WhichOneof("op") or "none",
                                                    type(exc).__name__).inc()
                                    responses.put_nowait(error_response(request.id, exc))
                                    pressure.open_ops -= 1
                                    continue
                                # Its range is being split or merged here: a task waits for it.
                            task = asyncio.get_running_loop().create_task(run(request))
                            tasks.add(task)
                            task.add_done_callback(ran)
            finally:
                # Every request is answered before the stream ends.
                if tasks:
                    await asyncio.gather(*tasks, return_exceptions=True)
                if appends_open:
                    await appends_answered.wait()
                responses.put_nowait(None)

        reader = asyncio.get_running_loop().create_task(read_requests())
        try:
            await rpc.write_queued(responses, context, pb.ResponseBatch, "responses",
                                   items_max=RESPONSES_PER_MESSAGE_MAX,
                                   before_write=self._add_pressure)
        finally:
            reader.cancel()
            for task in list(tasks):
                task.cancel()

    def _add_pressure(self, batch: pb.ResponseBatch) -> None:
        self._messages_out.inc()
        batch.pressure.CopyFrom(self.server.pressure_pb())

    @rpc.rpc_errors
    async def Subscribe(self, request: pb.SubscribeRequest,
                        context: aio.ServicerContext) -> None:
        """Ends when the log is sealed and read to its end, or with NotOwner when the
        partition stops being served here."""
        next_seq = request.from_seq
        key = route_key(request.account, request.pname)
        while True:
            partition = self.server.find(key)
            partition.check_serving()
            # Take the wake-up before reading, so a commit in between is not missed.
            changed = partition.log_event(request.account, request.pname)
            records, meta = await partition.read_log(
                request.account, request.pname, next_seq, self.server.limits.read_records_max)
            if records:
                await context.write(pb.SubscribeReply(records=records_reply(records)))
                next_seq = records[-1][0] + 1
                continue
            if meta.sealed:
                return  # a sealed log ends here: nothing more will ever come
            # asyncio.timeout, not wait_for, which in 3.11 can drop a cancellation.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SUBSCRIBE_RECHECK_S):
                    await changed.wait()

    @rpc.rpc_errors
    async def Scan(self, request: pb.PartitionScanRequest, context: aio.ServicerContext
                   ) -> AsyncIterator[pb.PartitionScanPage]:
        """One partition's part of a scan, one snapshot (scan_stream.py); NotOwner when
        the partition holding the start is not served here, or stops being served."""
        async for page in serve_scan(request, self.server.find, self.server.limits):
            yield page

    @rpc.rpc_errors
    async def Load(self, request: pb.LoadRequest, context: aio.ServicerContext
                   ) -> pb.LoadReply:
        low, high = range_from_pb(request.range)
        report = await self.server.load(request.partition_id, keys.KeyRange(low, high),
                                        request.create_if_missing)
        partition = self.server.partitions.get(request.partition_id)
        return pb.LoadReply(seconds=report.seconds, replayed_ops=report.replayed_ops,
                            replayed_bytes=report.replayed_bytes,
                            runs=report.runs,
                            epoch=partition.epoch if partition else 0)

    @rpc.rpc_errors
    async def Unload(self, request: pb.UnloadRequest, context: aio.ServicerContext
                     ) -> pb.UnloadReply:
        await self.server.unload(request.partition_id)
        return pb.UnloadReply()

    @rpc.rpc_errors
    async def Split(self, request: pb.SplitRequest, context: aio.ServicerContext
                    ) -> pb.SplitReply:
        return await self.server.split_merge.split(request.partition_id, request.key,
                                                   request.left_id, request.right_id)

    @rpc.rpc_errors
    async def Merge(self, request: pb.MergeRequest, context: aio.ServicerContext
                    ) -> pb.MergeReply:
        return await self.server.split_merge.merge(request.left_id, request.right_id,
                                                   request.merged_id)

    @rpc.rpc_errors
    async def ReleaseExtents(self, request: pb.ReleaseExtentsRequest,
                             context: aio.ServicerContext) -> pb.ReleaseExtentsReply:
        server = self.server  # gc: extent_release.py
        return await release_extents(request, server.name, server.partitions,
                                     server.split_merge.paused)

    @rpc.rpc_errors
    async def GeoCopy(self, request: pb.GeoCopyRequest, context: aio.ServicerContext
                      ) -> pb.GeoCopyReply:
        if self.shipping is None:
            raise Unavailable("this partition server ships to no other stamp")
        report = await self.shipping.copy(request.partition_id, request.account)
        return report.to_pb()

    @rpc.rpc_errors
    async def Status(self, request: pb.ServerStatusRequest, context: aio.ServicerContext
                     ) -> pb.ServerLoad:
        return self.server.load_pb(self.address)
