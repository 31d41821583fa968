"""A partition's load figures (partition_layer/stats.py) on an injected clock: reading them
changes nothing (issue 15 hole 9), and they cover a sliding window."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from common.clock import ManualClock
from common.config import PartitionLimits
from partition_layer.stats import LoadStats


def test_reading_the_figures_does_not_reset_them() -> None:
    clock = ManualClock()
    stats = LoadStats(clock, window_s=10.0)
    for i in range(20):
        clock.advance(0.25)
        stats.record(100, 0.001 * (i + 1))
    first = stats.figures()
    assert first == stats.figures() == stats.figures()
    assert first["ops_per_s"] == pytest.approx(20 / 5.0)
    assert first["bytes_per_s"] == pytest.approx(2000 / 5.0)
    assert first["p50_ms"] == pytest.approx(11.0) and first["p99_ms"] == pytest.approx(20.0)


def test_the_window_slides() -> None:
    clock = ManualClock()
    stats = LoadStats(clock, window_s=10.0)
    for _ in range(40):
        stats.record(10, 0.5)
        clock.advance(0.125)  # 40 ops in the first 5 s (steps exact in binary)
    clock.advance(5.0)
    assert stats.figures()["ops_per_s"] == pytest.approx(40 / 10.0)
    for _ in range(10):
        stats.record(10, 0.002)
        clock.advance(1.0)  # then 1 op/s for 10 s: the first burst leaves the window
    figures = stats.figures()
    assert figures["ops_per_s"] == pytest.approx(1.0, rel=0.25)
    assert figures["p99_ms"] == pytest.approx(2.0)
    clock.advance(60.0)
    assert stats.figures() == {"ops_per_s": 0.0, "bytes_per_s": 0.0, "p50_ms": 0.0,
                               "p99_ms": 0.0, "samples": (), "requests_sampled": 0}


def test_the_finder_reports_on_the_stats_clock_and_a_reading_changes_nothing() -> None:
    clock = ManualClock()
    stats = LoadStats(clock, window_s=10.0)
    for i in range(300):
        stats.sample_key(bytes([i % 7 + 1]))
    first = stats.figures()
    assert first == stats.figures() and first["requests_sampled"] == 300
    assert len(first["samples"]) == 20
    clock.advance(25.0)  # two finder windows without a request: the load faded
    assert (stats.figures()["samples"], stats.figures()["requests_sampled"]) == ((), 0)


def test_a_status_read_leaves_the_heartbeat_its_figures() -> None:
    """`stamp partition ls` (the Status RPC) and the heartbeat both call load_report."""
    from tests.support.partitions import serving_partition

    async def scenario() -> None:
        p = serving_partition(dataclasses.replace(PartitionLimits()))
        for _ in range(10):
            p.stats.record(64, 0.004)
        status = p.load_report()
        heartbeat = p.load_report()
        assert status["ops_per_s"] > 0 and heartbeat["ops_per_s"] > 0
        assert heartbeat["p50_ms"] == status["p50_ms"] == pytest.approx(4.0)
        await p.stop("test over")

    import asyncio
    asyncio.run(scenario())


def test_pressure_p99_is_recent_and_recomputed_at_most_every_100_ms() -> None:
    from partition_layer.stats import PressureGauge

    clock = ManualClock()
    a, b = LoadStats(clock), LoadStats(clock)
    reads = []

    def all_stats() -> list[LoadStats]:
        reads.append(1)
        return [a, b]
    gauge = PressureGauge(all_stats, clock, window_s=3.0, recompute_s=0.1)
    assert gauge.read() == (0, 0.0)
    for _ in range(99):
        a.record(10, 0.001)
    b.record(10, 0.250)  # the slowest 1% of the two partitions together
    b.record(10, 0.250)
    gauge.open_ops = 7
    assert gauge.read() == (7, 0.0)  # the p99 is reused for 100 ms; open ops are current
    clock.advance(0.1)
    assert gauge.read() == (7, pytest.approx(250.0))
    calls = len(reads)
    for _ in range(50):
        gauge.read()
    assert len(reads) == calls  # no recomputation (and no sort) per batch
    clock.advance(5.0)  # the slow operations are older than the window now
    a.record(10, 0.002)
    assert gauge.read() == (7, pytest.approx(2.0))


def test_requests_routed_to_a_partition_feed_its_finder_and_the_heartbeat() -> None:
    """requests.py counts every request it routes (appends on the hot path, scans as spans)
    for the load finder; PartitionServer.load_pb carries the candidates to the PM."""
    from common.checksums import crc32c
    from common.proto import partition_pb2 as pb
    from partition_layer.requests import handle, route_key
    from partition_layer.server import PartitionServer
    from tests.support.partitions import serving_partition

    async def scenario() -> None:
        limits = PartitionLimits()
        p = serving_partition(limits)
        server = PartitionServer("ps-1", None, None, limits)  # type: ignore[arg-type]
        server.partitions[p.id] = p
        logs = [f"log-{i:03d}" for i in range(40)]
        for i in range(200):
            reply = await handle(pb.Request(id=i, account="acct", pname=logs[i % 40],
                                            append=pb.AppendOp(records=[b"r"],
                                                               crcs=[crc32c(b"r")])),
                                 server.find, limits)
            assert not reply.error, reply.message
        scan = pb.Request(id=999, account="acct", scan=pb.ScanOp(start_pname="log-000"))
        assert not (await handle(scan, server.find, limits)).error
        (load,) = server.load_pb("addr").partitions
        assert load.requests_sampled == 201
        candidates = [s.key for s in load.samples]
        assert len(candidates) == 20 and set(candidates) <= {route_key("acct", x) for x in logs}
        # Counted on each candidate taken before it: the scan (seeded: not taken) spans every
        # name after its own start; at the start itself it is to the right.
        assert [s.contained for s in load.samples] == \
            [int(key > route_key("acct", "log-000")) for key in candidates]
        assert all(s.left + s.right + s.contained > 0 for s in load.samples)
        assert load.queue_ops == 0
        # The memtable's data halves at the start of one of the logs (size_split.py).
        assert load.size_split_key in {route_key("acct", x) for x in logs[1:]}
        await p.stop("test over")

    asyncio.run(scenario())
