"""Tracing across the stamp (issue 31): OpenTelemetry spans, off unless asked for.

Contracts:
- Off by default. On when the process starts with the standard OTEL variables
  (OTEL_TRACES_EXPORTER other than "none", or OTEL_EXPORTER_OTLP_ENDPOINT /
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or with STAMP_TRACE_FILE (`stamp up --trace FILE` sets
  it for its children), and OTEL_SDK_DISABLED is not "true". `start(name)` decides once, before
  any server or channel is made (common/server_main.py calls it).
- Off costs nothing: this module imports nothing of opentelemetry, `enabled` stays False, the
  servers and channels of common/rpc.py get no interceptor, and `span()` returns one shared
  null context (a hot path may test `tracing.enabled` first and skip even the call).
- On: a TracerProvider whose resource names the process (service.name: lock-1, fe-1, ...),
  spans exported in batches by a BatchSpanProcessor, to STAMP_TRACE_FILE as JSON lines (one
  span a line, `JsonLinesExporter`, shared by every process of a stamp: each batch is one
  O_APPEND write) and/or over OTLP/gRPC to the OTEL endpoint. The official gRPC
  instrumentation (opentelemetry-instrumentation-grpc) traces unary calls and server-streamed
  replies of async generators made within a trace (a call made outside any span, as the
  background loops' are, is not traced), carrying the context in gRPC metadata. It is not put on
  request-streamed calls: the data path's streams (Call, AppendStream, ForwardStream) carry
  many requests each, so a span per stream says nothing of one request, and its server
  interceptor can only wrap handlers that are async generators, which those are not.
- A span made with `span()` is the child of the current context (contextvars); a process
  killed with SIGKILL loses the spans of its last batch (at most BATCH_DELAY_MS old).
- One trace per request, from the SDK's call span to the extent nodes' fsyncs, linked by
  parent ids. Within a process, by the current context (the SDK's "stampsdk.OP"; a partition
  server's "ps.commit" with its "ps.group_commit_wait" and the block's
  "ps.commit_log_append", and the stream client's "stream.append" under that; an extent
  node's "en.append" (primary) or "en.replica_write" (secondary), with the group commit of
  its journal record, "en.journal", and its "en.journal.fsync", under it; a group commit of
  no traced record leaves no span). Across the multiplexed streams (Call, AppendStream,
  ForwardStream), whose gRPC metadata is one per stream, by the `traceparent` field of each
  request (W3C trace context; `traceparent()` writes it, `parent_of()` reads it): the SDK's
  call span in the front end's Request, "fe.request" in the partition server's, the stream
  client's "stream.append" in the primary's AppendRequest, the primary's "en.append" in
  each secondary's ForwardEntry. The field is empty unless the sender traces; a hop that
  does not trace pays one boolean test per request and makes no context of its own (a front
  end forwards the SDK's as it came).
- Where one piece of work serves many requests (a commit-log block, one placed write of a
  message's appends, one journal group commit), its span is the child of the first traced
  request's and linked to the others'.
- Sampling is the SDK's standard OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG: the parent-
  based default follows the SDK's decision down the hops.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)

FILE_ENV_VAR = "STAMP_TRACE_FILE"
# How often a batch of spans goes out: short, so `stamp trace` finds a request's spans soon.
BATCH_DELAY_MS = 500
SPANS_QUEUED_MAX = 65_536  # a burst past this drops spans (counted by the SDK), never blocks
TRACER_NAME = "stamp"
# The attribute a request's spans carry its id in (the SDK's, stampsdk/tracing.py): the token
# of an append or a write, which travels with the request to the partition server.
REQUEST_ID = "stamp.request_id"
# A request's trace context as W3C writes it ("00-TRACE-SPAN-FLAGS", 55 characters for
# version 00); a longer field is not a context this build made, and is ignored.
TRACEPARENT_BYTES_MAX = 128

enabled = False  # the one check of the hot path
exporters: list[str] = []  # where spans go while on: JsonLinesExporter, OTLPSpanExporter...
_tracer: Any = None
_NULL = contextlib.nullcontext()


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for tracing (module contract)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    return bool(environ.get(FILE_ENV_VAR)
                or (exporter and exporter != "none")
                or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def start(name: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Set up tracing for the process `name` if the environment asks for it; whether it is
    on. Idempotent. Imports opentelemetry only when it is on."""
    global enabled, _tracer
    if enabled or not wanted(environ):
        return enabled
    from opentelemetry import trace
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    made = _exporters(environ)
    for exporter in made:
        provider.add_span_processor(BatchSpanProcessor(
            exporter, schedule_delay_millis=BATCH_DELAY_MS, max_queue_size=SPANS_QUEUED_MAX))
    trace.set_tracer_provider(provider)
    _tracer = trace.get_tracer(TRACER_NAME)
    exporters[:] = [type(exporter).__name__ for exporter in made]
    enabled = True
    log.info("tracing on: %s", ", ".join(exporters))
    return True


def _exporter_kinds(environ: Mapping[str, str]) -> list[str]:
    kinds = []
    if environ.get(FILE_ENV_VAR):
        kinds.append("JsonLinesExporter")
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if "console" in exporter.split(","):
        kinds.append("ConsoleSpanExporter")
    if "otlp" in exporter.split(",") or (
            not exporter and (environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                              or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))):
        kinds.append("OTLPSpanExporter")
    return kinds


def _exporters(environ: Mapping[str, str]) -> list[Any]:
    exporters: list[Any] = []
    for kind in _exporter_kinds(environ):
        if kind == "JsonLinesExporter":
            exporters.append(JsonLinesExporter(environ[FILE_ENV_VAR]))
        elif kind == "ConsoleSpanExporter":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter
            exporters.append(ConsoleSpanExporter())
        else:
            # The exporter reads the OTEL_EXPORTER_OTLP_* variables itself.
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            exporters.append(OTLPSpanExporter())
    return exporters


def stop() -> None:
    """Flush and stop (tests; a process that exits normally is flushed at exit by the SDK)."""
    global enabled, _tracer
    if not enabled:
        return
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if hasattr(provider, "shutdown"):
        provider.shutdown()
    enabled, _tracer = False, None
    exporters.clear()


def flush(timeout_ms: int = 5_000) -> None:
    """Export every span ended so far (tests, and before a planned exit)."""
    if not enabled:
        return
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if hasattr(provider, "force_flush"):
        provider.force_flush(timeout_ms)


# ---- spans --------------------------------------------------------------------------------

def span(name: str, attributes: Mapping[str, Any] | None = None,
         parent: Any = None, links: Sequence[Any] = ()) -> Any:
    """A context manager: a span `name` under the current one (or `parent`, a context from
    `current()` or `under()`), linked to the spans `links`, while tracing is on; the shared
    null context otherwise."""
    if not enabled:
        return _NULL
    return _tracer.start_as_current_span(name, context=parent, attributes=attributes,
                                         links=_links(links))


def _links(spans: Sequence[Any]) -> list[Any] | None:
    if not spans:
        return None
    from opentelemetry.trace import Link

    return [Link(span_.get_span_context()) for span_ in spans]


def current() -> Any:
    """The current trace context, to parent a later span made elsewhere (None when off)."""
    if not enabled:
        return None
    from opentelemetry import context

    return context.get_current()


def record(name: str, start_ns: int, end_ns: int, attributes: Mapping[str, Any] | None = None,
           parent: Any = None, links: Sequence[Any] = ()) -> Any:
    """A span that already happened (a wait measured from two clock readings, time.time_ns),
    linked to the spans `links`; its context, to record spans under it (None when off)."""
    if not enabled:
        return None
    done = _tracer.start_span(name, context=parent, attributes=attributes,
                              start_time=start_ns, links=_links(links))
    done.end(end_time=end_ns)
    return under(done)


def begin(name: str, attributes: Mapping[str, Any] | None = None, parent: Any = None,
          links: Sequence[Any] = ()) -> Any:
    """A span started now and ended by its holder (`.end()`), for work that outlives one
    block of code (an operation queued for group commit), linked to the spans `links`; None
    when off."""
    if not enabled:
        return None
    return _tracer.start_span(name, context=parent, attributes=attributes,
                              links=_links(links))


def current_span() -> Any:
    """The span current here, if there is one (None when off or outside any span): work
    queued now for later (a journal record) keeps it, to be traced under it when done."""
    if not enabled:
        return None
    from opentelemetry import trace

    found = trace.get_current_span()
    return found if found.get_span_context().is_valid else None


def using(span_: Any) -> Any:
    """A context manager making `span_` (from `begin`) current without ending it."""
    from opentelemetry import trace

    return trace.use_span(span_, end_on_exit=False)


def under(span_: Any) -> Any:
    """The context whose current span is `span_` (a parent for `span`, `record`, `begin`)."""
    from opentelemetry import trace

    return trace.set_span_in_context(span_)


def traceparent(span_: Any = None) -> str:
    """The W3C traceparent of `span_` (default: the current span), for the trace-context
    field of a request sent on a stream (module contract); "" when off or when there is no
    span."""
    if not enabled:
        return ""
    carrier: dict[str, str] = {}
    _propagator().inject(carrier, context=under(span_) if span_ is not None else None)
    return carrier.get("traceparent", "")


def parent_of(traceparent_: str) -> Any:
    """The context to make a span continuing `traceparent_` in (`parent` of `span`, `begin`,
    `record`); None, the current context, when off or when it is empty, too long or not a
    valid trace context."""
    if not enabled or not traceparent_ or len(traceparent_) > TRACEPARENT_BYTES_MAX:
        return None
    from opentelemetry import context, trace

    found = _propagator().extract({"traceparent": traceparent_}, context=context.Context())
    return found if trace.get_current_span(found).get_span_context().is_valid else None


def parent_and_links(traceparents: Sequence[str]) -> tuple[Any, list[Any]]:
    """For one span serving several requests (module contract): the context of the first
    valid one of `traceparents` as its parent (None: the current context) and the remote
    spans of the others, to link."""
    if not enabled:
        return None, []
    from opentelemetry import trace

    parents = [found for found in map(parent_of, traceparents) if found is not None]
    if not parents:
        return None, []
    return parents[0], [trace.get_current_span(found) for found in parents[1:]]


def continued(traceparent_: str) -> Any:
    """A context manager making `traceparent_`'s context current (for code that makes its
    spans in the current one, as the partition server's committer); the shared null context
    when off or when there is none to continue."""
    found = parent_of(traceparent_)
    return _NULL if found is None else _attached(found)


@contextlib.contextmanager
def _attached(found: Any) -> Iterator[None]:
    from opentelemetry import context

    token = context.attach(found)
    try:
        yield
    finally:
        context.detach(token)


_PROPAGATOR: Any = None


def _propagator() -> Any:
    """W3C trace context only (not the global propagator an application may set): the
    field carries a traceparent, nothing else."""
    global _PROPAGATOR
    if _PROPAGATOR is None:
        from opentelemetry.trace.propagation.tracecontext import (
            TraceContextTextMapPropagator,
        )
        _PROPAGATOR = TraceContextTextMapPropagator()
    return _PROPAGATOR


def request_id(request: Any) -> str:
    """The id a request (stamp.partition.Request) is traced by: its token, or its append's."""
    return request.token or (request.append.token if request.HasField("append") else "")


# ---- gRPC ---------------------------------------------------------------------------------

def server_interceptors() -> list[Any]:
    """The interceptors common/rpc.py's servers get: none while tracing is off."""
    if not enabled:
        return []
    from grpc import aio
    from opentelemetry.instrumentation.grpc import aio_server_interceptor

    # grpc takes only its own interceptor type.
    traced = type("TracedWhereItFits", (_TracedWhereItFits, aio.ServerInterceptor), {})
    return [traced(aio_server_interceptor(filter_=_continues_a_trace))]


def aio_client_interceptors() -> list[Any] | None:
    """The interceptors of an aio channel (None while off): unary calls only (module
    contract; a stream's calls go through untouched)."""
    if not enabled:
        return None
    from opentelemetry.instrumentation.grpc import aio_client_interceptors as made

    unary_unary, unary_stream = made(filter_=_in_a_trace)[:2]
    return [unary_unary, unary_stream]


def intercept_sync(channel: Any) -> Any:
    """A blocking channel with the client instrumentation while on, else `channel` itself."""
    if not enabled:
        return channel
    from opentelemetry.instrumentation.grpc import client_interceptor, intercept_channel

    return intercept_channel(channel, client_interceptor(filter_=_in_a_trace))


def _in_a_trace(_: Any) -> bool:
    """Whether a call is made within a span (of a request): only then is it traced and the
    context sent. A stamp's background calls (heartbeats, lease renewals, health checks)
    are most of its unary calls, and spans of their own would bury the requests' in the
    file (a small idle stamp made 50 a second)."""
    from opentelemetry import trace

    return trace.get_current_span().get_span_context().is_valid


def _continues_a_trace(handler_call_details: Any) -> bool:
    """Whether an incoming call carries a trace context (`_in_a_trace` on its caller)."""
    return any(key == "traceparent"
               for key, _ in handler_call_details.invocation_metadata or ())


def _fits(handler: Any) -> bool:
    """Whether the instrumentation's server interceptor can wrap `handler`: a unary request,
    and a reply that is unary or yielded by an async generator."""
    if handler.request_streaming:
        return False
    return not handler.response_streaming or inspect.isasyncgenfunction(handler.unary_stream)


class _TracedWhereItFits:
    """The instrumentation's aio server interceptor, applied to the handlers it fits."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def intercept_service(self, continuation: Callable[..., Any],
                                handler_call_details: Any) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or not _fits(handler):
            return handler

        async def resolved(_: Any) -> Any:
            return handler
        return await self._inner.intercept_service(resolved, handler_call_details)


# ---- the JSON-lines file ------------------------------------------------------------------

def span_record(span_: Any) -> dict[str, Any]:
    """One finished span (opentelemetry.sdk.trace.ReadableSpan) as the JSON object of a line:
    ids in hex as W3C trace context writes them, times in ns since the epoch."""
    context = span_.context
    parent = span_.parent
    return {
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{parent.span_id:016x}" if parent is not None else None,
        "name": span_.name,
        "service": span_.resource.attributes.get("service.name", ""),
        "kind": span_.kind.name,
        "start_ns": span_.start_time,
        "end_ns": span_.end_time,
        "status": span_.status.status_code.name,
        "attributes": {k: _plain(v) for k, v in (span_.attributes or {}).items()},
        "links": [{"trace_id": f"{link.context.trace_id:032x}",
                   "span_id": f"{link.context.span_id:016x}"} for link in span_.links],
    }


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


class JsonLinesExporter:
    """A SpanExporter writing each span as one JSON line to `path` (appended; every batch is
    one write to a file opened O_APPEND, so the processes of a stamp share one file without
    tearing each other's lines)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        data = "".join(json.dumps(span_record(s), separators=(",", ":")) + "\n"
                       for s in spans).encode()
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            written = os.write(self._fd, data)
        except OSError as exc:
            log.warning("tracing: cannot write %s: %s", self.path, exc)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS if written == len(data) else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_spans(path: str) -> Iterator[dict[str, Any]]:
    """The spans of a JSON-lines file, skipping a torn last line (a process killed mid-write)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            with contextlib.suppress(json.JSONDecodeError):
                record_ = json.loads(line)
                if isinstance(record_, dict) and "span_id" in record_:
                    yield record_
