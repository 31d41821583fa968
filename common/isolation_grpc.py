"""The gRPC half of a network partition (common/isolation.py holds the cut set).

- `GuardedChannel`: every channel common/rpc.py makes. A call to a cut address goes to a
  socket nobody listens on and fails UNAVAILABLE at once, as across a real partition; aio
  calls under way are tracked, and a cut severs them (their caller gets UNAVAILABLE).
- `ServerGuard`: on every server common/rpc.py makes. A call from a cut process (named by its
  channel's user agent, `stamp-process/NAME`) is refused UNAVAILABLE; calls under way are
  tracked, and a cut ends them UNAVAILABLE. The Faults service is exempt: it is the
  operator's channel, the way a heal reaches an isolated process.
Sync calls (the lock client's short unary calls on worker threads) are checked when they
start.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import uuid
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import grpc
from grpc import aio

from common import isolation

EXEMPT_SERVICE = "/stamp.faults.Faults/"
CUT_DETAILS = "network partition (isolated)"

# Outgoing calls under way, by target address; incoming calls under way, by caller name.
_outgoing: dict[str, weakref.WeakSet[Any]] = {}
_incoming: dict[str, set[aio.ServicerContext]] = {}
_ending: set[asyncio.Task[None]] = set()  # cut calls being ended (strong refs until done)
# Where a cut call goes: an abstract Unix socket nobody listens on (refused at once).
_BLACKHOLE = f"unix-abstract:stamp-isolated-{uuid.uuid4().hex}"
_blackhole_channels: dict[Any, Any] = {}  # "sync", or an event loop (aio)


def _end_calls_under_way(cut: frozenset[str]) -> None:
    """After a cut: end every call under way to or from a peer now cut."""
    for address in [a for a in _outgoing if a in cut]:
        for call in list(_outgoing.pop(address)):
            call.sever()
    for name in [n for n in _incoming if n in cut]:
        for context in list(_incoming.pop(name)):
            # On the server's loop: isolate runs there, from the Faults service.
            task = asyncio.get_running_loop().create_task(_end_cut(context))
            _ending.add(task)
            task.add_done_callback(_ending.discard)


isolation.on_cut(_end_calls_under_way)


# --- outgoing: guarded channels ------------------------------------------------------------

def _blackhole(kind: str, options: list[tuple[str, Any]]) -> Any:
    """The channel a cut call goes to: one for sync calls, one per event loop for aio calls
    (an aio channel belongs to the loop that made it; a closed loop's is forgotten)."""
    if kind != "aio":
        if "sync" not in _blackhole_channels:
            _blackhole_channels["sync"] = grpc.insecure_channel(_BLACKHOLE, options=options)
        return _blackhole_channels["sync"]
    loop = asyncio.get_running_loop()
    for key in [k for k in _blackhole_channels if k != "sync" and k.is_closed()]:
        del _blackhole_channels[key]
    if loop not in _blackhole_channels:
        _blackhole_channels[loop] = aio.insecure_channel(_BLACKHOLE, options=options)
    return _blackhole_channels[loop]


class _GuardedMultiCallable:
    """One RPC method of a guarded channel: a call goes to the target unless it is cut."""

    __slots__ = ("_cut_callable", "_make_cut", "_real", "_target", "_track")

    def __init__(self, real: Any, make_cut: Callable[[], Any], target: str,
                 track: bool) -> None:
        self._real = real
        self._make_cut = make_cut
        self._cut_callable: Any = None
        self._target = target
        self._track = track

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if isolation.is_cut(self._target):
            if self._cut_callable is None:
                self._cut_callable = self._make_cut()
            return self._cut_callable(*args, **kwargs)
        call = self._real(*args, **kwargs)
        if not self._track:
            return call
        tracked = _TrackedCall(call)
        calls = _outgoing.get(self._target)
        if calls is None:
            calls = _outgoing[self._target] = weakref.WeakSet()
        calls.add(tracked)
        return tracked

    def __getattr__(self, name: str) -> Any:  # with_call, future (sync multicallables)
        if isolation.is_cut(self._target):
            if self._cut_callable is None:
                self._cut_callable = self._make_cut()
            return getattr(self._cut_callable, name)
        return getattr(self._real, name)


def _cut_error() -> aio.AioRpcError:
    return aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, aio.Metadata(), aio.Metadata(),
                           details=CUT_DETAILS)


def _severed(call: _TrackedCall) -> bool:
    """Whether a CancelledError out of `call` is the cut's doing, not the awaiting task's."""
    task = asyncio.current_task()
    return call.severed and (task is None or not task.cancelling())


class _TrackedCall:
    """An aio call under way, as its caller sees it: when a cut severs it, the caller gets
    UNAVAILABLE (as across a real partition) rather than the CancelledError that gRPC raises
    for a call cancelled locally, which would look like the caller's own cancellation."""

    __slots__ = ("__weakref__", "_call", "severed")

    def __init__(self, call: Any) -> None:
        self._call = call
        self.severed = False

    def sever(self) -> None:
        self.severed = True
        self._call.cancel()

    def __await__(self) -> Any:
        try:
            return (yield from self._call.__await__())
        except asyncio.CancelledError:
            if _severed(self):
                raise _cut_error() from None
            raise

    async def read(self) -> Any:
        try:
            return await self._call.read()
        except asyncio.CancelledError:
            if _severed(self):
                raise _cut_error() from None
            raise

    async def write(self, request: Any) -> None:
        if self.severed:
            raise _cut_error()
        try:
            await self._call.write(request)
        except (asyncio.CancelledError, asyncio.InvalidStateError):
            if _severed(self):
                raise _cut_error() from None
            raise

    def __aiter__(self) -> Any:
        return self._responses()

    async def _responses(self) -> Any:
        try:
            async for response in self._call:
                yield response
        except asyncio.CancelledError:
            if _severed(self):
                raise _cut_error() from None
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)


class GuardedChannel:
    """A gRPC channel (aio or sync) whose calls to a cut target fail as across a partition.

    Everything else (state, close, context manager) is the channel's own. Aio calls are
    tracked so that a cut cancels those under way; sync calls (short unary calls on worker
    threads) are checked when they start."""

    def __init__(self, channel: Any, target: str, options: list[tuple[str, Any]],
                 kind: str) -> None:
        self._channel = channel
        self._target = target
        self._options = options
        self._kind = kind

    def _method(self, factory: str, method: str, *args: Any, **kwargs: Any) -> Any:
        real = getattr(self._channel, factory)(method, *args, **kwargs)

        def make_cut() -> Any:
            return getattr(_blackhole(self._kind, self._options), factory)(
                method, *args, **kwargs)

        return _GuardedMultiCallable(real, make_cut, self._target, self._kind == "aio")

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._method("unary_unary", method, *args, **kwargs)

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._method("unary_stream", method, *args, **kwargs)

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._method("stream_unary", method, *args, **kwargs)

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._method("stream_stream", method, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._channel, name)

    async def __aenter__(self) -> GuardedChannel:
        await self._channel.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._channel.__aexit__(*exc)

    def __enter__(self) -> GuardedChannel:
        self._channel.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._channel.__exit__(*exc)


# --- incoming: the server guard ------------------------------------------------------------

def caller_name(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    """The Stamp process that made a call, from its user agent (None: not a Stamp client)."""
    for key, value in metadata or ():
        if key == "user-agent":
            first = str(value).split(" ", 1)[0]
            if first.startswith(isolation.USER_AGENT_PREFIX):
                return first[len(isolation.USER_AGENT_PREFIX):]
            return None
    return None


async def _refuse(context: aio.ServicerContext) -> None:
    await context.abort(grpc.StatusCode.UNAVAILABLE, CUT_DETAILS)


async def _end_cut(context: aio.ServicerContext) -> None:
    """End a call under way that a cut interrupts: its status (UNAVAILABLE, as across a
    partition) goes at once and the call is over; the handler's pending read or write ends
    with it. (Cancelling the handler's task instead breaks the call's pending operation
    in gRPC core, and the peer sees INTERNAL.)"""
    if context.done():
        return
    with contextlib.suppress(Exception):  # AbortError, raised once the status is sent
        await context.abort(grpc.StatusCode.UNAVAILABLE, CUT_DETAILS)


def _register(caller: str | None, context: aio.ServicerContext) -> None:
    """Track a call under its caller, so that a cut ends it."""
    if caller is not None:
        _incoming.setdefault(caller, set()).add(context)


def _unregister(caller: str | None, context: aio.ServicerContext) -> None:
    if caller is not None:
        contexts = _incoming.get(caller)
        if contexts is not None:
            contexts.discard(context)
            if not contexts:
                _incoming.pop(caller, None)


def _guard_behavior(behavior: Callable[..., Any], streaming_response: bool) -> Callable[..., Any]:
    """Wrap a handler so a call from a cut peer is refused, and a call under way is tracked
    (a cut ends it, `isolate`)."""
    if streaming_response and inspect.isasyncgenfunction(behavior):
        async def guarded_stream(request: Any, context: aio.ServicerContext) -> Any:
            caller = caller_name(context.invocation_metadata())
            if isolation.is_cut(caller):
                await _refuse(context)
            _register(caller, context)
            try:
                async for item in behavior(request, context):
                    yield item
            finally:
                _unregister(caller, context)
        return guarded_stream

    async def guarded(request: Any, context: aio.ServicerContext) -> Any:
        caller = caller_name(context.invocation_metadata())
        if isolation.is_cut(caller):
            await _refuse(context)
        _register(caller, context)
        try:
            return await behavior(request, context)
        finally:
            _unregister(caller, context)
    return guarded


_HANDLER_FIELDS = {(False, False): ("unary_unary", grpc.unary_unary_rpc_method_handler),
                   (False, True): ("unary_stream", grpc.unary_stream_rpc_method_handler),
                   (True, False): ("stream_unary", grpc.stream_unary_rpc_method_handler),
                   (True, True): ("stream_stream", grpc.stream_stream_rpc_method_handler)}


class ServerGuard(aio.ServerInterceptor):
    """On every Stamp server: calls from cut peers are refused, calls under way are tracked.
    Wrapped handlers are made once per method (the caller is read per call)."""

    def __init__(self) -> None:
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    async def intercept_service(self, continuation: Callable[..., Any],
                                handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(EXEMPT_SERVICE):
            return handler
        cached = self._wrapped.get(handler_call_details.method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        field, make = _HANDLER_FIELDS[(handler.request_streaming, handler.response_streaming)]
        wrapped = make(_guard_behavior(getattr(handler, field), handler.response_streaming),
                       request_deserializer=handler.request_deserializer,
                       response_serializer=handler.response_serializer)
        self._wrapped[handler_call_details.method] = (handler, wrapped)
        return wrapped
