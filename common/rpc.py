"""gRPC plumbing shared by every Stamp server and client.

- Channel and server options (message size limits) in one place.
- The one mapping of `common.errors` to gRPC status and back: a servicer method wrapped in
  `@rpc_errors` turns a StampError into its status code plus trailing metadata
  `stamp-error: <ClassName>`; `from_rpc_error` rebuilds the typed error on the client.
- The Faults service a server started with `--faults-rpc` exposes (common/server_main.py),
  so tests arm fault points and network partitions (common/isolation.py) at run time.
- TLS (common/tls.py): every channel made here is mutual TLS with this process's identity
  (`tls.channel_credentials`: its own certificate, or the operator's for a stamp it found),
  plain only where there is none (a stamp with `tls = false`); `add_port` binds a server's
  port the same way (a front end's public port: server-only TLS, `credentials`).
- Every channel made here is guarded and every server made here has the isolation guard, so
  a partition cuts every gRPC path in and out of a process; channels name their process in
  the user agent (`stamp-process/NAME`) for that guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar, cast

import grpc
from grpc import aio

from common import errors, faults, isolation, isolation_grpc, metrics, tls, tracing
from common.proto import faults_pb2, faults_pb2_grpc

log = logging.getLogger(__name__)

ERROR_KEY = "stamp-error"
LEADER_KEY = "stamp-leader"  # with NotLeader: the leader's address, when known
RETRY_AFTER_KEY = "stamp-retry-after-ms"  # with Throttled: when to try again
T = TypeVar("T")


def channel_options(message_bytes_max: int) -> list[tuple[str, Any]]:
    return [
        ("grpc.max_send_message_length", message_bytes_max),
        ("grpc.max_receive_message_length", message_bytes_max),
        # Loopback peers: notice a dead peer quickly instead of waiting for TCP timeouts.
        ("grpc.keepalive_time_ms", 10_000),
        ("grpc.keepalive_timeout_ms", 5_000),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1_000),
        ("grpc.enable_retries", 0),
        # Each channel its own subchannels: gRPC otherwise shares them process-wide, and a
        # fresh channel (ChannelCache) would inherit the old one's reconnect backoff.
        ("grpc.use_local_subchannel_pool", 1),
        # Who calls: the isolation guard of the server refuses calls from cut peers.
        ("grpc.primary_user_agent", isolation.user_agent()),
    ]


# Who this process is to an address: credentials for a channel to it (None: plain).
CredentialsFor = Callable[[str], "grpc.ChannelCredentials | None"]


def aio_channel(address: str, message_bytes_max: int,
                credentials: CredentialsFor = tls.channel_credentials) -> aio.Channel:
    """An aio channel to `address`, TLS as `credentials(address)` says (by default this
    process's identity); calls fail UNAVAILABLE while `address` is cut off."""
    options = channel_options(message_bytes_max)
    found = credentials(address)
    traced = tracing.aio_client_interceptors()  # None while tracing is off
    raw = (aio.insecure_channel(address, options=options, interceptors=traced)
           if found is None
           else aio.secure_channel(address, found, options=options, interceptors=traced))
    channel = isolation_grpc.GuardedChannel(raw, address, options, "aio")
    return cast(aio.Channel, channel)


def sync_channel(address: str, message_bytes_max: int,
                 credentials: CredentialsFor = tls.channel_credentials) -> grpc.Channel:
    """A blocking channel to `address`, TLS as `credentials(address)` says; calls fail
    UNAVAILABLE while `address` is cut off."""
    options = channel_options(message_bytes_max)
    found = credentials(address)
    raw = (grpc.insecure_channel(address, options=options) if found is None
           else grpc.secure_channel(address, found, options=options))
    raw = tracing.intercept_sync(raw)  # itself while tracing is off
    channel = isolation_grpc.GuardedChannel(raw, address, options, "sync")
    return cast(grpc.Channel, channel)


def add_port(server: aio.Server, address: str,
             credentials: grpc.ServerCredentials | None = None) -> int:
    """Bind `server` to `address` (HOST:PORT, port 0: a free one) and return the port: with
    `credentials` if given (a front end's public port), else mutual TLS with this process's
    identity (`tls.use`; a caller without a certificate of the stamp's CA is refused), plain
    only when the process has none."""
    found = credentials or tls.server_credentials()
    return (server.add_insecure_port(address) if found is None
            else server.add_secure_port(address, found))


class ChannelCache:
    """One aio channel per address, replaced when it sits in TRANSIENT_FAILURE.

    Why: after a peer dies, gRPC backs off between reconnect attempts, and a call made during
    the backoff fails at once even if the peer is back by then. A fresh channel connects now:
    a restarted peer is reachable immediately, and a dead one still fails fast."""

    def __init__(self, message_bytes_max: int,
                 credentials: CredentialsFor = tls.channel_credentials) -> None:
        self.message_bytes_max = message_bytes_max
        self._credentials = credentials
        self._channels: dict[str, aio.Channel] = {}
        self._retired: list[aio.Channel] = []

    def get(self, address: str) -> aio.Channel:
        channel = self._channels.get(address)
        if channel is not None and channel.get_state(
                try_to_connect=False) == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            self._retired.append(channel)  # closed with the cache: calls may still use it
            channel = None
        if channel is None:
            channel = aio_channel(address, self.message_bytes_max, self._credentials)
            self._channels[address] = channel
        return channel

    async def close(self) -> None:
        for channel in [*self._channels.values(), *self._retired]:
            await channel.close()
        self._channels.clear()
        self._retired.clear()


def server_options(message_bytes_max: int) -> list[tuple[str, Any]]:
    """Server side: accept the keepalive pings our channels send (every 10 s, idle or not).
    gRPC's default allows one ping per 5 minutes and answers more with GOAWAY
    "too_many_pings", which kills every stream on the connection (append streams included)."""
    return [
        *channel_options(message_bytes_max),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
        ("grpc.http2.max_ping_strikes", 0),
    ]


def aio_server(message_bytes_max: int, options: dict[str, Any] | None = None) -> aio.Server:
    """A Stamp server: calls from peers this process is cut off from are refused; while
    metrics are on, calls are counted and timed per method (common/metrics.py); while
    tracing is on, unary calls continue the caller's trace (common/tracing.py). `options`
    (gRPC channel arguments) replace or add to server_options'."""
    merged = dict(server_options(message_bytes_max)) | (options or {})
    return aio.server(options=list(merged.items()),
                      interceptors=[isolation_grpc.ServerGuard(), *metrics.interceptors(),
                                    *tracing.server_interceptors()])


def error_name(exc: BaseException) -> str:
    return type(exc).__name__ if isinstance(exc, errors.StampError) else "Internal"


def error_from_name(kind: str, message: str) -> errors.StampError:
    """Rebuild the error a server named in a streamed reply (`error_kind` fields)."""
    return errors.ERRORS_BY_NAME.get(kind, errors.Internal)(message)


def from_rpc_error(exc: grpc.RpcError) -> errors.StampError:
    """The typed Stamp error behind a failed call (transport failures become Unavailable)."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = (exc.details() if hasattr(exc, "details") else None) or str(code)
    metadata = dict(exc.trailing_metadata() or ()) if hasattr(exc, "trailing_metadata") else {}
    kind = metadata.get(ERROR_KEY)
    if kind == errors.NotLeader.__name__:
        return errors.NotLeader(details, leader=metadata.get(LEADER_KEY) or None)
    if kind == errors.Throttled.__name__:
        with contextlib.suppress(ValueError):
            return errors.Throttled(details, retry_after_s=int(
                metadata.get(RETRY_AFTER_KEY, "")) / 1000)
    if kind is not None:
        return errors.ERRORS_BY_NAME.get(kind, errors.Internal)(details)
    return errors.ERRORS_BY_CODE.get(code, errors.Unavailable)(f"{code.name}: {details}")


async def _abort(context: aio.ServicerContext, exc: BaseException) -> None:
    if isinstance(exc, errors.StampError):
        metadata: tuple[tuple[str, str], ...] = ((ERROR_KEY, type(exc).__name__),)
        if isinstance(exc, errors.NotLeader) and exc.leader:
            metadata += ((LEADER_KEY, exc.leader),)
        if isinstance(exc, errors.Throttled):
            metadata += ((RETRY_AFTER_KEY, str(round(exc.retry_after_s * 1000))),)
        await context.abort(exc.grpc_code, str(exc) or type(exc).__name__,
                            trailing_metadata=metadata)
    log.exception("unexpected error in RPC handler")
    await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {exc!r}",
                        trailing_metadata=((ERROR_KEY, "Internal"),))


def rpc_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """Map StampErrors raised by an aio servicer method (unary or server-streaming) to status."""
    if inspect.isasyncgenfunction(method):
        @functools.wraps(method)
        async def stream_wrapper(self: Any, request: Any,
                                 context: aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                async for item in method(self, request, context):
                    yield item
            except Exception as exc:
                await _abort(context, exc)
        return stream_wrapper

    @functools.wraps(method)
    async def unary_wrapper(self: Any, request: Any, context: aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except Exception as exc:
            await _abort(context, exc)
    return unary_wrapper


async def write_queued(queue: asyncio.Queue, context: aio.ServicerContext,
                       message_type: type, field: str, fault_point: str = "",
                       items_max: int = 0,
                       before_write: Callable[[Any], None] | None = None) -> None:
    """Write what is queued on a server stream, one message per wake-up (everything queued
    then, at most `items_max` if given), until a None arrives. `before_write` may add to
    each message (a partition server's pressure report)."""
    while True:
        first = await queue.get()
        if first is None:
            return
        items = [first]
        done = False
        while not queue.empty() and not (items_max and len(items) >= items_max):
            item = queue.get_nowait()
            if item is None:
                done = True
                break
            items.append(item)
        if fault_point:
            await faults.apoint(fault_point)
        message = message_type()
        getattr(message, field).extend(items)
        if before_write is not None:
            before_write(message)
        await context.write(message)
        if done:
            return


class Rewarm:
    """Re-opens a broken stream to a peer in the background, so that a peer that restarts
    finds it up when it is next needed (a connection made then costs milliseconds): first
    after `first_s`, then twice as long each time the peer is still away, giving up past
    `max_s` (the next use opens one anyway). `answered()` when the peer answers resets it."""

    def __init__(self, reopen: Callable[[], None], first_s: float = 0.5,
                 max_s: float = 16.0) -> None:
        self._reopen = reopen
        self._first_s = self._delay_s = first_s
        self._max_s = max_s
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def answered(self) -> None:
        self._delay_s = self._first_s

    def broken(self) -> None:
        loop = asyncio.get_running_loop()
        if self._closed or self._delay_s > self._max_s or (
                self._timer is not None and self._timer.when() > loop.time()):
            return
        self._timer = loop.call_later(self._delay_s, self._fire)
        self._delay_s *= 2

    def _fire(self) -> None:
        if not self._closed:
            self._reopen()

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()


async def call(awaitable: Awaitable[T]) -> T:
    """Await an aio call, raising the typed Stamp error if it fails."""
    try:
        return await awaitable
    except grpc.RpcError as exc:
        raise from_rpc_error(exc) from None


class FaultsServicer(faults_pb2_grpc.FaultsServicer):
    @rpc_errors
    async def Arm(self, request: faults_pb2.ArmRequest,
                  context: aio.ServicerContext) -> faults_pb2.ArmReply:
        for name, action, arg, after, times in faults.parse(request.spec):
            faults.arm(name, action, arg, after, times)
        return faults_pb2.ArmReply()

    @rpc_errors
    async def Disarm(self, request: faults_pb2.DisarmRequest,
                     context: aio.ServicerContext) -> faults_pb2.DisarmReply:
        faults.disarm(request.name or None)
        return faults_pb2.DisarmReply(armed=faults.armed())

    @rpc_errors
    async def Isolate(self, request: faults_pb2.IsolateRequest,
                      context: aio.ServicerContext) -> faults_pb2.IsolateReply:
        return faults_pb2.IsolateReply(cut=sorted(isolation.isolate(request.peers)))

    @rpc_errors
    async def Heal(self, request: faults_pb2.HealRequest,
                   context: aio.ServicerContext) -> faults_pb2.IsolateReply:
        return faults_pb2.IsolateReply(cut=sorted(isolation.heal(request.peers or None)))


def _faults_call(address: str, method: str, request: Any, timeout_s: float) -> Any:
    """One blocking call to the Faults service of the server at `address`."""
    with sync_channel(address, 4 * 1024 * 1024) as channel:
        try:
            return getattr(faults_pb2_grpc.FaultsStub(channel), method)(request,
                                                                        timeout=timeout_s)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                raise errors.PreconditionFailed(
                    f"the server at {address} does not serve the Faults service: it was "
                    f"started without --faults-rpc (a local stamp: 'stamp up --faults')"
                ) from None
            raise from_rpc_error(exc) from None


def arm_remote(address: str, spec: str, timeout_s: float = 5.0) -> None:
    """Arm fault points in the server at `address` (blocking; for tests and `stamp fault`)."""
    _faults_call(address, "Arm", faults_pb2.ArmRequest(spec=spec), timeout_s)


def disarm_remote(address: str, name: str | None = None, timeout_s: float = 5.0) -> None:
    """Disarm one fault point (None: every one) in the server at `address` (blocking)."""
    _faults_call(address, "Disarm", faults_pb2.DisarmRequest(name=name or ""), timeout_s)


ARMED_QUERY = "-armed-query-"  # a name no fault point has: disarming it disarms nothing


def armed_remote(address: str, timeout_s: float = 5.0) -> dict[str, str]:
    """The fault points armed in the server at `address`, each as faults.FaultSpec.describe
    (with its hits and firings); a point armed `times=N` that fired N times is gone. (The
    Faults service's Disarm answers what stays armed: asked to disarm no point, it tells.)"""
    reply = _faults_call(address, "Disarm", faults_pb2.DisarmRequest(name=ARMED_QUERY),
                         timeout_s)
    return dict(reply.armed)


def isolate_remote(address: str, peers: list[str], timeout_s: float = 5.0) -> list[str]:
    """Cut the server at `address` off from `peers` (names and addresses), both directions;
    returns everything it is cut off from now (blocking; for tests and `stamp isolate`)."""
    return list(_faults_call(address, "Isolate", faults_pb2.IsolateRequest(peers=peers),
                             timeout_s).cut)


def heal_remote(address: str, peers: list[str] | None = None,
                timeout_s: float = 5.0) -> list[str]:
    """Lift the cut of the server at `address` from `peers` (None: from everyone); returns
    what stays cut."""
    return list(_faults_call(address, "Heal", faults_pb2.HealRequest(peers=peers or []),
                             timeout_s).cut)
