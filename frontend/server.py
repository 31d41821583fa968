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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import cast

from grpc import aio

from common import rpc
from common.errors import StampError
from common.proto import frontend_pb2 as fe_pb
from common.proto import frontend_pb2_grpc as fe_grpc
from common.proto import partition_pb2 as pb
from frontend import names, sas, wire
from frontend.auth import MISS
from frontend.scan_ranges import account_ranges
from frontend.server_call import UNROUTED, FrontEnd

log = logging.getLogger(__name__)

RESPONSES_PER_MESSAGE_MAX = 4096
# Requests of one Call stream in flight at once: past this the front end stops reading the
# stream (gRPC flow control then holds the client back) until half of them are answered.
CALL_INFLIGHT_MAX = 20_000
# A stream's page or reply refused by the throttle waits at least this long before asking
# again (a retry-after of 0 must not spin).
STREAM_THROTTLE_WAIT_MIN_S = 0.001


class _Replies:
    """The answers of one Call stream not yet written, and its requests in flight.

    `reply` only appends (it runs once per request, from the partition servers' sessions);
    `write_all` writes whatever has gathered each time it wakes, in one message of at most
    RESPONSES_PER_MESSAGE_MAX (a write waits for the one before: answers that come meanwhile
    go out together), and ends once the client has closed its side and every request is
    answered, or at once if reading failed (the stream is gone)."""

    def __init__(self) -> None:
        self.unanswered = 0
        self.room = asyncio.Event()  # set while fewer than CALL_INFLIGHT_MAX // 2 in flight
        self.room.set()
        self._pending: list[pb.Response] = []
        self._wake = asyncio.Event()
        self._reading = True
        self._abandoned = False

    def reply(self, response: pb.Response) -> None:
        self._pending.append(response)
        self.unanswered -= 1
        if self.unanswered <= CALL_INFLIGHT_MAX // 2:
            self.room.set()
        self._wake.set()

    def reading_done(self, abandon: bool = False) -> None:
        self._reading = False
        self._abandoned = abandon
        self._wake.set()

    async def write_all(self, context: aio.ServicerContext) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._abandoned:
                return
            while self._pending:
                batch = pb.ResponseBatch()
                if len(self._pending) <= RESPONSES_PER_MESSAGE_MAX:
                    batch.responses.extend(self._pending)
                    self._pending.clear()
                else:
                    batch.responses.extend(self._pending[:RESPONSES_PER_MESSAGE_MAX])
                    del self._pending[:RESPONSES_PER_MESSAGE_MAX]
                await context.write(batch)
            if not self._reading and self.unanswered <= 0:
                return


class FrontEndServicer(fe_grpc.FrontEndServicer):
    def __init__(self, front_end: FrontEnd, name: str, address: str) -> None:
        self.fe = front_end
        self.name = name
        self.address = address

    async def Call(self, request_iterator: AsyncIterator[pb.RequestBatch],
                   context: aio.ServicerContext) -> None:
        """Many requests in flight on one stream; each answered when done, in any order."""
        replies = _Replies()
        reader = asyncio.get_running_loop().create_task(
            self._read_requests(request_iterator, replies))
        try:
            await replies.write_all(context)
        finally:
            reader.cancel()

    async def _read_requests(self, request_iterator: AsyncIterator[pb.RequestBatch],
                             replies: _Replies) -> None:
        """Start every request of the stream, holding back past CALL_INFLIGHT_MAX."""
        try:
            async for batch in request_iterator:
                replies.unanswered += len(batch.requests)
                for request in batch.requests:
                    self.fe.start(request, replies.reply)
                if replies.unanswered >= CALL_INFLIGHT_MAX:
                    replies.room.clear()
                    await replies.room.wait()
        except BaseException:
            replies.reading_done(abandon=True)  # the stream broke: answers go nowhere
            raise
        replies.reading_done()

    @rpc.rpc_errors
    async def Subscribe(self, request: pb.SubscribeRequest,
                        context: aio.ServicerContext) -> None:
        """Ends when the log is sealed and read to its end."""
        claim = wire.subscribe_claim(request)
        await self._authenticate(claim)
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
        claim = wire.scan_claim(request)
        token = await self._authenticate(claim)
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
        token = await self._authenticate(wire.scan_ranges_claim(request))
        # Fetched, not the cached map: a planner wants the partitions as they are now.
        current, addresses = await self.fe.client.partition_map()
        loads = await self.fe.client.partition_loads(addresses.values())
        return fe_pb.ScanRangesReply(
            ranges=account_ranges(current, request.account, wire.sas_prefix(token), loads),
            map_version=current.version)

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

    async def _authenticate(self, claim: wire.Claim) -> sas.SasToken | None:
        """The claim's token (None for a key), the refusal counted as Call's are."""
        self.fe.counters.requests += 1
        try:
            outcome = self.fe.auth.check_cached(claim)
            token = await self.fe.auth.check(claim) if outcome is MISS else outcome
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
