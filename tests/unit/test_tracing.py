"""common/tracing.py and `stamp trace` without a stamp: when tracing is on, that off imports
nothing of opentelemetry (servers, channels, the SDK), the trace context a request carries
over a stream (written and read, the SDK's too), the JSON-lines exporter's lines, and the
span trees `stamp trace` prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from stampsdk import tracing as sdk_tracing

from common import tracing
from tools import cli
from tools.cmd_trace import request_traces, trace_rows

ROOT = Path(__file__).resolve().parents[2]
OTEL_VARS = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
             "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", tracing.FILE_ENV_VAR)


@pytest.mark.parametrize(("environ", "on"), [
    ({}, False),
    ({"OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317"}, True),
    ({tracing.FILE_ENV_VAR: "/tmp/t.jsonl"}, True),
    ({tracing.FILE_ENV_VAR: "/tmp/t.jsonl", "OTEL_SDK_DISABLED": "true"}, False),
])
def test_on_only_when_the_environment_asks(environ: dict[str, str], on: bool) -> None:
    assert tracing.wanted(environ) is on


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in OTEL_VARS}


OFF_SCRIPT = """
import asyncio, sys
from common import rpc, tracing
assert tracing.start("fe-1") is False
async def main():
    server = rpc.aio_server(1 << 20)
    channel = rpc.aio_channel("127.0.0.1:1", 1 << 20)
    await channel.close()
    rpc.sync_channel("127.0.0.1:1", 1 << 20).close()
    with tracing.span("ps.commit"):
        pass
asyncio.run(main())
import stampsdk, stampsdk.aio, stampsdk.tracing
assert stampsdk.tracing.ENABLED is False
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
assert not loaded, loaded
print("clean")
"""


def test_off_imports_nothing_of_opentelemetry() -> None:
    """Servers, channels, spans and the SDK with tracing off: no opentelemetry module loaded
    (a fresh interpreter: this one has loaded it for the tests below)."""
    done = subprocess.run([sys.executable, "-c", OFF_SCRIPT], cwd=ROOT, env=_clean_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "clean"


OTLP_SCRIPT = """
from opentelemetry import trace
from common import tracing
assert tracing.start("ps-1")
print(tracing.exporters)
print(trace.get_tracer_provider().resource.attributes["service.name"])
print([type(i).__name__ for i in tracing.server_interceptors()],
      len(tracing.aio_client_interceptors()))
tracing.stop()
"""


def test_on_the_otel_variables_choose_the_exporters(tmp_path: Path) -> None:
    """OTLP when the endpoint is set (nothing is sent: no span is made), the file beside it
    when STAMP_TRACE_FILE is set too; the process is the resource's service.name."""
    env = {**_clean_env(), "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
           tracing.FILE_ENV_VAR: str(tmp_path / "t.jsonl")}
    done = subprocess.run([sys.executable, "-c", OTLP_SCRIPT], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['JsonLinesExporter', 'OTLPSpanExporter']", "ps-1",
                                        "['TracedWhereItFits'] 2"]


def test_off_is_the_shared_null_context() -> None:
    assert not tracing.enabled
    assert tracing.span("x") is tracing.span("y")
    assert tracing.begin("x") is None and tracing.current() is None
    assert tracing.server_interceptors() == [] and tracing.aio_client_interceptors() is None


VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_off_a_request_carries_no_trace_context() -> None:
    assert not tracing.enabled and not sdk_tracing.ENABLED
    assert tracing.traceparent() == "" and sdk_tracing.traceparent() == ""
    assert tracing.parent_of(VALID) is None
    assert tracing.continued(VALID) is tracing.span("x")  # the shared null context


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """Tracing on in this process (common/tracing.py's and the SDK's), its spans kept."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "enabled", True)
    monkeypatch.setattr(tracing, "_tracer", provider.get_tracer("test"))
    monkeypatch.setattr(sdk_tracing, "ENABLED", True)
    return exporter


def _traceparent_of(span: object) -> str:
    context = span.get_span_context()  # type: ignore[attr-defined]
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def test_the_current_span_goes_into_a_request(spans: InMemorySpanExporter) -> None:
    """What the sender puts in a request's traceparent: the current span's context, or ""
    when no span is current (the SDK's helper writes the same)."""
    assert tracing.traceparent() == "" and sdk_tracing.traceparent() == ""
    with tracing.span("stream.append") as span:
        assert tracing.traceparent() == _traceparent_of(span)
        assert sdk_tracing.traceparent() == _traceparent_of(span)
        began = tracing.begin("en.append")
    assert tracing.traceparent() == ""
    assert tracing.traceparent(began) == _traceparent_of(began)  # a span not current
    began.end()


def test_a_request_s_trace_context_is_continued(spans: InMemorySpanExporter) -> None:
    """The receiver's span is the child of the one the request names, in the same trace;
    nothing to continue (empty, malformed, invalid, too long) leaves the current context."""
    with tracing.span("stream.append") as sender:
        sent = tracing.traceparent()
    child = tracing.begin("en.append", parent=tracing.parent_of(sent))
    child.end()
    assert child.parent.span_id == sender.get_span_context().span_id
    assert child.get_span_context().trace_id == sender.get_span_context().trace_id
    for nothing in ("", "garbage", "00-" + "0" * 32 + "-" + "0" * 16 + "-01",
                    VALID + "-" + "x" * tracing.TRACEPARENT_BYTES_MAX):
        assert tracing.parent_of(nothing) is None, nothing
        assert tracing.continued(nothing) is tracing._NULL
    # Made current for code that makes its spans in the current context (the committer).
    with tracing.continued(sent):
        commit = tracing.begin("ps.commit")
    commit.end()
    assert commit.parent.span_id == sender.get_span_context().span_id
    assert tracing.traceparent() == ""  # and no longer after


def test_one_span_for_many_requests_is_the_first_s_child(spans: InMemorySpanExporter) -> None:
    """One write serving many requests: the child of the first traced one, linked to the
    others (the untraced ones count for nothing)."""
    senders = [tracing.begin(f"stream.append.{n}") for n in range(3)]
    parent, links = tracing.parent_and_links(
        ["", tracing.traceparent(senders[0]), "garbage", tracing.traceparent(senders[1]),
         tracing.traceparent(senders[2])])
    write = tracing.begin("en.append", parent=parent, links=links)
    write.end()
    assert write.parent.span_id == senders[0].get_span_context().span_id
    assert [link.context.span_id for link in write.links] == [
        s.get_span_context().span_id for s in senders[1:]]
    assert tracing.parent_and_links(["", "garbage"]) == (None, [])


def test_the_file_exporter_writes_one_span_a_line(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    provider = TracerProvider(resource=Resource.create({"service.name": "ps-1"}))
    exporter = tracing.JsonLinesExporter(str(path))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with (tracer.start_as_current_span("ps.commit", attributes={"stamp.request_id": "t-1"}),
          tracer.start_as_current_span("stream.append")):
        pass
    provider.shutdown()
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    child, parent = (json.loads(line) for line in lines)
    assert parent["name"] == "ps.commit" and parent["parent_id"] is None
    assert parent["service"] == "ps-1" and parent["attributes"] == {"stamp.request_id": "t-1"}
    assert child["parent_id"] == parent["span_id"] and child["trace_id"] == parent["trace_id"]
    assert len(parent["trace_id"]) == 32 and len(parent["span_id"]) == 16
    assert parent["start_ns"] <= child["start_ns"] <= child["end_ns"] <= parent["end_ns"]
    assert parent["status"] == "UNSET" and parent["kind"] == "INTERNAL"
    assert exporter._fd is None  # closed by shutdown


def test_read_spans_skips_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    whole = {"trace_id": "a" * 32, "span_id": "b" * 16, "name": "x"}
    path.write_text(json.dumps(whole) + "\n" + '{"trace_id": "a')
    assert list(tracing.read_spans(str(path))) == [whole]


def _span(span_id: str, parent: str | None, name: str, start_ns: int, end_ns: int,
          trace: str = "t1", service: str = "fe-1", **attributes: object) -> dict[str, object]:
    return {"trace_id": trace, "span_id": span_id, "parent_id": parent, "name": name,
            "service": service, "start_ns": start_ns, "end_ns": end_ns,
            "attributes": attributes}


SPANS = [
    _span("c", "a", "fe.request", 2_000_000, 9_000_000, service="fe-1"),
    _span("a", None, "stampsdk.append", 1_000_000, 10_000_000, service="sdk",
          **{"stamp.request_id": "r-1"}),
    _span("d", "c", "ps.commit", 3_000_000, 8_000_000, service="ps-1"),
    _span("b", "a", "stampsdk.status", 1_500_000, 1_600_000, service="sdk"),
    _span("e", "gone", "en.journal", 4_000_000, 5_000_000, service="en-1"),  # parent lost
    _span("x", None, "stampsdk.read", 0, 1, trace="t2", **{"stamp.request_id": "r-2"}),
]


def test_the_tree_of_a_request() -> None:
    (trace,) = request_traces(SPANS, "r-1")
    assert trace.trace_id == "t1" and trace.start_ns == 1_000_000
    assert [(depth, span["span_id"]) for depth, span in trace.rows()] == [
        (0, "a"), (1, "b"), (1, "c"), (2, "d"), (0, "e")]
    assert trace_rows(trace)[:4] == [
        ("stampsdk.append", "sdk", "0.000", "9.000"),
        ("  stampsdk.status", "sdk", "0.500", "0.100"),
        ("  fe.request", "fe-1", "1.000", "7.000"),
        ("    ps.commit", "ps-1", "2.000", "5.000")]
    # Several traces of one request share one time line: offsets from the first one's start.
    assert trace_rows(trace, origin_ns=0)[0] == ("stampsdk.append", "sdk", "1.000", "9.000")


def test_every_trace_with_the_id_in_order_and_none_without() -> None:
    spans = [*SPANS, _span("y", None, "ps.commit", 500, 600, trace="t0", service="ps-1",
                           **{"stamp.request_id": "r-1"})]
    assert [t.trace_id for t in request_traces(spans, "r-1")] == ["t0", "t1"]
    assert request_traces(SPANS, "r-9") == []


def test_the_extent_nodes_writes_are_joined_by_extent_and_offset() -> None:
    """The append streams carry no trace context per append: the primary's and secondaries'
    writes of the request's appends join its traces by where the bytes went."""
    appended = _span("s", "d", "stream.append", 3_100_000, 7_000_000, service="ps-1",
                     extent=7, offset=4096)
    writes = [
        _span("p", None, "en.append", 3_200_000, 6_000_000, trace="t3", service="en-1",
              extent=7, offset=4000, end=5000),  # a write that holds the append
        _span("q", None, "en.replica_write", 3_300_000, 5_000_000, trace="t4",
              service="en-2", extent=7, offset=4096, end=4200),
        _span("r", None, "en.append", 3_200_000, 6_000_000, trace="t5", service="en-1",
              extent=7, offset=5000, end=6000),  # the next write: not this request's
        _span("o", None, "en.append", 3_200_000, 6_000_000, trace="t6", service="en-1",
              extent=8, offset=4000, end=5000),  # another extent
    ]
    found = request_traces([*SPANS, appended, *writes], "r-1")
    assert [t.trace_id for t in found] == ["t1", "t3", "t4"]


def test_one_request_is_one_tree_by_parent_ids() -> None:
    """A request that carried its context down every hop is one trace: its extent nodes'
    writes are found by parent ids, and another request's write of the same bytes' range
    (its parent in the file) is not joined by extent and offset."""
    hops = [
        _span("a", None, "stampsdk.append", 0, 100, trace="t7", service="sdk",
              **{"stamp.request_id": "r-7"}),
        _span("b", "a", "fe.request", 1, 99, trace="t7"),
        _span("c", "b", "ps.commit", 2, 98, trace="t7", service="ps-1",
              **{"stamp.request_id": "r-7"}),
        _span("d", "c", "stream.append", 3, 97, trace="t7", service="ps-1", extent=7,
              offset=0),
        _span("e", "d", "en.append", 4, 96, trace="t7", service="en-1", extent=7, offset=0,
              end=50),
        _span("f", "e", "en.replica_write", 5, 95, trace="t7", service="en-2", extent=7,
              offset=0, end=50),
        # Another request's write over the same range, under its own stream.append.
        _span("g", None, "stream.append", 3, 90, trace="t8", service="ps-1", extent=7,
              offset=0),
        _span("h", "g", "en.append", 4, 89, trace="t8", service="en-1", extent=7, offset=0,
              end=50),
    ]
    (trace,) = request_traces(hops, "r-7")
    assert [(depth, span["span_id"]) for depth, span in trace.rows()] == [
        (0, "a"), (1, "b"), (2, "c"), (3, "d"), (4, "e"), (5, "f")]


def test_stamp_up_trace_takes_a_file_or_none() -> None:
    parser = cli.build_parser()
    assert parser.parse_args(["up"]).trace is None  # off
    assert parser.parse_args(["up", "--trace"]).trace == ""  # DATA_DIR/traces.jsonl
    assert parser.parse_args(["up", "--trace", "t.jsonl"]).trace == "t.jsonl"


def _run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


def test_stamp_trace_prints_the_tree_or_one_line(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in SPANS))
    code, out, _ = _run_cli(["--data-dir", str(tmp_path), "trace", "r-1"], capsys)
    assert code == 0
    assert "trace t1" in out and "    ps.commit" in out and "ps-1" in out
    code, _, err = _run_cli(["trace", "r-9", "--file", str(path)], capsys)
    assert code == 1 and err.count("\n") == 1 and "no span with request id 'r-9'" in err
    code, _, err = _run_cli(["trace", "r-1", "--file", str(tmp_path / "none")], capsys)
    assert code == 1 and err.count("\n") == 1 and "no trace file" in err


def test_only_calls_within_a_trace_are_traced() -> None:
    """A client traces (and sends a context) only within a span; a server only continues a
    context it was sent: the background loops' calls leave no spans."""
    assert not tracing._in_a_trace(None)
    with TracerProvider().get_tracer("test").start_as_current_span("request"):
        assert tracing._in_a_trace(None)
    sent = SimpleNamespace(invocation_metadata=(
        ("user-agent", "stamp-process/fe-1"),
        ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")))
    assert tracing._continues_a_trace(sent)
    assert not tracing._continues_a_trace(SimpleNamespace(invocation_metadata=(
        ("user-agent", "stamp-process/fe-1"),)))
    assert not tracing._continues_a_trace(SimpleNamespace(invocation_metadata=None))


def test_the_instrumentation_wraps_only_handlers_it_fits() -> None:
    async def agen(request: object, context: object) -> AsyncIterator[object]:
        yield request

    async def coroutine(request: object, context: object) -> None:
        return None

    def handler(request_streaming: bool, response_streaming: bool,
                behavior: object = None) -> SimpleNamespace:
        return SimpleNamespace(request_streaming=request_streaming,
                               response_streaming=response_streaming, unary_stream=behavior)

    assert tracing._fits(handler(False, False))
    assert tracing._fits(handler(False, True, agen))
    assert not tracing._fits(handler(False, True, coroutine))  # writes with context.write
    assert not tracing._fits(handler(True, True))  # Call, AppendStream: many requests each
    assert not tracing._fits(handler(True, False))
