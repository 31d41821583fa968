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
