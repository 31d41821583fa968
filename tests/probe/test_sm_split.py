"""The stream manager's side of a split (issue 17) with real processes: a partition's four
streams sealed under its owner's epoch, then one multi-modify (fence guards, create_from for
both children, retire the parent) through the real stream manager; the children read the
parent's bytes, the listings name both children as holders of every shared extent, a retired
name is never created again, a stale owner's multi-modify changes nothing, and all of it
survives a SIGKILL of the stream manager leader."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest

from common.errors import Fenced, NotFound, PreconditionFailed
from stream_layer.client import AsyncStreamClient
from stream_layer.stream_ops import create_from_op, fence_op, retire_op
from tests.support.stamps import StampFactory
from tests.support.streams import client_for, converged_digests, leader_name
from tests.support.waiting import wait_for
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

KINDS = ("log", "row", "meta", "blob")
EPOCH = 5


def stamp_cli(stamp: LocalStamp, *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir",
                             str(stamp.data_dir), *args], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, f"stamp {' '.join(args)}: {result.stdout}{result.stderr}"
    return result.stdout


def split_ops(parent: int, left: int, right: int, epoch: int,
              extents: dict[str, list[int]]) -> list[Any]:
    """The partition server's split multi-modify (split17.md "PS flow", step 4)."""
    ops = [fence_op(f"partition/{parent}/{k}", epoch) for k in KINDS]
    for child in (left, right):
        ops += [create_from_op(f"partition/{child}/{k}", extents[k]) for k in KINDS]
    return ops + [retire_op(f"partition/{parent}/{k}") for k in KINDS]


async def blocks_of(client: AsyncStreamClient, name: str) -> list[bytes]:
    stream = await client.open_stream(name)
    return [data async for _, data in stream.blocks()]


async def make_parent(client: AsyncStreamClient, parent: int) -> dict[str, list[int]]:
    """Partition `parent`'s streams owned at EPOCH, data in two extents each (after the empty
    first one the owner's fence sealed), sealed by the owner's second fence (split step 3);
    returns their extent lists."""
    extents = {}
    for kind in KINDS:
        name = f"partition/{parent}/{kind}"
        await client.create_stream(name)
        stream = await client.fence_stream(name, EPOCH)
        await stream.append([f"{kind}-a{i}".encode() for i in range(3)])
        await stream.seal_last()
        await stream.append([f"{kind}-b{i}".encode() * 50 for i in range(3)])
        sealed = await client.fence_stream(name, EPOCH)  # same epoch: seals the last extent
        assert all(e.state == "sealed" for e in sealed.extents)
        extents[kind] = [e.extent_id for e in sealed.extents]
        assert len(extents[kind]) == 3
    return extents


def test_split_multi_modify_through_the_real_stream_manager(
        stamp_factory: StampFactory) -> None:
    # No spare extents: their background creation would change the state (extent ids
    # reserved) while the test compares the state before and after a failover.
    stamp = stamp_factory(3, 3, stream_manager={"spare_extents": 0})

    async def scenario() -> None:
        client = client_for(stamp)
        extents = await make_parent(client, 1)
        data = {k: await blocks_of(client, f"partition/1/{k}") for k in KINDS}
        assert all(len(v) == 6 for v in data.values())

        # A deposed owner (epoch below the stream's) splits: nothing changes.
        before = [s.name for s in await client.list_streams()]
        with pytest.raises(Fenced):
            await client.sm.multi_modify(split_ops(1, 2, 3, EPOCH - 1, extents))
        assert [s.name for s in await client.list_streams()] == before
        assert before == sorted(f"partition/1/{k}" for k in KINDS)

        reply = await client.sm.multi_modify(split_ops(1, 2, 3, EPOCH, extents))
        assert sorted(s.name for s in reply) == sorted(
            f"partition/{c}/{k}" for c in (2, 3) for k in KINDS)
        # Sent again (as after a timeout): refused, its guards find no parent; resolved by
        # its witness, it is the change that applied.
        with pytest.raises(NotFound):
            await client.sm.multi_modify(split_ops(1, 2, 3, EPOCH, extents))
        again = await client.sm.multi_modify_resolved(split_ops(1, 2, 3, EPOCH, extents),
                                                      witness="partition/2/meta")
        assert again == reply
        assert sorted(s.name for s in await client.list_streams()) == sorted(
            s.name for s in reply)
        for kind in KINDS:
            for child in (2, 3):
                assert await blocks_of(client, f"partition/{child}/{kind}") == data[kind]
            with pytest.raises(PreconditionFailed, match="retired"):
                await client.create_stream(f"partition/1/{kind}")

        # Listings: every parent extent is held by both children, and says so.
        holders = {e["extent_id"]: e["streams"]
                   for e in json.loads(stamp_cli(stamp, "extent", "ls", "--json"))}
        for kind in KINDS:
            for extent_id in extents[kind]:
                assert holders[extent_id] == [f"partition/2/{kind}", f"partition/3/{kind}"]
        rows = {r["name"]: r for r in json.loads(stamp_cli(stamp, "stream", "ls", "--json"))}
        assert rows["partition/2/log"]["shared_extents"] == 3
        assert rows["partition/2/log"]["extents"][0]["streams"] == [
            "partition/2/log", "partition/3/log"]
        table = stamp_cli(stamp, "stream", "ls")
        assert "3 shared with partition/3/log" in table
        assert "3 shared with partition/2/log" in table
        assert "partition/2/log,partition/3/log" in stamp_cli(stamp, "extent", "ls")

        # A child is writable on its own: its owner fences it and appends past the shared
        # extents, which the other child and the listings still see unchanged.
        child = await client.fence_stream("partition/2/log", EPOCH + 1)
        await child.append([b"only in 2"])
        assert await blocks_of(client, "partition/2/log") == [*data["log"], b"only in 2"]
        assert await blocks_of(client, "partition/3/log") == data["log"]

        # The stream manager leader dies: a new one has the same namespace, retired names too.
        digests = await converged_digests(stamp, client)
        assert len(digests) == 1
        victim = await leader_name(stamp, client)
        stamp.kill(victim)
        assert await leader_name(stamp, client) != victim
        for kind in KINDS:
            with pytest.raises(PreconditionFailed, match="retired"):
                await client.create_stream(f"partition/1/{kind}")
            assert await blocks_of(client, f"partition/3/{kind}") == data[kind]
        with pytest.raises(Fenced):
            await client.sm.multi_modify(split_ops(2, 4, 5, EPOCH, {
                k: [e.extent_id for e in (await client.sm.open_stream(f"partition/2/{k}")
                                          ).extents] for k in KINDS}))
        assert sorted(s.name for s in await client.list_streams()) == sorted(
            s.name for s in reply)
        stamp.start(victim)
        assert await converged_digests(stamp, client) == digests, \
            "the namespace changed across the failover (or a refused change left a trace)"
        await client.close()
    asyncio.run(scenario())


def test_a_fence_guard_in_a_multi_modify_seals_nothing(stamp_factory: StampFactory) -> None:
    """Unlike the FenceStream RPC (which seals the last extent), a fence op in a multi-modify
    only checks and raises the writer epoch: the stream's open extent stays open."""
    stamp = stamp_factory(3, 3, stream_manager={"spare_extents": 0})

    async def scenario() -> None:
        client = client_for(stamp)
        stream = await client.create_stream("x")
        await stream.append([b"one"])
        (info,) = await client.sm.multi_modify([fence_op("x", 3)])
        assert info.writer_epoch == 3 and [e.state for e in info.extents] == ["open"]
        with pytest.raises(Fenced):
            await client.sm.multi_modify([fence_op("x", 2)])
        assert [e.state for e in (await client.sm.open_stream("x")).extents] == ["open"]
        await client.close()
    asyncio.run(scenario())


def test_a_shared_extent_is_rereplicated_once_for_all_its_streams(
        stamp_factory: StampFactory) -> None:
    """After a split the children share every extent. An extent node holding some of them
    dies: each shared extent is copied once (one extent record, three replicas in three
    fault domains), and both children read the parent's bytes from the new replicas."""
    stamp = stamp_factory(6, 3, stream_manager={"heartbeat_interval_ms": 200,
                                                "suspect_after_ms": 1000,
                                                "dead_after_ms": 2500})

    async def scenario() -> None:
        client = client_for(stamp)
        extents = await make_parent(client, 1)
        data = {k: await blocks_of(client, f"partition/1/{k}") for k in KINDS}
        await client.sm.multi_modify(split_ops(1, 2, 3, EPOCH, extents))
        shared = {e.extent_id: e for e in await client.sm.list_extents()
                  if len(e.streams) == 2}
        assert set(shared) == {i for ids in extents.values() for i in ids}
        victim = max(stamp.extent_nodes(),
                     key=lambda n: sum(n.name in e.replicas for e in shared.values())).name
        held = {i for i, e in shared.items() if victim in e.replicas}
        stamp.kill(victim)

        async def copied() -> dict[int, Any] | None:
            now = {e.extent_id: e for e in await client.sm.list_extents()}
            if any(victim in now[i].replicas for i in held):
                return None
            return now
        now = await wait_for(copied, 60, f"{victim}'s shared extents to be copied")
        domains = {n.name: n.fault_domain for n in stamp.extent_nodes()}
        for extent_id in shared:
            extent = now[extent_id]
            assert len(extent.replicas) == 3, extent
            assert len({domains[r] for r in extent.replicas}) == 3, extent
            assert list(extent.streams) == list(shared[extent_id].streams), extent
        for extent_id in held:  # every replica, the new one too, serves the sealed bytes
            extent = now[extent_id]
            for address in extent.addresses if extent.sealed_length else ():
                frames = await client.extents.read_frames(address, extent_id, 0,
                                                          extent.sealed_length)
                assert len(frames) == extent.sealed_length
        for kind in KINDS:
            for child in (2, 3):
                assert await blocks_of(client, f"partition/{child}/{kind}") == data[kind]
        await client.close()
    asyncio.run(scenario())
