"""Prometheus metrics of a Stamp server process (issue 19, "Watch").

Contracts:
- Off unless `serve(host, port)` ran (a process started with `--metrics-port`; the local stamp
  passes one unless the config's `[watch] metrics_enabled` is false). While off, `histogram`
  and `counter` hand out null families whose children do nothing, `on_scrape` registers
  nothing, and `rpc.aio_server` installs no interceptor: a process with metrics off pays a
  method call at most (`stamp bench log-append --metrics compare` measures the difference).
- Recording is cheap and lock-free: a server records on its event loop thread only (the
  journal times its fdatasync on its own thread and records the time on the loop), the
  thread that also answers scrapes. A bucket is found by bisection and counted in a plain
  list: ~0.1 µs more than metrics off per operation, where prometheus-client's Histogram
  (a lock, a walk over every bucket) costs ~2 µs (`stamp bench log-append --metrics
  compare` prints both).
- Scrapes are answered on the event loop (`serve`), so collectors read the server's state on
  the thread that changes it (no torn dicts); a scrape costs the loop well under a
  millisecond at the sizes here, once per scrape interval.
- Everything a collector computes at scrape time (gauges of bytes, extents, partitions,
  Raft term) costs nothing between scrapes.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import grpc
import prometheus_client
from grpc import aio
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import REGISTRY, Collector

from common.config import WatchConfig

log = logging.getLogger(__name__)

_WATCH = WatchConfig()
# Seconds: from 100 µs (a journal fsync on a fast disk, a small read) to 10 s (a load).
LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                     0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Counts (records per group commit, operations per batch).
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
# Bytes (group-commit sizes).
BYTE_BUCKETS = (1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216)

_enabled = False


def enabled() -> bool:
    return _enabled


# ---- recording --------------------------------------------------------------------------

class Timing:
    """One histogram series: observations counted in fixed buckets (upper bounds, inclusive,
    plus +Inf), with their sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus buckets: (upper bound, observations at or below it)."""
        total, out = 0, []
        for bound, count in zip([*map(_float_text, self.bounds), "+Inf"], self.counts,
                                strict=True):
            total += count
            out.append((bound, total))
        return out


class Count:
    """One counter series."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class _Null:
    """A disabled family and its children: every call does nothing."""

    def labels(self, *values: str) -> _Null:
        return self

    def observe(self, value: float) -> None:
        pass

    def inc(self, amount: float = 1.0) -> None:
        pass


NULL: Any = _Null()


class HistogramFamily:
    def __init__(self, name: str, doc: str, labelnames: Sequence[str],
                 buckets: Sequence[float]) -> None:
        self.name, self.doc, self.labelnames = name, doc, tuple(labelnames)
        self.buckets = tuple(buckets)
        self.children: dict[tuple[str, ...], Timing] = {}

    def labels(self, *values: str) -> Timing:
        child = self.children.get(values)
        if child is None:
            child = self.children[values] = Timing(self.buckets)
        return child

    def collect(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)
        for values, child in list(self.children.items()):
            family.add_metric(list(values), child.cumulative(), child.sum)
        return family


class CounterFamily:
    def __init__(self, name: str, doc: str, labelnames: Sequence[str]) -> None:
        self.name, self.doc, self.labelnames = name, doc, tuple(labelnames)
        self.children: dict[tuple[str, ...], Count] = {}

    def labels(self, *values: str) -> Count:
        child = self.children.get(values)
        if child is None:
            child = self.children[values] = Count()
        return child

    def collect(self) -> Metric:
        family = CounterMetricFamily(self.name, self.doc, labels=self.labelnames)
        for values, child in list(self.children.items()):
            family.add_metric(list(values), child.value)
        return family


class _Families(Collector):
    """Every family and scrape-time callback of this process, as one collector."""

    def __init__(self) -> None:
        self.families: dict[str, HistogramFamily | CounterFamily] = {}
        self.callbacks: list[Callable[[], Iterable[Metric]]] = []

    def collect(self) -> Iterable[Metric]:
        for family in list(self.families.values()):
            yield family.collect()
        for callback in list(self.callbacks):
            try:
                yield from callback()
            except Exception:  # one broken gauge must not hide every other metric
                log.exception("metrics: a scrape-time collector failed")


_families = _Families()


def histogram(name: str, doc: str, labelnames: Sequence[str] = (),
              buckets: Sequence[float] = LATENCY_BUCKETS_S) -> Any:
    """The histogram family `name` (made once; the same object for the same name), or a null
    one while metrics are off. Make it after `serve` (in a constructor, not at import)."""
    if not _enabled:
        return NULL
    family = _families.families.get(name)
    if family is None:
        family = _families.families[name] = HistogramFamily(name, doc, labelnames, buckets)
    return family


def counter(name: str, doc: str, labelnames: Sequence[str] = ()) -> Any:
    """The counter family `name` (`_total` is added on export), or a null one while off."""
    if not _enabled:
        return NULL
    family = _families.families.get(name)
    if family is None:
        family = _families.families[name] = CounterFamily(name, doc, labelnames)
    return family


def on_scrape(callback: Callable[[], Iterable[Metric]]) -> None:
    """Have `callback` compute metric families at each scrape (gauges of state), while on."""
    if _enabled:
        _families.callbacks.append(callback)


def raft_families(status: dict[str, Any]) -> Iterable[Metric]:
    """Gauges of one Raft replica from its `raft_status()` (common/raft.py)."""
    yield GaugeMetricFamily("stamp_raft_term", "current Raft term", value=status["term"])
    yield GaugeMetricFamily("stamp_raft_commit_index", "Raft commit index",
                            value=status["commit_index"])
    yield GaugeMetricFamily("stamp_raft_last_applied", "last Raft entry applied",
                            value=status["last_applied"])
    yield GaugeMetricFamily("stamp_raft_log_entries", "entries in the Raft log",
                            value=status["log_entries"])
    yield GaugeMetricFamily("stamp_raft_leader", "1 on the leader, 0 elsewhere",
                            value=1 if status["role"] == "leader" else 0)
    yield CounterMetricFamily("stamp_raft_journal_syncs", "fsyncs of the Raft journal",
                              value=status["journal_syncs"])


def _float_text(value: float) -> str:
    return prometheus_client.utils.floatToGoString(value)


# ---- the gRPC interceptor: requests and latency per method ----------------------------------

class RpcMetrics(aio.ServerInterceptor):
    """On every Stamp server while metrics are on (`rpc.aio_server`): calls per method and
    outcome (`stamp_rpc_requests_total`), and the latency of unary-response methods
    (`stamp_rpc_seconds`; a stream's length says nothing of its operations: servers whose
    streams carry operations record those themselves). Wrapped handlers are made once per
    method."""

    def __init__(self) -> None:
        self._requests = counter("stamp_rpc_requests", "gRPC calls received, by method and "
                                 "outcome (ok, error)", ("method", "outcome"))
        self._seconds = histogram("stamp_rpc_seconds", "latency of unary-response gRPC "
                                  "calls, by method", ("method",))
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    async def intercept_service(self, continuation: Callable[..., Any],
                                handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        field, make = _HANDLER_FIELDS[(handler.request_streaming, handler.response_streaming)]
        short = method.rpartition(".")[2]  # "/stamp.x.Service/Method" -> "Service/Method"
        wrapped = make(self._measured(getattr(handler, field), short,
                                      handler.response_streaming),
                       request_deserializer=handler.request_deserializer,
                       response_serializer=handler.response_serializer)
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _measured(self, behavior: Callable[..., Any], method: str,
                  streaming_response: bool) -> Callable[..., Any]:
        ok, error = self._requests.labels(method, "ok"), self._requests.labels(method, "error")
        if streaming_response:
            if asyncio.iscoroutinefunction(behavior):
                async def counted(request: Any, context: aio.ServicerContext) -> Any:
                    try:
                        result = await behavior(request, context)
                    except BaseException:
                        error.inc()
                        raise
                    ok.inc()
                    return result
                return counted

            async def counted_stream(request: Any, context: aio.ServicerContext) -> Any:
                try:
                    async for item in behavior(request, context):
                        yield item
                except BaseException:
                    error.inc()
                    raise
                ok.inc()
            return counted_stream

        seconds = self._seconds.labels(method)
        clock = time.perf_counter

        async def timed(request: Any, context: aio.ServicerContext) -> Any:
            started = clock()
            try:
                result = await behavior(request, context)
            except BaseException:
                error.inc()
                raise
            finally:
                seconds.observe(clock() - started)
            ok.inc()
            return result
        return timed


_HANDLER_FIELDS = {(False, False): ("unary_unary", grpc.unary_unary_rpc_method_handler),
                   (False, True): ("unary_stream", grpc.unary_stream_rpc_method_handler),
                   (True, False): ("stream_unary", grpc.stream_unary_rpc_method_handler),
                   (True, True): ("stream_stream", grpc.stream_stream_rpc_method_handler)}


def interceptors() -> list[aio.ServerInterceptor]:
    """What `rpc.aio_server` adds to a server: the RPC metrics while on, else nothing."""
    return [RpcMetrics()] if _enabled else []


# ---- the HTTP endpoint ------------------------------------------------------------------------

async def serve(host: str, port: int | None) -> asyncio.Server | None:
    """Turn metrics on and answer `GET /metrics` on host:port from this event loop (None:
    metrics stay off). Call it first in a server's `serve`, before the gRPC server and the
    objects that record are made."""
    global _enabled
    if port is None:
        return None
    _enabled = True
    if _families not in getattr(REGISTRY, "_collector_to_names", {}):
        REGISTRY.register(_families)
    server = await asyncio.start_server(_answer, host, port)
    log.info("metrics on http://%s:%d/metrics", host, port)
    return server


def reset() -> None:
    """Metrics off again, every family and callback forgotten (for tests, which turn them on
    and off within one process)."""
    global _enabled
    _enabled = False
    _families.families.clear()
    _families.callbacks.clear()


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One HTTP/1.0-style exchange: the request line and headers, then the whole reply and
    close (Prometheus and `stamp top` open a connection per scrape)."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"),
                                      _WATCH.metrics_request_timeout_ms / 1000)
        if len(head) > _WATCH.metrics_request_bytes_max:
            raise ValueError("request head too large")
        method, path = ([*head.split(b"\r\n", 1)[0].split(b" "), b"", b""])[:2]
        if method != b"GET" or path.split(b"?")[0] not in (b"/metrics", b"/"):
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                         b"Connection: close\r\n\r\n")
        else:
            body = prometheus_client.generate_latest(REGISTRY)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: "
                         + prometheus_client.CONTENT_TYPE_LATEST.encode()
                         + b"\r\nContent-Length: " + str(len(body)).encode()
                         + b"\r\nConnection: close\r\n\r\n" + body)
        await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
            ConnectionError, ValueError):
        pass  # a scraper that went away or spoke nonsense: nothing to answer
    finally:
        writer.close()
