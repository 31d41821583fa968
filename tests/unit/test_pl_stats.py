"""A partition's load figures (partition_layer/stats.py) on an injected clock: reading them
changes nothing (issue 15 hole 9), and they cover a sliding window."""

from __future__ import annotations

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
                               "p99_ms": 0.0}


def test_a_status_read_leaves_the_heartbeat_its_figures() -> None:
    """`stamp partition ls` (the Status RPC) and the heartbeat both call load_report."""
    from tests.unit.test_pl_committer import serving_partition

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
