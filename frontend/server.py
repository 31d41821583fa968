"""The front end's gRPC service (common/proto/frontend.proto; DESIGN §6): stateless, any
number run side by side; each authenticates, checks, throttles and forwards to the partition
layer, holding nothing that matters (kill one: nothing is lost).

- Call: many requests in flight on one stream, each handled by `FrontEnd.start`
  (frontend/server_call.py) concurrently with the others, answered as each is done, in any
  order, batched into ResponseBatches as the partition server does.
- Subscribe: authenticated, then relayed from the partition servers across partition moves.
- Scan: authenticated (a shared access token's prefix bounds the range), then pages from
  frontend/scan.py.
  Both streams recheck their credentials before every reply: a key rotated, an account
  deleted or a token expired while one runs ends it with Unauthenticated. Both are
  throttled as Call's requests are (frontend/throttle.py): the start is one request of the
  account, refused with Throttled; each reply or page after it is one more, with its bytes,
  held at the front end until the account's buckets admit it.
- ScanRanges: authenticated as a scan, the account's range partitions (frontend/
  scan_ranges.py) from a fresh partition map, with the sizes their servers report.
- Status: counters.
Errors of the streaming RPCs are gRPC statuses (common/rpc.py maps StampError to codes).

What one Call stream may make a front end hold (issue 28): requests in flight and answers not
yet written, at most CALL_INFLIGHT_MAX in all, and at most `front_end.call_held_bytes_max`
bytes of answers — those gathered and not yet written, plus for each request in flight the
most its answer can be (`answer_bytes_max`: a read's or a get's bytes are not known before).
Past either bound the stream is not read (gRPC flow control then holds the client back) until
both are down to half: a client that never reads its answers holds that much and no more,
and a client that reads them is merely paced. A message of answers is at most
RESPONSE_MESSAGE_BYTES_MAX. The largest message a front end takes is `request_message_bytes_max`
(the gRPC receive limit, fe_main.py), and a connection carries at most
CONCURRENT_STREAMS_MAX streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, cast

from grpc import aio

from common import deadline, rpc, tracing
from common.config import PartitionLimits
from common.errors import StampError, Unavailable
from common.proto import frontend_pb2 as fe_pb
from common.proto import frontend_pb2_grpc as fe_grpc
from common.proto import partition_pb2 as pb
from frontend import names, sas, wire
from frontend.auth import MISS
from frontend.geo_door import GeoDoor
from frontend.scan_ranges import account_ranges
from frontend.server_call import UNROUTED, FrontEnd, Reply
from partition_layer.session import BATCH_BYTES_MAX as SDK_BATCH_BYTES_MAX

log = logging.getLogger(__name__)

RESPONSES_PER_MESSAGE_MAX = 4096
# A message of answers is cut past this many bytes (one answer may be larger: it goes alone);
# the SDK's receive limit is rpc_message_bytes_max.
RESPONSE_MESSAGE_BYTES_MAX = 4 * 1024 * 1024
# Requests of one Call stream in flight or answered and not yet written: past this the front
# end stops reading the stream (gRPC flow control then holds the client back) until half of
# them are written.
CALL_INFLIGHT_MAX = 20_000
# An answer's bytes beyond what it carries (id, error, etag, sequence numbers), and a read
# record's beyond its data (its sequence number and CRC32C): for `answer_bytes_max`.
ANSWER_OVERHEAD_BYTES = 256
RECORD_OVERHEAD_BYTES = 32
# Streams one connection may carry at once (gRPC's max_concurrent_streams): an SDK uses a
# Call stream per front end plus its Subscribe and Scan streams.
CONCURRENT_STREAMS_MAX = 128
# What a request may carry besides its records, values and row key: two names (2 x 63), a
# token (128), credentials (an account, a signature of 64 or a token of 512 characters, a
# time), an ETag, ids and field tags; and the least the SDK counts for a request when it
# packs requests into a message (stampsdk/requests.py `request_bytes`).
REQUEST_FIELDS_BYTES_MAX = 1024
SDK_REQUEST_ESTIMATE_BYTES_MIN = 256


def request_message_bytes_max(limits: PartitionLimits) -> int:
    """The largest RequestBatch a front end takes (its gRPC receive limit): the largest legal
    request — an append of `append_bytes_max` in `append_records_max` records, a put of
    `value_bytes_max`, or a batch of `batch_ops_max` items whose values total an append's
    bytes (PartitionLimits sets no bound on a batch's total: 100 values of 4 MiB would be
    400 MiB, which no transport took) — or the SDK's packing of many small requests: up to
    SDK_BATCH_BYTES_MAX of its own estimates, which count a small request as
    SDK_REQUEST_ESTIMATE_BYTES_MIN bytes when it may carry a row key and fields of
    `row_bytes_max + REQUEST_FIELDS_BYTES_MAX`."""
    append = limits.append_bytes_max + limits.append_records_max * RECORD_OVERHEAD_BYTES
    put = limits.value_bytes_max + limits.row_bytes_max
    batch = (limits.batch_ops_max * (limits.row_bytes_max + RECORD_OVERHEAD_BYTES)
             + limits.append_bytes_max)
    small = limits.row_bytes_max + REQUEST_FIELDS_BYTES_MAX
    packed = SDK_BATCH_BYTES_MAX * -(-small // SDK_REQUEST_ESTIMATE_BYTES_MIN)
    return max(append, put, batch, packed) + REQUEST_FIELDS_BYTES_MAX


def answer_bytes_max(request: pb.Request, limits: PartitionLimits) -> int:
    """The most bytes `request`'s answer can hold: a read's records (by its limit and
    read_bytes_max), a get's value; a small answer for anything else."""
    op = request.WhichOneof("op")
    if op == "read":
        records = min(request.read.limit or limits.read_records_max, limits.read_records_max)
        data = min(limits.read_bytes_max + limits.record_bytes_max,
                   records * limits.record_bytes_max)
        return ANSWER_OVERHEAD_BYTES + data + records * RECORD_OVERHEAD_BYTES
    if op == "get":
        return ANSWER_OVERHEAD_BYTES + limits.value_bytes_max
    return ANSWER_OVERHEAD_BYTES


class RequestPath(Protocol):
    """What a Call stream needs of the front end's request path (server_call.FrontEnd)."""

    limits: PartitionLimits

    def start(self, request: pb.Request, reply: Reply, peer: str = "",
              sdk_clock: deadline.SenderClock | None = None,
              secondary_read: bool = False) -> None: ...
# A stream's page or reply refused by the throttle waits at least this long before asking
# again (a retry-after of 0 must not spin).
STREAM_THROTTLE_WAIT_MIN_S = 0.001


class _Replies:
    """The answers of one Call stream not yet written, and its requests in flight.

    `reply` only appends (it runs once per request, from the partition servers' sessions);
    `write_all` writes whatever has gathered each time it wakes, in one message of at most
    RESPONSES_PER_MESSAGE_MAX answers and RESPONSE_MESSAGE_BYTES_MAX bytes (a write waits for
    the one before: answers that come meanwhile go out together), and ends once the client
    has closed its side and every request is answered, or at once if reading failed (the
    stream is gone). `held` and `held_bytes` count what the stream holds (module docstring):
    requests started and not answered, answers not yet written; `room` is set while the
    reader may go on."""

    def __init__(self, held_bytes_max: int) -> None:
        self.unanswered = 0
        self.held = 0
        self.held_bytes = 0
        self.held_bytes_max = held_bytes_max
        self.room = asyncio.Event()
        self.room.set()
        self._pending: list[pb.Response] = []
        self._pending_bytes: list[int] = []
        self._wake = asyncio.Event()
        self._reading = True
        self._abandoned = False

    def started(self, reserved_bytes: int) -> None:
        """A request is started whose answer may take `reserved_bytes`; past either bound
        the reader must wait for `room`."""
        self.unanswered += 1
        self.held += 1
        self.held_bytes += reserved_bytes
        if self.held >= CALL_INFLIGHT_MAX or self.held_bytes >= self.held_bytes_max:
            self.room.clear()

    def reply(self, response: pb.Response, reserved_bytes: int) -> None:
        nbytes = response.ByteSize()
        self._pending.append(response)
        self._pending_bytes.append(nbytes)
        self.unanswered -= 1
        self.held_bytes += nbytes - reserved_bytes
        self._released()
        self._wake.set()

    def reading_done(self, abandon: bool = False) -> None:
        self._reading = False
        self._abandoned = abandon
        self._wake.set()

    def _released(self) -> None:
        if self.held <= CALL_INFLIGHT_MAX // 2 and self.held_bytes <= self.held_bytes_max // 2:
            self.room.set()

    def _next_message(self) -> tuple[pb.ResponseBatch, int]:
        """The next message of pending answers, and its bytes."""
        count, nbytes = 0, 0
        for size in self._pending_bytes:
            if count and (count >= RESPONSES_PER_MESSAGE_MAX
                          or nbytes + size > RESPONSE_MESSAGE_BYTES_MAX):
                break
            count += 1
            nbytes += size
        batch = pb.ResponseBatch(responses=self._pending[:count])
        del self._pending[:count]
        del self._pending_bytes[:count]
        return batch, nbytes

    async def write_all(self, context: aio.ServicerContext) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._abandoned:
                return
            while self._pending:
                batch, nbytes = self._next_message()
                await context.write(batch)
                # Held until written: a client that does not read leaves the write waiting.
                self.held -= len(batch.responses)
                self.held_bytes -= nbytes
                self._released()
            if not self._reading and self.unanswered <= 0:
                return


class FrontEndServicer(fe_grpc.FrontEndServicer):
    def __init__(self, front_end: FrontEnd, name: str, address: str,
                 geo_door: GeoDoor | None = None) -> None:
        self.fe = front_end
        self.name = name
        self.address = address
        self.geo_door = geo_door  # inter-stamp replication's door (issue 30), if any
        self._held_bytes_max = front_end.fe_limits.call_held_bytes_max

    async def Call(self, request_iterator: AsyncIterator[pb.RequestBatch],
                   context: aio.ServicerContext) -> None:
        """Many requests in flight on one stream; each answered when done, in any order."""
        replies = _Replies(self._held_bytes_max)
        reader = asyncio.get_running_loop().create_task(
            self._read_requests(request_iterator, replies, context.peer(),
                                _secondary_read(context)))
        try:
            await replies.write_all(context)
        finally:
            reader.cancel()

    async def _read_requests(self, request_iterator: AsyncIterator[pb.RequestBatch],
                             replies: _Replies, peer: str, secondary_read: bool) -> None:
        """Start every request of the stream, holding back while it holds too much (module
        docstring); the requests' store lookups count against `peer`; `secondary_read`: the
        stream's reads are meant for the account's secondary (wire.READ_FROM_KEY)."""
        front_end: RequestPath = self.fe
        limits = front_end.limits
        start = front_end.start
        sdk_clock = deadline.SenderClock("front end")  # the SDK's deadlines on this stream
        try:
            async for batch in request_iterator:
                for request in batch.requests:
                    reserved = answer_bytes_max(request, limits)
                    replies.started(reserved)
                    if tracing.enabled:
                        span = _request_span(request)
                        start(request, _ending(span, lambda response, r=reserved:
                                               replies.reply(response, r)), peer, sdk_clock,
                              secondary_read)
                        # Only now: `start` has hashed the request as the SDK signed it
                        # (with the SDK's traceparent) before anything sent it on.
                        request.traceparent = tracing.traceparent(span)
                    else:
                        start(request, lambda response, r=reserved: replies.reply(response, r),
                              peer, sdk_clock, secondary_read)
                    if not replies.room.is_set():
                        await replies.room.wait()
        except BaseException:
            replies.reading_done(abandon=True)  # the stream broke: answers go nowhere
            raise
        replies.reading_done()

    @rpc.rpc_errors
    async def Subscribe(self, request: pb.SubscribeRequest,
                        context: aio.ServicerContext) -> None:
        """Ends when the log is sealed and read to its end."""
        claim = wire.subscribe_claim(request, _secondary_read(context))
        await self._authenticate(claim, context)
        self._checked(names.check_log, request.pname)
        server = self._server_of(request.account, request.pname)
        self._admit_or_refuse(request.account, server)
        # A request of its own to the partition servers: they never see credentials.
        async with contextlib.aclosing(self.fe.client.subscribe_replies(
                request.account, request.pname, request.from_seq)) as replies:
            async for reply in replies:
                await self._reauthenticate(claim)
                await self._admitted(request.account, server, reply.ByteSize())
                await context.write(reply)

    @rpc.rpc_errors
    async def Scan(self, request: fe_pb.ScanRequest, context: aio.ServicerContext) -> None:
        claim = wire.scan_claim(request, _secondary_read(context))
        token = await self._authenticate(claim, context)
        from frontend.scan import scan_pages  # written beside this; imported when used

        server = self._server_of(request.account, request.start_pname)
        self._admit_or_refuse(request.account, server)
        async with contextlib.aclosing(scan_pages(self.fe.client, request,
                                                  wire.sas_prefix(token),
                                                  self.fe.fe_limits)) as pages:
            async for page in pages:
                await self._reauthenticate(claim)
                await self._admitted(request.account, server, page.ByteSize())
                await context.write(page)

    @rpc.rpc_errors
    async def ScanRanges(self, request: fe_pb.ScanRangesRequest,
                         context: aio.ServicerContext) -> fe_pb.ScanRangesReply:
        token = await self._authenticate(
            wire.scan_ranges_claim(request, _secondary_read(context)), context)
        # Fetched, not the cached map: a planner wants the partitions as they are now.
        current, addresses = await self.fe.client.partition_map()
        loads = await self.fe.client.partition_loads(addresses.values())
        return fe_pb.ScanRangesReply(
            ranges=account_ranges(current, request.account, wire.sas_prefix(token), loads),
            map_version=current.version)

    @rpc.rpc_errors
    async def Replicate(self, request: fe_pb.ReplicateCall, context: aio.ServicerContext
                        ) -> fe_pb.ReplicateAnswer:
        """Inter-stamp replication's door (frontend/geo_door.py)."""
        if self.geo_door is None:
            raise Unavailable("this front end takes no replicated writes")
        return await self.geo_door.replicate(request, context.peer())

    @rpc.rpc_errors
    async def Status(self, request: fe_pb.FrontEndStatusRequest,
                     context: aio.ServicerContext) -> fe_pb.FrontEndStatus:
        counters = self.fe.counters
        return fe_pb.FrontEndStatus(
            name=self.name, address=self.address, requests=counters.requests,
            refused_unauthenticated=counters.refused_unauthenticated,
            refused_permission=counters.refused_permission,
            refused_invalid=counters.refused_invalid, throttled=counters.throttled,
            accounts_cached=self.fe.auth.accounts_cached(),
            map_version=self.fe.client.map_version())

    async def _authenticate(self, claim: wire.Claim, context: aio.ServicerContext
                            ) -> sas.SasToken | None:
        """The claim's token (None for a key), the refusal counted as Call's are; the store
        reads it needs count against the connection's peer."""
        self.fe.counters.requests += 1
        try:
            outcome = self.fe.auth.check_cached(claim)
            token = (await self.fe.auth.check(claim, peer=context.peer()) if outcome is MISS
                     else outcome)
            names.check_account(claim.account)
        except StampError as exc:
            self.fe.counters.refused(exc)
            raise
        return cast(sas.SasToken | None, token)

    async def _reauthenticate(self, claim: wire.Claim) -> None:
        """Before each reply of a stream: its credentials still hold (Authenticator.recheck:
        a key rotated or a token expired while it ran ends it, Unauthenticated)."""
        try:
            await self.fe.auth.recheck(claim)
        except StampError as exc:
            self.fe.counters.refused(exc)
            raise

    # ---- throttling of the streams: Call's requests are admitted in FrontEnd.start ----------

    def _server_of(self, account: str, pname: str) -> str:
        """The throttle's name for the partition server a stream starts on."""
        route = self.fe.client.route_name(account, pname)
        return route[0] if route is not None else UNROUTED

    def _admit_or_refuse(self, account: str, server: str) -> None:
        """A stream's start is one request of its account: refused (Throttled, with its
        retry-after) as a Call request would be."""
        try:
            self.fe.throttle.admit(account, server, 0).raise_if_refused()
        except StampError as exc:
            self.fe.counters.refused(exc)
            raise

    async def _admitted(self, account: str, server: str, nbytes: int) -> None:
        """Each page or reply of a stream is one request of its account with its bytes:
        held here until the account's buckets (and the server's overload) let it through,
        so a stream runs at the account's rates instead of around them."""
        nbytes = min(nbytes, self.fe.fe_limits.account_burst_bytes_max)
        while not (decision := self.fe.throttle.admit(account, server, nbytes)).admitted:
            self.fe.counters.throttled += 1
            await asyncio.sleep(max(decision.retry_after_s, STREAM_THROTTLE_WAIT_MIN_S))

    def _checked(self, check: Callable[[str], str], name: str) -> None:
        try:
            check(name)
        except StampError as exc:
            self.fe.counters.refused(exc)
            raise


def _secondary_read(context: aio.ServicerContext) -> bool:
    """Whether the call's reads are meant for the account's secondary (wire.READ_FROM_KEY)."""
    return wire.secondary_read(context.invocation_metadata())


def _request_span(request: pb.Request) -> Any:
    """A span "fe.request" begun now (tracing on), the child of the SDK's call span that
    the request carries (its `traceparent`), with the request id the SDK traced it by
    (common/tracing.request_id). The partition server's spans of the request go under it:
    the caller puts its context in the request forwarded (common/tracing.py contract)."""
    return tracing.begin("fe.request", {
        tracing.REQUEST_ID: tracing.request_id(request), "stamp.account": request.account,
        "stamp.name": request.pname, "stamp.op": request.WhichOneof("op") or ""},
        parent=tracing.parent_of(request.traceparent))


def _ending(span: Any, reply: Reply) -> Reply:
    """`reply`, ending `span` when the request is answered."""
    def answered(response: pb.Response) -> None:
        span.set_attribute("error", response.error)
        span.end()
        reply(response)
    return answered
