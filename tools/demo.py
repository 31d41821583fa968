"""`stamp demo`: the main job of the stream layer, shown on a running local stamp.

Creates an extent on three extent nodes in distinct fault domains, appends records (one and
several blocks per append), reads every block back from every replica, then SIGKILLs a
secondary: the next append fails, the extent is sealed at the smallest commit length, the
node restarts, is synced to the sealed length, and all three replicas are bitwise identical.
"""

from __future__ import annotations

import asyncio
import time

from common.errors import StampError
from common.ids import random_extent_id
from stream_layer.extent_client import AsyncExtentClient
from stream_layer.seal import seal_extent
from tools.local_stamp import LocalStamp, ProcessRecord


def pick_replicas(nodes: list[ProcessRecord]) -> list[ProcessRecord]:
    """One live node from each of three fault domains (the stream manager's job later)."""
    by_domain: dict[str, ProcessRecord] = {}
    for node in nodes:
        by_domain.setdefault(node.fault_domain, node)
    if len(by_domain) < 3:
        raise StampError(f"need extent nodes in 3 fault domains, found {sorted(by_domain)}")
    return [by_domain[d] for d in sorted(by_domain)[:3]]


def run_demo(stamp: LocalStamp) -> None:
    live = [n for n in stamp.extent_nodes() if stamp.alive(n.name)]
    replicas = pick_replicas(live)
    asyncio.run(_demo(stamp, replicas))


async def _demo(stamp: LocalStamp, replicas: list[ProcessRecord]) -> None:
    client = AsyncExtentClient(stamp.config.extent_node)
    addresses = [r.address for r in replicas]
    extent_id = random_extent_id()
    try:
        await client.create_replicated(extent_id, addresses)
        where = ", ".join(f"{r.name} ({r.fault_domain})" for r in replicas)
        print(f"extent {extent_id:#x} on {where}; primary {replicas[0].name}")

        records = [[b"hello, stamp"], [b"block %d of an atomic append" % i for i in range(3)],
                   [b"x" * 4096]]
        written = []
        for blocks in records:
            started = time.perf_counter()
            locs = await client.append(addresses[0], extent_id, blocks)
            ms = (time.perf_counter() - started) * 1000
            written += list(zip(locs, blocks, strict=True))
            print(f"  appended {len(blocks)} block(s) at offset {locs[0].offset} "
                  f"(3 replicas durable) in {ms:.2f} ms")
        for address, rec in zip(addresses, replicas, strict=True):
            for loc, data in written:
                assert await client.read(address, loc) == data
            print(f"  read {len(written)} blocks back from {rec.name}: identical, checksums ok")

        victim = replicas[2]
        print(f"SIGKILL {victim.name} (a secondary), then append again:")
        stamp.kill(victim.name)
        try:
            await client.append(addresses[0], extent_id, [b"this append cannot reach 3 copies"])
            raise AssertionError("an append succeeded with a replica down")
        except StampError as exc:
            print(f"  append refused: {type(exc).__name__}")
        length, sealed_on = await seal_extent(client, extent_id, addresses)
        print(f"  sealed at length {length} on {len(sealed_on)} reachable replicas "
              f"(the smallest commit length)")
        stamp.start(victim.name)
        await client.wait_serving(victim.address)
        await client.seal(victim.address, extent_id, length, sources=sealed_on)
        print(f"  {victim.name} restarted and synced to the sealed length")
        images = [await client.read_frames(a, extent_id, 0, length) for a in addresses]
        assert all(image == images[0] for image in images)
        assert all(loc.end <= length for loc, _ in written)
        print(f"  all 3 replicas bitwise identical ({length} bytes); every acknowledged "
              f"block is there")
    finally:
        await client.close()
