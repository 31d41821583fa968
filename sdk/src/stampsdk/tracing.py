"""Tracing of the SDK's calls (the optional extra `stampsdk[tracing]`), with OpenTelemetry.

Contracts:
- Off unless the environment asks for tracing the standard way (OTEL_TRACES_EXPORTER other
  than "none", or OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; or
  STAMP_TRACE_FILE, set by `stamp up --trace` for a local stamp) and opentelemetry is
  installed. Decided when this module is first imported (`refresh()` decides again). While
  off, nothing of opentelemetry is imported and a call pays one boolean test.
- On: every call (append, read, put, ...) is one client span "stampsdk.OP" covering its
  attempts and retries, with the attribute `stamp.request_id` (the call's token: what
  `stamp trace REQUEST_ID` looks up), and the channels to front ends carry the official gRPC
  client instrumentation (opentelemetry-instrumentation-grpc) on their unary and
  server-streamed calls, which puts the trace context in gRPC metadata. The Call stream
  carries many calls, so each request carries its call span's context itself, in its
  `traceparent` field (W3C trace context, signed with the rest of the request): the front
  end, the partition server and the extent nodes continue that trace, so one call is one
  trace down to the extent nodes' fsyncs.
- Like any library, the SDK only uses the OpenTelemetry API: the application chooses where
  spans go (a TracerProvider it sets up, or `opentelemetry-instrument`). With none set up,
  the spans are no-ops.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

FILE_ENV_VAR = "STAMP_TRACE_FILE"
TRACER_NAME = "stampsdk"
REQUEST_ID = "stamp.request_id"  # the attribute `stamp trace` looks a request up by


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks for tracing (module contract; as the server's
    common/tracing.py decides)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    return bool(environ.get(FILE_ENV_VAR)
                or (exporter and exporter != "none")
                or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def _installed() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except (ImportError, ValueError):
        return False


def refresh(environ: Mapping[str, str] | None = None) -> bool:
    """Decide again whether tracing is on (module contract); whether it is."""
    global ENABLED
    ENABLED = wanted(os.environ if environ is None else environ) and _installed()
    return ENABLED


ENABLED = False
refresh()


def request_id(request: Any, make: Any) -> str:
    """The id a call is traced by: its token (an append's, or a write's), which travels to
    the partition server; else a new one from `make()` (reads have none)."""
    token = request.token or (request.append.token if request.HasField("append") else "")
    return token or make()


def call_span(op: str, request_id: str, account: str, name: str) -> Any:
    """The client span of one call (a context manager; a null one while off)."""
    if not ENABLED:
        return contextlib.nullcontext()
    from opentelemetry import trace

    return trace.get_tracer(TRACER_NAME).start_as_current_span(
        f"stampsdk.{op}", kind=trace.SpanKind.CLIENT,
        attributes={REQUEST_ID: request_id, "stamp.account": account, "stamp.name": name})


def traceparent() -> str:
    """The W3C traceparent of the current span (the call's, inside `traced`), for the
    request's `traceparent` field; "" while off or when no span is current."""
    if not ENABLED:
        return ""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent", "")


# Set while a call's span is open: the call it wraps runs untraced inside it.
_IN_CALL: contextvars.ContextVar[bool] = contextvars.ContextVar("stampsdk_traced_call",
                                                               default=False)


def outermost() -> bool:
    """Whether the call being made is not already inside its own span (`traced`)."""
    return not _IN_CALL.get()


async def traced(call: Callable[..., Awaitable[Any]], request: Any, idempotent: bool,
                 nbytes: Any, request_id: str, account: str) -> Any:
    """`call(request, idempotent, nbytes)` (the client's `_call`) inside its span."""
    entered = _IN_CALL.set(True)
    try:
        with call_span(request.WhichOneof("op") or "call", request_id, account,
                       request.pname):
            return await call(request, idempotent, nbytes)
    finally:
        _IN_CALL.reset(entered)


def channel_interceptors() -> list[Any] | None:
    """The gRPC client instrumentation for a channel to a front end: its unary and
    server-streamed calls (the multiplexed Call stream carries many requests: a span of its
    own would say nothing of one); None while off or when the instrumentation is missing."""
    if not ENABLED:
        return None
    try:
        from opentelemetry.instrumentation.grpc import aio_client_interceptors
    except ImportError:
        return None
    unary_unary, unary_stream = aio_client_interceptors()[:2]
    return [unary_unary, unary_stream]
