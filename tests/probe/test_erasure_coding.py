"""Erasure-coded extents on real processes (issue 5): conversion, coded reads (direct,
rebuilt when fragment nodes are SIGKILLed), a flipped byte detected and repaired, a dead
node's fragment rebuilt elsewhere, and conversions that crash half way and are rerun."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from common.checksums import crc32c
from common.proto import stream_manager_pb2 as sm_pb
from common.rpc import arm_remote
from stream_layer.client import AsyncStreamClient
from stream_layer.ec.convert import convert_extent
from stream_layer.ec.reader import CodedExtent
from stream_layer.framing import Location
from tests.conftest import module_stamp
from tests.support.erasure import check_reads, extent_bytes, fragment_file, sealed_extent
from tests.support.streams import client_for
from tests.support.waiting import wait_for
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

StampFactory = Callable[..., LocalStamp]
FAST_DEATH = {"heartbeat_interval_ms": 200, "suspect_after_ms": 1000, "dead_after_ms": 2500}


async def replicas_held(stamp: LocalStamp, client: AsyncStreamClient, extent_id: int
                        ) -> list[str]:
    held = []
    for node in stamp.extent_nodes():
        if stamp.alive(node.name) and extent_id in {
                e.extent_id for e in await client.extents.list_extents(node.address)}:
            held.append(node.name)
    return held


def test_coded_extent_reads_back_and_survives_m_lost_fragments(
        stamp_factory: StampFactory, rng: random.Random) -> None:
    stamp = stamp_factory(6, 3)  # RS(3,2) by default on 6 extent nodes

    async def scenario() -> None:
        client = client_for(stamp)
        stream, acked = await sealed_extent(client, rng)
        extent_id = acked[0][0].extent_id
        stale = await client.open_stream("log")  # caches the extent as sealed, on replicas
        info = await convert_extent(client.sm, client.extents, extent_id)
        assert (info.state, info.ec_k, info.ec_m, list(info.replicas)) == (
            "erasure_coded", 3, 2, [])
        assert len(set(info.fragments)) == 5
        domains = {n.name: n.fault_domain for n in stamp.extent_nodes()}
        assert max(sum(domains[f] == d for f in info.fragments) for d in set(domains.values())
                   ) <= 2, "fragments crowd one fault domain"
        assert await replicas_held(stamp, client, extent_id) == []
        assert await stale.read(acked[7][0]) == acked[7][1]  # finds out it was coded
        await check_reads(stream, acked, rng)
        # A rerun of a finished conversion changes nothing.
        assert await convert_extent(client.sm, client.extents, extent_id) == \
            await client.sm.get_extent(extent_id)

        # SIGKILL m = 2 nodes holding data fragments: every read is rebuilt from the rest.
        for index in (0, 2):
            stamp.kill(info.fragments[index])
        await check_reads(stream, acked, rng)
        await client.close()
    asyncio.run(scenario())


def test_six_plus_three_on_nine_nodes_survives_three_lost_fragments(
        stamp_factory: StampFactory, rng: random.Random) -> None:
    stamp = stamp_factory(9, 3)

    async def scenario() -> None:
        client = client_for(stamp)
        stream, acked = await sealed_extent(client, rng, blocks=100)
        info = await convert_extent(client.sm, client.extents, acked[0][0].extent_id)
        assert (info.ec_k, info.ec_m) == (6, 3)
        domains = {n.name: n.fault_domain for n in stamp.extent_nodes()}
        assert sorted(domains[f] for f in info.fragments) == \
            ["fd-1"] * 3 + ["fd-2"] * 3 + ["fd-3"] * 3
        for index in (1, 3, 5):
            stamp.kill(info.fragments[index])
        await check_reads(stream, acked, rng)
        await client.close()
    asyncio.run(scenario())


@pytest.mark.serial  # timing-sensitive: run alone (`make test`)
def test_slow_data_fragment_is_hedged(stamp_factory: StampFactory, rng: random.Random) -> None:
    """A data fragment slower than the hedge delay: the read is rebuilt from the others and
    returns long before the slow node would have answered."""
    stamp = stamp_factory(6, 3)

    async def scenario() -> None:
        client = client_for(stamp)
        stream, acked = await sealed_extent(client, rng, blocks=60)
        info = await convert_extent(client.sm, client.extents, acked[0][0].extent_id)
        arm_remote(info.fragment_addresses[0], "en.fragment.read=delay:5000")
        in_first = [(loc, data) for loc, data in acked if loc.end <= info.ec_cuts[1]]
        started = time.monotonic()
        for loc, data in in_first[:5]:
            assert await stream.read(loc) == data
        took = time.monotonic() - started
        hedge_s = stamp.config.extent_node.fragment_hedge_ms / 1000
        assert took < 5 * hedge_s + 1.0, f"5 hedged reads took {took:.2f}s"
        await client.close()
    asyncio.run(scenario())


def test_flipped_byte_in_a_fragment_is_detected_rebuilt_and_repaired(
        stamp_factory: StampFactory, rng: random.Random) -> None:
    stamp = stamp_factory(6, 3)

    async def scenario() -> None:
        client = client_for(stamp)
        stream, acked = await sealed_extent(client, rng)
        extent_id = acked[0][0].extent_id
        info = await convert_extent(client.sm, client.extents, extent_id)
        path = fragment_file(stamp, info.fragments[1], extent_id, 1)
        good = path.read_bytes()
        corrupt = bytearray(good)
        flip_at = rng.randrange(info.ec_cuts[2] - info.ec_cuts[1])
        corrupt[flip_at] ^= 0x10
        path.write_bytes(bytes(corrupt))
        victims = [(loc, data) for loc, data in acked
                   if loc.offset <= info.ec_cuts[1] + flip_at < loc.end]
        assert await stream.read(victims[0][0]) == victims[0][1]  # rebuilt, and reported
        await check_reads(stream, acked, rng)

        async def repaired() -> bool:
            crc = await client.extents.verify_fragment(info.fragment_addresses[1], extent_id, 1)
            return crc == info.ec_crcs[1]
        await wait_for(repaired, 20, "the stream manager to rebuild the corrupt fragment")
        assert path.read_bytes() == good
        await client.close()
    asyncio.run(scenario())


def test_dead_node_fragment_is_rebuilt_elsewhere(stamp_factory: StampFactory,
                                                 rng: random.Random) -> None:
    stamp = stamp_factory(6, 3, stream_manager=FAST_DEATH)

    async def scenario() -> None:
        client = client_for(stamp)
        stream, acked = await sealed_extent(client, rng)
        extent_id = acked[0][0].extent_id
        info = await convert_extent(client.sm, client.extents, extent_id, k=3, m=2)
        await stream.refresh()  # the stream caches the fragments where they are now
        victim = info.fragments[4]  # a parity fragment
        stamp.kill(victim)

        async def moved() -> sm_pb.ExtentInfo | None:
            now = await client.sm.get_extent(extent_id)
            return now if victim not in now.fragments else None
        now = await wait_for(moved, 30, f"{victim}'s fragment to be rebuilt elsewhere")
        assert list(now.fragments[:4]) == list(info.fragments[:4])
        assert len(set(now.fragments)) == 5
        assert await client.extents.verify_fragment(now.fragment_addresses[4], extent_id,
                                                    4) == info.ec_crcs[4]
        # Lose two more (fragments 0 and 1): reads need the rebuilt parity fragment, which
        # the stream finds when the fragments it knows of are too few.
        stamp.kill(now.fragments[0])
        stamp.kill(now.fragments[1])
        await check_reads(stream, acked, rng)
        await client.close()
    asyncio.run(scenario())


def run_cli(stamp: LocalStamp, *args: str, faults: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STAMP_FAULTS=faults) if faults else None
    return subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir",
                           str(stamp.data_dir), *args], capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.fixture(scope="module")
def conversion_stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    """One stamp (6 ENs, 3 SMs) for the crashed conversions: what crashes is the `stamp
    extent ec` process, never a server, and each test converts an extent of its own stream,
    so none needs a fresh stamp (9 processes fewer to start per case)."""
    with module_stamp(tmp_path_factory, "ec-conversion", extent_nodes=6,
                      stream_managers=3) as stamp:
        yield stamp


@pytest.mark.parametrize("point", ["ec.convert.after_encode", "ec.convert.after_write",
                                   "ec.convert.after_record",
                                   "ec.convert.after_delete_replica"])
def test_conversion_crashed_half_way_stays_readable_and_completes_on_rerun(
        conversion_stamp: LocalStamp, rng: random.Random, point: str) -> None:
    stamp = conversion_stamp
    name = f"log-{point}"  # a stream of the test's own in the shared stamp

    async def setup() -> tuple[int, list[tuple[Location, bytes]]]:
        client = client_for(stamp)
        _, acked = await sealed_extent(client, rng, blocks=60, name=name)
        await client.close()
        return acked[0][0].extent_id, acked
    extent_id, acked = asyncio.run(setup())

    crashed = run_cli(stamp, "extent", "ec", str(extent_id), faults=f"{point}=crash")
    assert crashed.returncode == -9, crashed.stdout + crashed.stderr

    async def readable() -> str:
        client = client_for(stamp)
        stream = await client.open_stream(name)
        assert [(loc, data) async for loc, data in stream.blocks()] == acked
        for loc, data in acked[::7]:
            assert await stream.read(loc) == data
        state = (await client.sm.get_extent(extent_id)).state
        await client.close()
        return state
    state = asyncio.run(readable())
    assert state == ("sealed" if point in ("ec.convert.after_encode", "ec.convert.after_write")
                     else "erasure_coded")

    done = run_cli(stamp, "extent", "ec", str(extent_id))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "erasure-coded as RS(3,2)" in done.stdout

    async def finished() -> None:
        client = client_for(stamp)
        info = await client.sm.get_extent(extent_id)
        assert info.state == "erasure_coded" and list(info.replicas) == []
        assert await replicas_held(stamp, client, extent_id) == []
        for index, address in enumerate(info.fragment_addresses):
            assert await client.extents.verify_fragment(address, extent_id, index) == \
                info.ec_crcs[index]
        stream = await client.open_stream(name)
        assert [(loc, data) async for loc, data in stream.blocks()] == acked
        assert crc32c(extent_bytes(acked)) == crc32c(b"".join(
            [await client.coded.read_range(CodedExtent.from_info(info), 0,
                                           info.sealed_length)]))
        await client.close()
    asyncio.run(finished())


def test_extent_node_crash_while_storing_a_fragment(stamp_factory: StampFactory,
                                                    rng: random.Random) -> None:
    """An extent node dies before a fragment is in place: the conversion fails, the extent
    stays sealed and readable, and a rerun (the node back) completes it."""
    stamp = stamp_factory(5, 3)  # RS(3,2) needs all 5 nodes

    async def scenario() -> None:
        client = client_for(stamp)
        stream, acked = await sealed_extent(client, rng, blocks=40)
        extent_id = acked[0][0].extent_id
        victim = stamp.extent_nodes()[2].name
        stamp.kill(victim)
        stamp.start(victim, env={"STAMP_FAULTS": "en.fragment.before_rename=crash"})
        await client.extents.wait_serving(stamp.address(victim))
        await wait_for(lambda: _not_suspect(client, victim), 15, f"{victim} to be healthy")
        with pytest.raises(Exception):  # noqa: B017 - whatever the dead node's call raises
            await convert_extent(client.sm, client.extents, extent_id, k=3, m=2)
        # The call fails as the node's sockets close, a moment before its process is gone.
        await wait_for(lambda: _dead(stamp, victim), 5, f"{victim} to have crashed")
        assert (await client.sm.get_extent(extent_id)).state == "sealed"
        assert [(loc, data) async for loc, data in stream.blocks()] == acked
        stamp.start(victim)
        await wait_for(lambda: _not_suspect(client, victim), 15, f"{victim} to be back")
        info = await convert_extent(client.sm, client.extents, extent_id, k=3, m=2)
        assert info.state == "erasure_coded" and not info.replicas
        await check_reads(stream, acked, rng)
        await client.close()
    asyncio.run(scenario())


async def _dead(stamp: LocalStamp, name: str) -> bool:
    return not stamp.alive(name)


async def _not_suspect(client: AsyncStreamClient, name: str) -> bool:
    nodes = {n.name: n for n in await client.sm.list_nodes()}
    return name in nodes and not nodes[name].suspect and nodes[name].state == "alive"
