"""One Call request at a front end (§6), in this order: authenticate (frontend/auth.py; a
write, or a read not marked as a read of the secondary, of an account this stamp is the geo
secondary of is refused there with Moved, issue 30),
check names, limits and payload CRC32Cs (server_checks.py), admit through the account
throttle (frontend/throttle.py) for the partition server its key routes to, clear `auth`,
forward to that server, and answer with the SDK's request id.

The hot path — keys cached, the map known, the server answering — runs without a task or a
coroutine per request: everything up to the forward is synchronous, the forward goes on the
server's multiplexed session (partition_layer/session.py `send`) with a `_Forward` that the
session answers, and that answers the SDK, as the server's response is read. Anything else
(an uncached account, no map yet, NotOwner, a broken stream) takes the slow path, a task
that awaits what it lacks and forwards through the partition client's `call`, which
refreshes the map and retries. Retrying is safe: the SDK sets a token on every mutation
(frontend/wire.py signs it), so a repeat is answered from the first attempt's outcome; a
mutation without one is not repeated after an ambiguous failure (`retry_safe`), its error
is the answer. With CURP on (frontend/curp_path.py, issue 32), a write that may take its
fast path leaves the hot path there, just before the forward; every answer loses CURP's
internal fields before it goes back.

What a stranger's request costs (issue 28): its tokens, names and credentials are checked
for size before anything else (frontend/auth.check_field_sizes), the store reads its
authentication starts count against its connection (`peer`), and a refusal's message is cut
to REFUSAL_CHARS_MAX characters (a message may quote what the client sent). Reads, gets and
peeks are charged to the account's byte bucket by the bytes they return (as a scan's pages
are), after the answer: their size is not known before.

Contract: `start(request, reply, peer)` calls `reply` exactly once with the request's Response
(carrying the SDK's id): success, or the error's class name and message (common/errors.py),
Throttled with its retry-after.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from common import deadline
from common.clock import Clock, SystemClock
from common.config import FrontEndLimits, PartitionLimits
from common.errors import (
    ChecksumError,
    DeadlineExceeded,
    Internal,
    InvalidArgument,
    NotOwner,
    PermissionDenied,
    StampError,
    Throttled,
    Unauthenticated,
    Unavailable,
)
from common.proto import partition_pb2 as pb
from frontend import wire
from frontend.auth import MISS, Authenticator, check_field_sizes
from frontend.curp_path import CurpPath, CurpSettings
from frontend.forward import ForwardingClient
from frontend.server_checks import check_request
from frontend.throttle import AccountThrottle
from partition_layer.requests import TOKEN_BYTES_MAX, error_response, route_key

log = logging.getLogger(__name__)

Reply = Callable[[pb.Response], None]
UNROUTED = "(unrouted)"  # the throttle's server name for a key whose server is unknown
# A refusal's message is cut to this many characters: it may quote what the client sent, and
# a stranger's bytes are not sent back at length.
REFUSAL_CHARS_MAX = 1024
# Ops whose answers carry the bytes they read: charged to the account's byte bucket by those.
READ_OPS = frozenset({"read", "get", "peek"})


def retry_safe(request: pb.Request) -> bool:
    """Whether `request` may be sent again after an attempt that may or may not have run:
    reads, trims and seals always; a mutation only with its token (the SDK always sets
    one; then a repeat is answered from the first attempt's outcome). A "not the owner"
    answer means not run: always retried."""
    op = request.WhichOneof("op")
    if op == "append":
        return bool(request.append.token)
    if op in ("put", "delete", "batch"):
        return bool(request.token)
    return True


@dataclass
class Counters:
    """FrontEndStatus's counters: requests taken and refusals made here."""

    requests: int = 0
    refused_unauthenticated: int = 0
    refused_permission: int = 0
    refused_invalid: int = 0
    throttled: int = 0

    def refused(self, exc: StampError) -> None:
        if isinstance(exc, Unauthenticated):
            self.refused_unauthenticated += 1
        elif isinstance(exc, PermissionDenied):
            self.refused_permission += 1
        elif isinstance(exc, InvalidArgument | ChecksumError):
            self.refused_invalid += 1
        elif isinstance(exc, Throttled):
            self.throttled += 1


class _Forward:
    """One request forwarded on the hot path: the session's Waiter for its answer
    (partition_layer/session.py `send`), which hands it to `FrontEnd._forwarded` at once —
    no future, done callback or loop turn per request."""

    __slots__ = ("_done", "front_end", "nbytes", "reply", "request", "sdk_id")

    def __init__(self, front_end: FrontEnd, request: pb.Request, sdk_id: int, nbytes: int,
                 reply: Reply) -> None:
        self.front_end = front_end
        self.request = request
        self.sdk_id = sdk_id
        self.nbytes = nbytes
        self.reply = reply
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, response: pb.Response) -> None:
        self._done = True
        self.front_end._forwarded(self, response, None)

    def set_exception(self, exc: BaseException) -> None:
        self._done = True
        self.front_end._forwarded(self, None, exc)


class FrontEnd:
    """A front end's request path; one per process, shared by every stream."""

    def __init__(self, auth: Authenticator, client: ForwardingClient,
                 throttle: AccountThrottle, limits: PartitionLimits,
                 fe_limits: FrontEndLimits, clock: Clock | None = None,
                 curp: CurpSettings | None = None) -> None:
        self.auth = auth
        self.clock = clock or SystemClock()
        self.client = client
        self.throttle = throttle
        self.limits = limits
        self.fe_limits = fe_limits
        self.counters = Counters()
        self._tasks: set[asyncio.Task[None]] = set()
        # CURP's fast path (frontend/curp_path.py), inert unless enabled.
        self.curp = CurpPath(curp or CurpSettings(), client, self.clock.wall, lambda r, i, n, a:
                             self._spawn(self._forward(r, i, n, a, refresh=True)))

    def observe_pressure(self, pressure: pb.ServerPressure) -> None:
        """A partition server's load, as it reports it on its Call stream (the sessions'
        `on_pressure`): the throttle refuses its top talkers while it is overloaded."""
        self.throttle.observe_server(pressure.server, pressure.queue_ops, pressure.p99_ms)

    # ---- the hot path -----------------------------------------------------------------------

    def start(self, request: pb.Request, reply: Reply, peer: str = "",
              sdk_clock: deadline.SenderClock | None = None,
              secondary_read: bool = False) -> None:
        """Take one request (module contract) that came on connection `peer`; `sdk_clock`
        judges the SDK's deadlines on its stream (common/deadline.py); `secondary_read`:
        its stream reads the account's secondary on purpose (wire.READ_FROM_KEY)."""
        self.counters.requests += 1
        sdk_id = request.id
        try:
            check_sizes(request)
            # The signature covers the SDK's timeout.
            claim = wire.call_claim(request, secondary_read)
            if self.auth.check_cached(claim) is MISS:
                self._spawn(self._slow(request, sdk_id, claim, reply, peer=peer,
                                       sdk_clock=sdk_clock))
                return
            self._take_up(request, claim, sdk_clock)
            nbytes = check_request(request, request.WhichOneof("op") or "", self.limits)
            route = self.client.route_name(request.account, request.pname)
            if route is None:
                self._spawn(self._slow(request, sdk_id, None, reply, nbytes))
                return
            server, address = route
            self.throttle.admit(request.account, server, nbytes).raise_if_refused()
        except StampError as exc:
            reply(self.refusal(sdk_id, exc))
            return
        except Exception as exc:  # a bug: answer (the stream lives on), and say so in the log
            log.exception("checking a request")
            reply(self._failure(sdk_id, exc))
            return
        request.ClearField("auth")  # partition servers never see credentials
        if self.curp.enabled and self.curp.take(request, sdk_id, nbytes, address, reply):
            return
        # A first attempt's short wait (common/retry.py): a frozen partition server is left
        # for a fresh map after about a second (`_forwarded` retries through the client).
        self.client.session(address).send(request, self.client.attempts.timeout_s(0, nbytes),
                                          nbytes, _Forward(self, request, sdk_id, nbytes, reply))

    def _take_up(self, request: pb.Request, claim: wire.Claim,
                 sdk_clock: deadline.SenderClock | None) -> None:
        """An authenticated request's deadline: DeadlineExceeded if the SDK gave up on it
        already (by its clock: sent at the signature's time), else set by this front end's
        clock for the partition server (common/deadline.py)."""
        now_s = self.clock.wall()
        sent_ms = claim.auth.timestamp_ms
        if sdk_clock is not None and request.timeout_ms and sent_ms:
            sdk_clock.check_times(sent_ms, sent_ms + request.timeout_ms, now_s)
        deadline.stamp(request, now_s)

    def _forwarded(self, forward: _Forward, response: pb.Response | None,
                   exc: BaseException | None) -> None:
        """The hot path's answer from the partition server (or its failure)."""
        if exc is None:
            assert response is not None
            if response.error != NotOwner.__name__:
                response.id = forward.sdk_id
                self.curp.outgoing(response)
                self._charge_read(forward.request, response)
                forward.reply(response)
                return
        elif not isinstance(exc, Unavailable | DeadlineExceeded) or not retry_safe(
                forward.request):
            forward.reply(self._failure(forward.sdk_id, exc))
            return
        # Not the owner (the map moved on) or the stream broke: retry through the client.
        self._spawn(self._forward(forward.request, forward.sdk_id, forward.nbytes,
                                  forward.reply, refresh=True))

    # ---- the slow path ----------------------------------------------------------------------

    async def _slow(self, request: pb.Request, sdk_id: int, claim: wire.Claim | None,
                    reply: Reply, nbytes: int | None = None, peer: str = "",
                    sdk_clock: deadline.SenderClock | None = None) -> None:
        try:
            if claim is not None:
                await self.auth.check(claim, peer=peer)
                self._take_up(request, claim, sdk_clock)
            if nbytes is None:
                nbytes = check_request(request, request.WhichOneof("op") or "", self.limits)
            key = route_key(request.account, request.pname)
            route = self.client.route(key)
            if route is None:
                with contextlib.suppress(StampError):  # `call` retries until its deadline
                    await self.client.refresh_map()
                route = self.client.route(key)
            server = route[0] if route is not None else UNROUTED
            self.throttle.admit(request.account, server, nbytes).raise_if_refused()
        except StampError as exc:
            reply(self.refusal(sdk_id, exc))
            return
        except Exception as exc:  # a bug: answer, and say so in the log
            log.exception("checking a request")
            reply(self._failure(sdk_id, exc))
            return
        request.ClearField("auth")
        await self._forward(request, sdk_id, nbytes, reply, refresh=False)

    async def _forward(self, request: pb.Request, sdk_id: int, nbytes: int, reply: Reply,
                       refresh: bool) -> None:
        try:
            deadline.check(request, self.clock.wall(), "front end")
            if refresh:
                await self.client.refresh_map()
            response = await self.client.call(request, idempotent=retry_safe(request),
                                              nbytes=nbytes)
        except Exception as exc:
            if not isinstance(exc, StampError):
                log.exception("forwarding a request")
            reply(self._failure(sdk_id, exc))
            return
        response.id = sdk_id
        self.curp.outgoing(response)
        self._charge_read(request, response)
        reply(response)

    def _charge_read(self, request: pb.Request, response: pb.Response) -> None:
        """A read's, get's or peek's answer charged to its account's byte bucket."""
        if request.WhichOneof("op") in READ_OPS and not response.error:
            self.throttle.charge(request.account, response.ByteSize())

    def _spawn(self, coro: object) -> None:
        task = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- answers ----------------------------------------------------------------------------

    def refusal(self, sdk_id: int, exc: StampError) -> pb.Response:
        """A request refused here (not forwarded): counted, and answered with the error."""
        self.counters.refused(exc)
        return _cut(error_response(sdk_id, exc))

    @staticmethod
    def _failure(sdk_id: int, exc: BaseException) -> pb.Response:
        if isinstance(exc, StampError):
            return _cut(error_response(sdk_id, exc))
        return _cut(error_response(sdk_id, Internal(f"front end: {exc!r}")))

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.curp.close()
        await self.client.close()


def check_sizes(request: pb.Request) -> None:
    """InvalidArgument or Unauthenticated if a field of `request` that is read before it is
    authenticated is larger than any valid one (auth.check_field_sizes; tokens by
    TOKEN_BYTES_MAX): nothing of such a request is parsed further, looked up or kept."""
    if len(request.token) > TOKEN_BYTES_MAX or (
            request.HasField("append") and len(request.append.token) > TOKEN_BYTES_MAX):
        raise InvalidArgument(f"a token has at most {TOKEN_BYTES_MAX} bytes")
    check_field_sizes(request.account, request.pname, request.auth)


def _cut(response: pb.Response) -> pb.Response:
    """`response` with its message cut to REFUSAL_CHARS_MAX characters."""
    if len(response.message) > REFUSAL_CHARS_MAX:
        response.message = response.message[:REFUSAL_CHARS_MAX] + "..."
    return response
