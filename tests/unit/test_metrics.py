"""common/metrics.py in one process: its lock-free histograms against prometheus-client's own
(the reference), the gRPC interceptor on a real server, the HTTP endpoint scraped as
Prometheus would, and metrics off (null families, no interceptor); tools/top_view.py's
rates and percentiles between two scrapes, and its extent nodes' figures."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from types import SimpleNamespace

import grpc
import pytest
from grpc import aio
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily
from rich.console import Console

from common import health, metrics, rpc
from tools.local_stamp import KIND_EXTENT_NODE
from tools.process_record import ProcessRecord
from tools.scrape import Samples, parse, scrape
from tools.top_view import Frame, quantile, rate, render

MESSAGE_MAX = 1 << 20


@pytest.fixture(autouse=True)
def metrics_off_after() -> Iterator[None]:
    yield
    metrics.reset()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@given(st.lists(st.sampled_from([*metrics.LATENCY_BUCKETS_S, 0.0, 20.0])
                | st.floats(min_value=0.0, max_value=50.0), max_size=200))
def test_timing_buckets_match_prometheus_clients_histogram(values: list[float]) -> None:
    """Same buckets, same observations: the same cumulative counts and sum (a value equal to
    a bound falls in that bound's bucket, as `le` says)."""
    reference = Histogram("h", "reference", buckets=metrics.LATENCY_BUCKETS_S,
                          registry=CollectorRegistry())
    ours = metrics.Timing(metrics.LATENCY_BUCKETS_S)
    for value in values:
        reference.observe(value)
        ours.observe(value)
    [family] = reference.collect()
    expected = [(s.labels["le"], s.value) for s in family.samples if s.name == "h_bucket"]
    assert [(le, float(count)) for le, count in ours.cumulative()] == expected
    [total] = [s.value for s in family.samples if s.name == "h_sum"]
    assert ours.sum == pytest.approx(total)


def test_off_hands_out_null_families_and_no_interceptor() -> None:
    assert not metrics.enabled()
    family = metrics.histogram("stamp_test_seconds", "x", ("op",))
    family.labels("a").observe(1.0)  # does nothing, raises nothing
    metrics.counter("stamp_test", "x").labels().inc()
    assert family is metrics.NULL
    assert metrics.interceptors() == []


async def _say(request: bytes, context: aio.ServicerContext) -> bytes:
    if request == b"fail":
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no")
    return b"echo:" + request


async def _count(request: bytes, context: aio.ServicerContext):  # type: ignore[no-untyped-def]
    for i in range(int(request)):
        yield str(i).encode()


def test_interceptor_counts_and_times_calls_and_the_endpoint_serves_them() -> None:
    async def scenario() -> None:
        port = _free_port()
        http = await metrics.serve("127.0.0.1", port)
        assert http is not None and metrics.enabled()
        metrics.on_scrape(lambda: [GaugeMetricFamily("stamp_test_gauge", "g", value=7)])
        journal = metrics.histogram("stamp_test_fsync_seconds", "x").labels()
        journal.observe(0.0003)
        server = rpc.aio_server(MESSAGE_MAX)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", {
            "Say": grpc.unary_unary_rpc_method_handler(_say),
            "Count": grpc.unary_stream_rpc_method_handler(_count)}),))
        address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        try:
            async with aio.insecure_channel(address) as channel:
                for i in range(5):
                    assert await channel.unary_unary("/test.Echo/Say")(b"%d" % i) == b"echo:%d" % i
                with pytest.raises(grpc.RpcError):
                    await channel.unary_unary("/test.Echo/Say")(b"fail")
                assert [r async for r in channel.unary_stream("/test.Echo/Count")(b"3")] == [
                    b"0", b"1", b"2"]
            found = await scrape(f"127.0.0.1:{port}", 5.0)
        finally:
            await server.stop(None)
            http.close()
        assert found.value("stamp_rpc_requests_total", method="Echo/Say", outcome="ok") == 5
        assert found.value("stamp_rpc_requests_total", method="Echo/Say", outcome="error") == 1
        assert found.value("stamp_rpc_requests_total", method="Echo/Count", outcome="ok") == 1
        assert found.value("stamp_rpc_seconds_count", method="Echo/Say") == 6
        assert found.buckets("stamp_rpc_seconds", method="Echo/Say")[float("inf")] == 6
        assert found.buckets("stamp_test_fsync_seconds")[0.0005] == 1
        assert found.buckets("stamp_test_fsync_seconds")[0.00025] == 0
        assert found.value("stamp_test_gauge") == 7
        assert found.value("process_resident_memory_bytes") > 0  # the process collector
    asyncio.run(scenario())


def test_endpoint_answers_404_off_its_path_and_survives_garbage() -> None:
    async def scenario() -> None:
        port = _free_port()
        http = await metrics.serve("127.0.0.1", port)
        assert http is not None
        try:
            for request, expected in ((b"GET /nothing HTTP/1.1\r\n\r\n", b"HTTP/1.1 404"),
                                      (b"\x00\x01garbage\r\n\r\n", b"HTTP/1.1 404"),
                                      (b"GET /metrics", b"")):  # never finished: closed
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(request)
                writer.write_eof()
                reply = await asyncio.wait_for(reader.read(), 5)
                writer.close()
                assert reply.startswith(expected)
            assert (await scrape(f"127.0.0.1:{port}", 5.0)).by_name  # still serving
        finally:
            http.close()
    asyncio.run(scenario())


def _histogram(counts: dict[float, float]) -> Samples:
    text = "# TYPE h histogram\n" + "".join(
        f'h_bucket{{le="{"+Inf" if b == float("inf") else b}"}} {c}\n'
        for b, c in counts.items()) + f"h_count {counts[float('inf')]}\nh_sum 0\n"
    return parse(text)


def test_quantile_between_two_scrapes_is_the_bucket_the_new_observations_reach() -> None:
    inf = float("inf")
    before = _histogram({0.001: 90, 0.01: 100, 0.1: 100, inf: 100})
    # Since then: 100 more, 98 of them <= 1 ms, 1 <= 10 ms, 1 <= 100 ms.
    now = _histogram({0.001: 188, 0.01: 199, 0.1: 200, inf: 200})
    assert quantile(now.buckets("h"), before.buckets("h"), 0.5) == 0.001
    assert quantile(now.buckets("h"), before.buckets("h"), 0.99) == 0.01
    assert quantile(now.buckets("h"), before.buckets("h"), 1.0) == 0.1
    assert quantile(now.buckets("h"), now.buckets("h"), 0.99) is None  # nothing new
    assert quantile(now.buckets("h"), {}, 0.5) == 0.001  # since the start
    beyond = _histogram({0.001: 0, inf: 5})
    assert quantile(beyond.buckets("h"), {}, 0.99) == 0.001  # +Inf: the largest bound


def test_rate_is_none_without_two_scrapes_or_after_a_restart() -> None:
    old = parse("# TYPE c counter\nc_total 100\n")
    new = parse("# TYPE c counter\nc_total 150\n")
    assert rate(new, old, 2.0, "c_total") == 25.0
    assert rate(new, None, 2.0, "c_total") is None
    assert rate(old, new, 2.0, "c_total") is None  # the counter went back: a restart


def test_top_shows_each_extent_nodes_witness_beside_its_journal() -> None:
    nodes = {name: ProcessRecord(name, KIND_EXTENT_NODE, "", [], fault_domain="fd-1")
             for name in ("en-1", "en-2")}
    stamp = SimpleNamespace(records=nodes, data_dir="/stamp",
                            config=SimpleNamespace(watch=SimpleNamespace(top_partitions_max=10)))
    frame = Frame(0.0, health={"en-1": health.SERVING, "en-2": health.UNREACHABLE},
                  samples={"en-1": parse("stamp_en_journal_bytes 2097152\n"
                                         "stamp_en_witness_records 1234\n"
                                         "stamp_en_witness_bytes 3145728\n"),
                           "en-2": None})
    console = Console(width=200, record=True)
    console.print(render(stamp, frame, None))  # type: ignore[arg-type]
    text = console.export_text()
    table = text[text.index("extent nodes (disk, CURP witness)"):].splitlines()
    header = next(line for line in table if "NODE" in line)
    assert header.index("JOURNAL MiB") < header.index("FSYNC P99 MS") \
        < header.index("WITNESS RECORDS") < header.index("WITNESS MiB")
    en1 = next(line.split() for line in table if line.startswith("en-1"))
    assert en1[-4:] == ["2.0", "-", "1,234", "3.0"], \
        "journal MiB, fsync (unknown from one frame), witness records and MiB"
    en2 = next(line.split() for line in table if line.startswith("en-2"))
    assert en2[-2:] == ["-", "-"], "a node that does not answer shows no figures"
