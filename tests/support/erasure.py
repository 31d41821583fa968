"""Erasure-coded extents in a running stamp: a sealed extent to convert, the reads that
must return what was acknowledged, and the fragment files extent nodes keep."""

from __future__ import annotations

import random
from pathlib import Path

from stream_layer import framing
from stream_layer.client import AsyncStream, AsyncStreamClient
from stream_layer.ec.reader import CodedExtent
from stream_layer.extent_node.fragments import fragment_name
from stream_layer.framing import Location
from tools.local_stamp import LocalStamp


async def sealed_extent(client: AsyncStreamClient, rng: random.Random, blocks: int = 150,
                        name: str = "log") -> tuple[AsyncStream, list[tuple[Location, bytes]]]:
    """A stream whose first extent is sealed with `blocks` blocks of random sizes."""
    stream = await client.create_stream(name)
    acked = []
    for n in range(blocks):
        block = rng.randbytes(rng.choice([1, 100, 4000, 20_000, 70_000]))
        acked.append(((await stream.append([block]))[0], block))
        del n
    await stream.seal_last()
    assert {loc.extent_id for loc, _ in acked} == {stream.extents[0].extent_id}
    return stream, acked


async def check_reads(stream: AsyncStream, acked: list[tuple[Location, bytes]],
                      rng: random.Random) -> None:
    """Block by block, the whole stream, arbitrary byte ranges and frame reads."""
    for loc, data in acked:
        assert await stream.read(loc) == data, loc
    assert [(loc, data) async for loc, data in stream.blocks()] == acked
    info = (await stream.refresh()).extents[0]
    coded = CodedExtent.from_info(info)
    extent = extent_bytes(acked)
    for _ in range(40):
        offset = rng.randrange(len(extent))
        length = rng.randrange(len(extent) - offset + 1)
        assert await stream.client.coded.read_range(coded, offset, length) == \
            extent[offset:offset + length]
    for _ in range(20):
        loc, _ = rng.choice(acked)
        length = rng.choice([1, 5000, 100_000, 1 << 20])
        assert await stream.client.coded.read_frames(coded, loc.offset, length) == \
            reference_frames(extent, loc.offset, length)


def fragment_file(stamp: LocalStamp, node: str, extent_id: int, index: int) -> Path:
    return Path(stamp.record(node).dir) / "fragments" / fragment_name(extent_id, index)

def extent_bytes(acked: list[tuple[Location, bytes]]) -> bytes:
    return b"".join(framing.frame(data) for _, data in acked)


def reference_frames(extent: bytes, offset: int, length: int) -> bytes:
    """What an extent node's Read returns: whole frames from offset within length, >= 1."""
    end, pos = offset, offset
    while pos < len(extent):
        size = framing.frame_bytes(framing.HEADER.unpack_from(extent, pos)[0])
        if pos + size > offset + length and pos > offset:
            break
        end = pos = pos + size
        if end >= offset + length:
            break
    return extent[offset:end]
