"""`stamp demo`: the main job through the SDK and the front ends (logs, entities, scans,
shared access tokens: tools/log_demo.py), then the stream layer beneath it.

The stream-layer part creates a stream, appends records to it (one and several blocks
per append, each on three extent nodes in distinct fault domains before it is
acknowledged), reads every record back from every replica, then SIGKILLs the primary of the
stream's open extent and keeps appending: the stream seals that extent at the smallest
commit length of its live replicas and continues on a new one. The node restarts; every
acknowledged record is still there. Last, a short analytics step: records per log counted
by Spark through the Stamp data source (tools/log_demo.run_analytics).
"""

from __future__ import annotations

import asyncio
import secrets
import time

from common.errors import StampError
from stream_layer.client import AsyncStreamClient
from stream_layer.framing import Location
from tools.local_stamp import LocalStamp
from tools.progress import waiting


def run_demo(stamp: LocalStamp) -> None:
    if not stamp.stream_managers():
        raise StampError("the demo needs stream managers: this stamp has none")
    logs: list[str] = []
    if stamp.partition_servers() and stamp.front_ends():
        from tools.log_demo import run_log_demo

        logs = run_log_demo(stamp)
        print()
        print("Underneath, the stream layer:")
    asyncio.run(_demo(stamp))
    if logs:
        from tools.log_demo import run_analytics

        print()
        run_analytics(stamp, logs)


def _ms(started: float) -> str:
    return f"{(time.perf_counter() - started) * 1000:.2f} ms"


async def _demo(stamp: LocalStamp) -> None:
    client = AsyncStreamClient([r.address for r in stamp.stream_managers()],
                               stamp.config.extent_node, stamp.config.stream_manager)
    name = f"demo-{secrets.token_hex(3)}"
    try:
        stream = await client.create_stream(name)
        extent = stream.extents[-1]
        where = ", ".join(f"{n} ({stamp.record(n).fault_domain})" for n in extent.replicas)
        print(f"stream {name}: extent {extent.extent_id} on {where}; primary "
              f"{extent.replicas[0]}")

        written: list[tuple[Location, bytes]] = []
        for blocks in ([b"hello, stamp"], [b"block %d of one atomic append" % i
                                           for i in range(3)], [b"x" * 4096]):
            started = time.perf_counter()
            locations = await stream.append(blocks)
            written += list(zip(locations, blocks, strict=True))
            print(f"  appended {len(blocks)} block(s) at offset {locations[0].offset}, "
                  f"durable on 3 replicas, in {_ms(started)}")
        for address, node in zip(extent.addresses, extent.replicas, strict=True):
            for location, data in written:
                assert await client.extents.read(address, location) == data
            print(f"  read all {len(written)} blocks back from {node}: identical, "
                  f"checksums verified")

        victim = extent.replicas[0]
        print(f"SIGKILL {victim}, the primary of the open extent, and keep appending:")
        stamp.kill(victim)
        started = time.perf_counter()
        locations = await stream.append([b"written after the kill"])
        written.append((locations[0], b"written after the kill"))
        print(f"  the stream sealed extent {extent.extent_id} and went on in extent "
              f"{locations[0].extent_id}: append acknowledged in {_ms(started)}")
        for i in range(20):
            block = b"record %d" % i
            written.append(((await stream.append([block]))[0], block))
        with waiting("demo", f"restarting {victim}") as progress:
            stamp.start(victim, progress=progress)
        print(f"  {victim} restarted")

        found = {location: data async for location, data in stream.blocks()}
        assert all(found.get(location) == data for location, data in written)
        print(f"  all {len(written)} acknowledged records read back in order from the "
              f"stream's {len(stream.extents)} extents:")
        for e in stream.extents:
            length = f" at {e.sealed_length} bytes" if e.state == "sealed" else ""
            print(f"    extent {e.extent_id}: {e.state}{length} on {', '.join(e.replicas)}")
    finally:
        await client.close()
