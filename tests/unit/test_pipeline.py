"""The primary's pipeline: acks in offset order once every replica is durable; failure is
sticky and fails everything in flight."""

from __future__ import annotations

import asyncio

import pytest

from common.config import ExtentNodeLimits
from common.errors import ReplicationFailed, Unavailable
from stream_layer.extent_node.node import replica_lag
from stream_layer.extent_node.replication import LOCAL, Lag, PrimaryPipeline


def test_acks_only_when_all_replicas_durable_and_in_order() -> None:
    async def scenario() -> None:
        p = PrimaryPipeline(1, ["s1", "s2"], start=0)
        a, b, c = p.submit(0, 10), p.submit(10, 25), p.submit(25, 30)
        p.on_durable(LOCAL, 30)
        p.on_durable("s1", 30)
        p.on_durable("s2", 10)
        await asyncio.sleep(0)
        assert a.done() and not b.done() and not c.done()
        p.on_durable("s2", 25)
        await asyncio.sleep(0)
        assert b.result() == (10, 25) and not c.done()
        p.on_durable("s2", 30)
        assert c.result() == (25, 30)
        p.on_durable("s2", 20)  # an old ack changes nothing
        assert p.durable["s2"] == 30
    asyncio.run(scenario())


def test_failure_fails_inflight_and_later_appends() -> None:
    async def scenario() -> None:
        p = PrimaryPipeline(1, ["s1", "s2"], start=100)
        a = p.submit(100, 110)
        p.on_durable(LOCAL, 110)
        p.fail(Unavailable("s2 died"))
        with pytest.raises(ReplicationFailed):
            a.result()
        with pytest.raises(ReplicationFailed):
            p.submit(110, 120)
    asyncio.run(scenario())


def test_outstanding_to_a_secondary() -> None:
    async def scenario() -> None:
        p = PrimaryPipeline(1, ["s1"], start=0)
        p.submit(0, 5)
        p.sent["s1"] = 5
        assert p.outstanding_to("s1")
        p.on_durable("s1", 5)
        assert not p.outstanding_to("s1")
    asyncio.run(scenario())


def test_a_late_replica_is_overdue_and_each_replica_is_timed_once_per_append() -> None:
    async def scenario() -> None:
        seen: list[tuple[str, float]] = []
        p = PrimaryPipeline(1, ["s1", "s2"], start=0,
                            observe=lambda who, s: seen.append((who, round(s, 3))))
        p.submit(0, 10, now=1.0)
        p.submit(10, 20, now=1.1)
        p.on_durable(LOCAL, 20, now=1.2)
        p.on_durable("s1", 10, now=1.3)
        p.on_durable("s1", 20, now=1.4)
        assert seen == [(LOCAL, 0.2), (LOCAL, 0.1), ("s1", 0.3), ("s1", 0.3)]
        assert p.overdue(1.4, lambda nbytes: 0.5) == []  # s2 waited 0.4 s of 0.5
        assert p.overdue(1.6, lambda nbytes: 0.5) == ["s2"]
        p.on_durable("s2", 10, now=1.6)  # acks the first; the second is 0.5 s old: not late
        assert p.overdue(1.6, lambda nbytes: 0.5) == []
        assert p.overdue(1.7, lambda nbytes: 0.5) == ["s2"]
        p.fail(Unavailable("s2 is late"))
        assert p.overdue(9.0, lambda nbytes: 0.5) == []  # failed: nothing more to time
    asyncio.run(scenario())


def test_an_append_made_durable_past_its_timeout_fails_what_is_not_acknowledged() -> None:
    async def scenario() -> None:
        p = PrimaryPipeline(1, ["s1"], start=0, timeout_s=lambda nbytes: 0.15)
        a, b = p.submit(0, 10, now=0.0), p.submit(10, 20, now=0.0)
        p.on_durable("s1", 20, now=0.05)
        p.on_durable(LOCAL, 10, now=0.3)  # this node's journal was slow (its loop blocked)
        assert a.result() == (0, 10)  # durable everywhere: acknowledged all the same
        with pytest.raises(ReplicationFailed, match="past its per-replica timeout"):
            b.result()
    asyncio.run(scenario())


def test_one_late_answer_is_a_busy_machine_and_a_few_in_a_row_a_slow_replica() -> None:
    """With late_appends_min=3, a replica late once (then on time) fails nothing; late three
    times in a row (a slow disk: every write 200 ms late) fails the pipeline: seal it."""
    async def scenario() -> None:
        p = PrimaryPipeline(1, ["s1"], start=0, timeout_s=lambda nbytes: 0.15,
                            late_appends_min=3)
        now = 0.0
        for n, latency in enumerate((0.3, 0.01, 0.3, 0.3)):  # late, on time, late, late
            done = p.submit(n * 10, n * 10 + 10, now=now)
            p.on_durable("s1", n * 10 + 10, now=now)
            p.on_durable(LOCAL, n * 10 + 10, now=now + latency)
            assert done.result() == (n * 10, n * 10 + 10)
            now += 1.0
        assert p.failed is None  # the streak was broken by the on-time answer
        late = p.submit(40, 50, now=now)
        p.on_durable("s1", 50, now=now)
        p.on_durable(LOCAL, 50, now=now + 0.3)  # the third late one in a row
        assert late.result() == (40, 50)  # durable everywhere: acknowledged
        with pytest.raises(ReplicationFailed, match="3 appends in a row"):
            p.submit(50, 60, now=now + 1.0)
    asyncio.run(scenario())


def test_a_failure_names_the_replica_whose_timeout_caused_it() -> None:
    """The writer tells the stream manager which replica caused the seal: the appends of a
    pipeline failed for a replica's lateness name it (LOCAL: this primary, by its address);
    a failure for any other reason names none."""
    async def scenario() -> None:
        p = PrimaryPipeline(1, ["s1"], start=0, address="primary:1")
        waiting = p.submit(0, 10)
        p.fail(Unavailable("s1 is late"), late="s1")
        with pytest.raises(ReplicationFailed) as failed:
            waiting.result()
        assert failed.value.late_replica == "s1"
        with pytest.raises(ReplicationFailed) as later:
            p.submit(10, 20)
        assert later.value.late_replica == "s1"

        mine = PrimaryPipeline(2, ["s1"], start=0, address="primary:1")
        mine.fail(Unavailable("this disk is slow"), late=LOCAL)
        assert mine.late_replica == "primary:1"

        other = PrimaryPipeline(3, ["s1"], start=0, address="primary:1")
        other.fail(ReplicationFailed("extent 3 is being sealed"))
        with pytest.raises(ReplicationFailed) as sealed:
            other.submit(0, 10)
        assert sealed.value.late_replica == ""
    asyncio.run(scenario())


LAG = Lag(min_s=0.1, ratio_min=2.0, window_s=1.0, answers_min=3)


def _lagging_pipeline() -> PrimaryPipeline:
    # A timeout no +200 ms replica reaches (a loaded stamp's: 4 x a p99 of 125 ms).
    return PrimaryPipeline(1, ["s1", "s2"], start=0, timeout_s=lambda nbytes: 0.5,
                           late_appends_min=3, lag=LAG)


def _append(p: PrimaryPipeline, n: int, now: float, latencies: dict[str, float]
            ) -> asyncio.Future[tuple[int, int]]:
    """Append number n (10 bytes at 10 n), made durable by each replica after its latency,
    the replicas answering in the order of their latencies."""
    done = p.submit(n * 10, n * 10 + 10, now=now)
    for who, latency in sorted(latencies.items(), key=lambda item: item[1]):
        p.on_durable(who, n * 10 + 10, now=now + latency)
    return done


def test_a_replica_far_behind_its_peers_fails_under_the_timeout() -> None:
    """A +200 ms disk on a loaded stamp: never past the timeout (0.5 s), but every answer
    200 ms behind its peers' 20 ms. Three answers in a row fail the pipeline, naming it."""
    async def scenario() -> None:
        p = _lagging_pipeline()
        for n in range(2):
            assert _append(p, n, n * 0.3, {LOCAL: 0.01, "s1": 0.22, "s2": 0.02}).result()
        assert p.failed is None
        last = _append(p, 2, 0.6, {LOCAL: 0.01, "s1": 0.22, "s2": 0.02})
        assert last.result() == (20, 30)  # durable everywhere: acknowledged
        with pytest.raises(ReplicationFailed, match="lagged its peers") as failed:
            p.submit(30, 40, now=0.9)
        assert failed.value.late_replica == "s1"
    asyncio.run(scenario())


def test_a_primary_whose_own_journal_lags_is_named() -> None:
    async def scenario() -> None:
        p = PrimaryPipeline(1, ["s1", "s2"], start=0, timeout_s=lambda nbytes: 0.5,
                            late_appends_min=3, address="primary:1", lag=LAG)
        for n in range(3):
            _append(p, n, n * 0.3, {LOCAL: 0.21, "s1": 0.01, "s2": 0.02})
        assert p.failed is not None and p.late_replica == "primary:1"
    asyncio.run(scenario())


def test_a_busy_machine_slows_every_replica_alike_and_fails_none() -> None:
    """All three replicas at 150-260 ms (a loaded 2-core stamp with TLS), one of them a bit
    behind the others each time: no replica lags by far, none is failed."""
    async def scenario() -> None:
        p = _lagging_pipeline()
        for n in range(200):
            slow = ("s1", "s2", LOCAL)[n % 3]
            latencies = {LOCAL: 0.15 + 0.01 * (n % 5), "s1": 0.16, "s2": 0.17}
            latencies[slow] = 0.26
            assert _append(p, n, n * 0.3, latencies).result()
        assert p.failed is None
    asyncio.run(scenario())


def test_a_lag_run_ends_on_an_answer_that_kept_pace_or_after_the_window() -> None:
    async def scenario() -> None:
        p = _lagging_pipeline()
        lagging = {LOCAL: 0.01, "s1": 0.22, "s2": 0.02}
        _append(p, 0, 0.0, lagging)
        _append(p, 1, 0.3, lagging)
        _append(p, 2, 0.6, {LOCAL: 0.01, "s1": 0.03, "s2": 0.02})  # kept pace: run over
        _append(p, 3, 0.9, lagging)
        _append(p, 4, 1.2, lagging)
        assert p.failed is None
        _append(p, 5, 2.6, lagging)  # 1.4 s after the last: a new run
        _append(p, 6, 2.9, lagging)
        assert p.failed is None
        _append(p, 7, 3.2, lagging)
        assert p.failed is not None and p.late_replica == "s1"
    asyncio.run(scenario())


def test_an_answer_that_says_nothing_about_the_lag_leaves_the_run() -> None:
    """This primary's own loop blocked by its slow journal: its peers' acks are read only
    after its own durability, so it completes nothing and is slow (neutral: the run goes
    on), and the peers complete with no lag."""
    async def scenario() -> None:
        p = PrimaryPipeline(1, ["s1", "s2"], start=0, timeout_s=lambda nbytes: 0.5,
                            late_appends_min=3, address="primary:1", lag=LAG)
        behind = {LOCAL: 0.21, "s1": 0.01, "s2": 0.02}
        blocked = {LOCAL: 0.2, "s1": 0.201, "s2": 0.202}
        _append(p, 0, 0.0, behind)
        _append(p, 1, 0.3, blocked)
        _append(p, 2, 0.6, behind)
        assert p.failed is None
        _append(p, 3, 0.9, blocked)
        _append(p, 4, 1.2, behind)
        assert p.failed is not None and p.late_replica == "primary:1"
    asyncio.run(scenario())


def test_by_default_a_slow_disk_is_failed_on_its_second_lagging_answer() -> None:
    """Under load a +200 ms disk answers every 400 ms (the write in progress, then its own):
    the stamp's default lag rule fails it on its second answer (0.8 s), so that with the
    rollover its writers wait less than a second; three answers took 1.2 s and more."""
    async def scenario() -> None:
        p = PrimaryPipeline(1, ["s1", "s2"], start=0, timeout_s=lambda nbytes: 0.5,
                            late_appends_min=3, lag=replica_lag(ExtentNodeLimits()))
        _append(p, 0, 0.0, {LOCAL: 0.01, "s1": 0.4, "s2": 0.03})
        assert p.failed is None
        _append(p, 1, 0.4, {LOCAL: 0.01, "s1": 0.4, "s2": 0.03})
        assert p.failed is not None and p.late_replica == "s1"
    asyncio.run(scenario())


def test_by_default_a_healthy_replica_a_little_behind_on_a_very_loaded_machine_is_kept() -> None:
    """Seen under stamp bench fe-tls at a load of 35 on 2 cores: a healthy secondary 111, then
    137 ms behind its peers (at 2x their latency). The default rule keeps it."""
    async def scenario() -> None:
        p = PrimaryPipeline(1, ["s1", "s2"], start=0, timeout_s=lambda nbytes: 0.5,
                            late_appends_min=3, lag=replica_lag(ExtentNodeLimits()))
        _append(p, 0, 0.0, {LOCAL: 0.01, "s1": 0.169, "s2": 0.058})
        _append(p, 1, 0.2, {LOCAL: 0.01, "s1": 0.150, "s2": 0.013})
        assert p.failed is None
    asyncio.run(scenario())
