"""The primary's pipeline: acks in offset order once every replica is durable; failure is
sticky and fails everything in flight."""

from __future__ import annotations

import asyncio

import pytest

from common.errors import ReplicationFailed, Unavailable
from stream_layer.extent_node.replication import LOCAL, PrimaryPipeline


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
