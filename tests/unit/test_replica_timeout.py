"""Gray failures (issue 29), the pure parts: the adaptive per-replica timeout learns the
healthy replicas' latency, not a slow one's; the seal's fence decides from a quorum without
waiting out a silent replica, and names it; a slow node is avoided for a while."""

from __future__ import annotations

import asyncio
import time
from typing import cast

from common.clock import ManualClock
from common.errors import Unavailable
from stream_layer.extent_client import AsyncExtentClient
from stream_layer.replica_timeout import RECENT_OBSERVATIONS, SAMPLES_MIN, AdaptiveTimeout
from stream_layer.seal import fence_replicas
from stream_layer.stream_manager.placement import SlowNodes


def test_the_timeout_follows_the_healthy_replicas_within_its_bounds() -> None:
    timeout = AdaptiveTimeout(0.15, 0.5, 4.0, bytes_per_s=1e6)
    assert timeout.timeout_s() == 0.5  # nothing seen yet: the most
    for _ in range(SAMPLES_MIN * 4):
        timeout.observe("local", 0.010)
        timeout.observe("s1", 0.020)
        timeout.observe("slow", 0.400)  # one slow replica does not make slow normal
    assert timeout.timeout_s() == 0.15  # 4 x 20 ms is under the floor
    assert timeout.timeout_s(nbytes=100_000) == 0.25  # big is not slow
    for _ in range(256):
        timeout.observe("local", 0.060)
        timeout.observe("s1", 0.070)
    # A slower machine: 4 x the median replica's 70 ms (the slow one still outvoted).
    assert abs(timeout.timeout_s() - 0.28) < 1e-9
    for _ in range(256):
        timeout.observe("local", 1.0)
        timeout.observe("s1", 1.0)
    assert timeout.timeout_s() == 0.5  # never past the most


class Replicas:
    """Commit lengths by address, each answered after a delay (None: never, an RPC that
    times out)."""

    def __init__(self, answers: dict[str, tuple[int, float | None]]) -> None:
        self.answers = answers

    async def commit_length(self, address: str, extent_id: int, timeout_s: float | None = None,
                            fence: bool = False) -> tuple[int, bool]:
        length, delay = self.answers[address]
        if delay is None or (timeout_s is not None and delay > timeout_s):
            await asyncio.sleep(timeout_s or 0)
            raise Unavailable(f"{address} timed out")
        await asyncio.sleep(delay)
        return length, False


def test_a_seal_decides_from_a_quorum_without_waiting_out_a_straggler() -> None:
    replicas = Replicas({"a": (500, 0.0), "b": (400, 0.01), "frozen": (0, None)})

    async def scenario() -> None:
        started = time.monotonic()
        fenced = await fence_replicas(cast(AsyncExtentClient, replicas), 7, ["a", "b", "frozen"],
                                      timeout_s=5.0, grace_s=0.05)
        assert time.monotonic() - started < 2.0  # not the 5 s probe timeout
        assert (fenced.length, fenced.sources, fenced.stragglers) == (400, ["a", "b"],
                                                                      ["frozen"])
    asyncio.run(scenario())


def test_slow_nodes_are_avoided_for_a_while() -> None:
    clock = ManualClock()
    slow = SlowNodes(30.0, clock)
    slow.mark(["en-3"])
    assert slow.slow("en-3") and slow.names() == {"en-3"}
    clock.advance(29.0)
    slow.mark(["en-5"])
    clock.advance(2.0)
    assert slow.names() == {"en-5"}
    clock.advance(29.0)
    assert slow.names() == set()


def test_a_seal_does_not_wait_for_the_replica_that_caused_it() -> None:
    """A replica the writer found late gets no grace once a quorum answered: with a grace of
    a minute, the fence still decides as soon as the other two have answered."""
    replicas = Replicas({"a": (500, 0.0), "b": (400, 0.01), "frozen": (0, None)})

    async def scenario() -> None:
        fenced = await asyncio.wait_for(fence_replicas(
            cast(AsyncExtentClient, replicas), 7, ["a", "b", "frozen"], timeout_s=120.0,
            grace_s=60.0, late=["frozen"]), timeout=30.0)
        assert (fenced.length, fenced.stragglers) == (400, ["frozen"])
    asyncio.run(scenario())


def test_a_replica_no_longer_written_to_stops_voting() -> None:
    """A primary forwarded to secondaries that froze, one after the other (their latencies:
    seconds), and their extents were sealed away from them: those paths are observed no
    more. Their old latencies must not keep the timeout up (with the slow disk's, they would
    be the median and hold it at the most, where a +200 ms disk is never late): once the
    replicas written to now are all that is seen, they alone set the timeout."""
    timeout = AdaptiveTimeout(0.15, 0.5, 4.0, bytes_per_s=1e6)
    for frozen in ("frozen-1", "frozen-2"):
        for _ in range(SAMPLES_MIN * 4):
            timeout.observe("local", 0.010)
            timeout.observe("s1", 0.020)
            timeout.observe(frozen, 5.0)
    for _ in range(RECENT_OBSERVATIONS):  # the next extent's replicas; the disk turns slow
        timeout.observe("local", 0.300)
        timeout.observe("s1", 0.020)
        timeout.observe("s2", 0.020)
    assert timeout.timeout_s() == 0.15  # not 0.5: "frozen" is stale, the slow disk outvoted
