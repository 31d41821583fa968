"""The partition server (PS, §4): serves many range partitions over gRPC.

It owns a range partition exactly while it holds that partition's lease in the lock service
(`partition/<id>`); the lease's fencing token is the epoch with which it fences the
partition's streams at load. When a lease is lost (the lock service could not be reached in
time) the partition stops serving at once. Loads and unloads come from the PM; loads are
idempotent (a second Load of a partition loading or serving here waits for the same one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from functools import partial

from grpc import aio

from common import faults, metrics, rpc
from common.config import PartitionLimits
from common.errors import NotOwner, PreconditionFailed, StampError, Unavailable
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from lock_service.client import Lease, LockClient
from partition_layer import keys
from partition_layer.extent_release import release_extents
from partition_layer.partition import SERVING, RangePartition
from partition_layer.partition_map import range_from_pb
from partition_layer.partition_streams import LoadReport
from partition_layer.read_replies import records_reply
from partition_layer.requests import error_response, handle, route_key, start_small_append
from partition_layer.scan_stream import serve as serve_scan
from partition_layer.split_merge import SplitMerge
from partition_layer.stats import PressureGauge
from stream_layer.client import AsyncStreamClient

log = logging.getLogger(__name__)

SUBSCRIBE_RECHECK_S = 1.0
RESPONSES_PER_MESSAGE_MAX = 4096


# A partition's lease, and the list that names the partition it guards once loaded.
Acquired = tuple[Lease, list[RangePartition]]


def lease_name(partition_id: int) -> str:
    return f"partition/{partition_id}"


class PartitionServer:
    """The partitions this process serves, and the lease behind each."""

    def __init__(self, name: str, streams: AsyncStreamClient, locks: LockClient,
                 limits: PartitionLimits) -> None:
        self.name = name
        self.streams = streams
        self.locks = locks
        self.limits = limits
        self.partitions: dict[int, RangePartition] = {}
        self.leases: dict[int, Lease] = {}
        self.reports: dict[int, LoadReport] = {}
        self._loading: dict[int, asyncio.Task[LoadReport]] = {}
        # One per partition served: when it stops, forget it and release its lease.
        self._watchers: dict[RangePartition, asyncio.Task[None]] = {}
        # Partitions split or merged away by this process: never loaded here again.
        self.retired: set[int] = set()
        # Reported on every response batch of the Call streams (front ends throttle on it).
        self.pressure = PressureGauge(lambda: [p.stats for p in self.partitions.values()])
        self.split_merge = SplitMerge(self)

    def pressure_pb(self) -> pb.ServerPressure:
        queue_ops, p99_ms = self.pressure.read()
        return pb.ServerPressure(server=self.name, queue_ops=queue_ops, p99_ms=p99_ms)

    async def handle(self, request: pb.Request) -> pb.Response:
        """Run one data request. One refused NotOwner because its range is being split or
        merged here waits for that to end (at most `split_hold_ms`) and runs again where
        its key is served then: the range is unavailable for the split's own time, not
        that plus the client's map refresh and retry."""
        deadline = time.monotonic() + self.limits.split_hold_ms / 1000
        while True:
            response = await handle(request, self.find, self.limits)
            remaining = deadline - time.monotonic()
            if (response.error != NotOwner.__name__ or remaining <= 0
                    or not self.held(request)):
                return response
            await self.split_merge.hold.settled(remaining)

    def held(self, request: pb.Request) -> bool:
        """Whether the request's key is in a range being split or merged here."""
        return self.split_merge.hold.holds(route_key(request.account, request.pname))

    def find(self, key: bytes) -> RangePartition:
        held = ""
        for partition in self.partitions.values():
            if partition.range.contains(key):
                if partition.state == SERVING:
                    return partition
                held = f" (partition {partition.id} is {partition.state} here)"
        raise NotOwner(f"{self.name} serves no partition holding that key{held}")

    async def load(self, partition_id: int, key_range: keys.KeyRange,
                   create_if_missing: bool = False, acquired: Acquired | None = None,
                   parents: Sequence[RangePartition] = ()) -> LoadReport:
        """Load the partition here (idempotent). `acquired`: its lease, taken beforehand
        (`acquire`: a split takes its children's before the parent stops admitting);
        `parents`: the ones it was split or merged from here (RangePartition.load)."""
        if partition_id in self.retired:
            raise PreconditionFailed(f"partition {partition_id} was split or merged away")
        current = self.partitions.get(partition_id)
        if current is not None and current.state == SERVING:
            return self.reports[partition_id]
        task = self._loading.get(partition_id)
        if task is None:
            task = asyncio.get_running_loop().create_task(
                self._load(partition_id, key_range, create_if_missing, acquired, parents))
            self._loading[partition_id] = task
            task.add_done_callback(lambda _: self._loading.pop(partition_id, None))
        return await asyncio.shield(task)

    async def acquire(self, partition_id: int) -> Acquired:
        """The partition's lease, and where to name the partition it guards: losing the
        lease stops that partition."""
        loop = asyncio.get_running_loop()
        holder: list[RangePartition] = []

        def lost(_: Lease) -> None:  # on the lease's renewal thread
            faults.point("ps.lease_lost")  # a test delays noticing, to attack the fence
            if holder:
                loop.call_soon_threadsafe(
                    lambda: loop.create_task(holder[0].stop("its lease was lost")))

        ttl_s = self.limits.partition_lease_ttl_ms / 1000
        lease = await asyncio.to_thread(self.locks.acquire, lease_name(partition_id), ttl_s,
                                        self.limits.load_timeout_ms / 1000, lost)
        if lease is None:
            raise Unavailable(f"partition {partition_id}: its lease stayed held elsewhere")
        return lease, holder

    async def _load(self, partition_id: int, key_range: keys.KeyRange,
                    create_if_missing: bool, acquired: Acquired | None,
                    parents: Sequence[RangePartition]) -> LoadReport:
        lease, holder = acquired or await self.acquire(partition_id)
        loop = asyncio.get_running_loop()
        partition = RangePartition(partition_id, key_range, self.streams, self.limits,
                                   lease.token, lease.valid)
        holder.append(partition)
        try:
            report = await partition.load(create_if_missing, parents)
        except BaseException:
            await partition.stop("load failed")
            await asyncio.to_thread(lease.release)
            raise
        if not lease.valid():
            await partition.stop("lease ran out during the load")
            raise Unavailable(f"partition {partition_id}: the lease ran out during the load")
        self.partitions[partition_id] = partition
        self.leases[partition_id] = lease
        self.reports[partition_id] = report
        watcher = loop.create_task(self._forget_when_stopped(partition))
        self._watchers[partition] = watcher
        watcher.add_done_callback(lambda _: self._watchers.pop(partition, None))
        return report

    async def _forget_when_stopped(self, partition: RangePartition) -> None:
        """Once `partition` stops (for any reason: unloaded, lease lost, its committer
        failed): wait for its tasks, forget it, release its lease so that the PM can have it
        loaded again at once (here, when it asks, or elsewhere)."""
        await partition.stopped.wait()
        await partition.closed()
        if self.partitions.get(partition.id) is partition:
            del self.partitions[partition.id]
            self.reports.pop(partition.id, None)
        lease = self.leases.get(partition.id)
        if lease is not None and lease.token == partition.epoch:
            del self.leases[partition.id]
            try:
                await asyncio.to_thread(lease.release)
            except StampError as exc:  # it expires on its own
                log.warning("partition %d: releasing its lease: %s", partition.id, exc)

    async def unload(self, partition_id: int) -> None:
        partition = self.partitions.get(partition_id)
        if partition is not None:
            await partition.unload()
            watcher = self._watchers.get(partition)
            if watcher is not None:
                await asyncio.shield(watcher)  # the lease is released when Unload returns

    async def close(self) -> None:
        """A clean stop: every partition stops (each operation it holds is answered), its
        tasks end and its lease is released."""
        loading = list(self._loading.values())
        for task in loading:
            task.cancel()  # _load stops what it loaded and releases the lease
        if loading:
            await asyncio.gather(*loading, return_exceptions=True)
        for partition in list(self.partitions.values()):
            await partition.stop("server stopping")
        watchers = list(self._watchers.values())
        if watchers:
            await asyncio.gather(*watchers, return_exceptions=True)

    def load_pb(self, address: str) -> pb.ServerLoad:
        reply = pb.ServerLoad(name=self.name, address=address)
        for partition in self.partitions.values():
            report = partition.load_report()
            low, high = partition.range.low, partition.range.high
            reply.partitions.append(pb.PartitionLoad(
                partition_id=partition.id, state=partition.state, epoch=partition.epoch,
                range=pb.KeyRange(low=low, high=high or b"", has_high=high is not None),
                # What the balancing policy reads (balance_policy.py): operations waiting
                # for the commit log, and where a split would halve the load or the data.
                queue_ops=report.get("queue_ops", len(partition.committer.queue)),
                samples=[pb.LoadSample(key=key, left=left, right=right, contained=contained)
                         for key, left, right, contained in report.get("samples", ())],
                size_split_key=report.get("size_split_key") or b"",
                requests_sampled=report.get("requests_sampled", 0),
                **{k: report[k] for k in ("ops_per_s", "bytes_per_s", "p50_ms", "p99_ms",
                                          "size_bytes", "memtable_bytes", "runs")}))
        for partition_id in self._loading:
            reply.partitions.append(pb.PartitionLoad(partition_id=partition_id,
                                                     state="loading"))
        return reply


class PartitionServicer(pb_grpc.PartitionServerServicer):
    def __init__(self, server: PartitionServer, address: str) -> None:
        self.server = server
        self.address = address
        # The operations the Call streams carry, by kind (null objects while metrics are
        # off): how many, with what outcome, and how long each took here.
        self.op_seconds = metrics.histogram("stamp_ps_op_seconds", "latency of partition "
                                            "operations at the server, by kind", ("op",))
        self.ops = metrics.counter("stamp_ps_ops", "partition operations answered, by kind "
                                   "and outcome (ok, or the error's name)", ("op", "outcome"))
        self._append_seconds = self.op_seconds.labels("append")
        self._append_ok = self.ops.labels("append", "ok")

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

        def appended(request_id: int, started: float, first_seq: int | None,
                     error: StampError | None) -> None:
            nonlocal appends_open
            self._append_seconds.observe(clock() - started)
            if error is None:
                self._append_ok.inc()
                responses.put_nowait(pb.Response(id=request_id, first_seq=first_seq))
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
                    pressure.open_ops += len(batch.requests)
                    for request in batch.requests:
                        # Small appends, the bulk of the traffic, need no task of their own.
                        try:
                            if start_small_append(request, self.server.find, limits,
                                                  partial(appended, request.id, clock())):
                                appends_open += 1
                                appends_answered.clear()
                                continue
                        except StampError as exc:
                            if not (isinstance(exc, NotOwner) and self.server.held(request)):
                                self.ops.labels("append", type(exc).__name__).inc()
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
        return await release_extents(self.server, request)  # gc: extent_release.py

    @rpc.rpc_errors
    async def Status(self, request: pb.ServerStatusRequest, context: aio.ServicerContext
                     ) -> pb.ServerLoad:
        return self.server.load_pb(self.address)
