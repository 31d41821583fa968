"""Coded reads and rebuilds (stream_layer/ec/reader.py) against fragments in memory: straight
reads, lost/corrupt/slow fragments (hedged), bytes that fail their frame checksum, too few
fragments, and whole-fragment rebuilds checked against the recorded CRC32C."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time

import pytest

from common.checksums import crc32c
from common.config import ExtentNodeLimits
from common.errors import ChecksumError, NotFound, Unavailable
from erasure import ReedSolomon
from stream_layer import framing
from stream_layer.ec.layout import layout_extent
from stream_layer.ec.reader import CodedExtent, CodedReader, rebuild_fragments

K, M = 3, 2


class FakeFragments:
    """Stands in for AsyncExtentClient: fragment i is at address f"en-{i}"."""

    def __init__(self, fragments: list[bytes]) -> None:
        self.limits = ExtentNodeLimits(fragment_hedge_ms=50, fragment_chunk_bytes=1000)
        self.fragments = list(fragments)
        self.missing: set[int] = set()
        self.slow: dict[int, float] = {}
        self.reads: list[int] = []

    async def read_fragment(self, address: str, extent_id: int, index: int, offset: int,
                            length: int, timeout_s: float | None = None) -> bytes:
        self.reads.append(index)
        if index in self.slow:
            await asyncio.sleep(self.slow[index])
        if index in self.missing:
            raise NotFound(f"no fragment {index}")
        return self.fragments[index][offset:offset + length]


def coded_extent(rng: random.Random) -> tuple[bytes, CodedExtent, FakeFragments]:
    extent = b"".join(framing.frame(rng.randbytes(rng.randrange(1, 900))) for _ in range(40))
    layout = layout_extent(extent, K, M)
    data = layout.data_fragments(extent)
    fragments = data + ReedSolomon(K, M).encode(data)
    coded = CodedExtent(1, layout, tuple(f"en-{i}" for i in range(K + M)),
                        tuple(crc32c(f) for f in fragments))
    return extent, coded, FakeFragments(fragments)


def reader_for(fake: FakeFragments) -> tuple[CodedReader, list[tuple[int, int]]]:
    reports: list[tuple[int, int]] = []

    async def report(extent_id: int, index: int, reason: str) -> None:
        reports.append((extent_id, index))
    return CodedReader(fake, report), reports  # type: ignore[arg-type]


def test_straight_reads_touch_only_data_fragments(rng: random.Random) -> None:
    extent, coded, fake = coded_extent(rng)
    reader, reports = reader_for(fake)

    async def scenario() -> None:
        for _ in range(50):
            offset = rng.randrange(len(extent))
            length = rng.randrange(len(extent) - offset + 1)
            assert await reader.read_range(coded, offset, length) == \
                extent[offset:offset + length]
    asyncio.run(scenario())
    assert set(fake.reads) <= set(range(K)) and not reports


def test_lost_fragments_are_rebuilt_and_reported(rng: random.Random) -> None:
    extent, coded, fake = coded_extent(rng)
    fake.missing = {0, 1}
    reader, reports = reader_for(fake)
    got = asyncio.run(reader.read_range(coded, 0, len(extent)))
    assert got == extent
    assert sorted(set(reports)) == [(1, 0), (1, 1)]
    fake.missing = {0, 1, 4}
    with pytest.raises(Unavailable):
        asyncio.run(reader.read_range(coded, 0, 10))


def test_a_slow_data_fragment_is_hedged(rng: random.Random) -> None:
    extent, coded, fake = coded_extent(rng)
    fake.slow = {0: 5.0}
    reader, reports = reader_for(fake)
    started = time.monotonic()
    assert asyncio.run(reader.read_range(coded, 0, coded.layout.cuts[1])) == \
        extent[:coded.layout.cuts[1]]
    assert time.monotonic() - started < 2.0
    assert not reports  # slow is not bad


def test_bytes_failing_their_frame_checksum_are_rebuilt_without_that_fragment(
        rng: random.Random) -> None:
    extent, coded, fake = coded_extent(rng)
    bad = bytearray(fake.fragments[1])
    bad[5] ^= 1  # corrupt in a way the node did not notice: only the frame CRC does
    fake.fragments[1] = bytes(bad)
    reader, _ = reader_for(fake)
    start = coded.layout.cuts[1]
    frames = asyncio.run(reader.read_frames(coded, start, 2000))
    assert frames == extent[start:start + len(frames)] and frames
    framing.verify_frames(frames, "rebuilt")


def test_rebuild_is_bit_identical_or_fails(rng: random.Random) -> None:
    _, coded, fake = coded_extent(rng)
    original = list(fake.fragments)
    rebuilt = asyncio.run(rebuild_fragments(fake, coded, {0, 4}))  # type: ignore[arg-type]
    assert rebuilt == {0: original[0], 4: original[4]}
    fake.missing = {1}  # unreadable but not lost: the rebuild reads another instead
    assert asyncio.run(rebuild_fragments(fake, coded, {0})) == {0: original[0]}  # type: ignore[arg-type]
    fake.missing = {1, 2}
    with pytest.raises(Unavailable):
        asyncio.run(rebuild_fragments(fake, coded, {0}))  # type: ignore[arg-type]
    fake.missing = set()
    wrong = dataclasses.replace(coded, crcs=(0,) * (K + M))
    with pytest.raises(ChecksumError):
        asyncio.run(rebuild_fragments(fake, wrong, {3}))  # type: ignore[arg-type]


def test_a_rebuild_asks_k_fragments_and_more_only_when_they_fail_or_lag(
        rng: random.Random) -> None:
    extent, coded, fake = coded_extent(rng)
    first = coded.layout.cuts[1]
    reader, _ = reader_for(fake)
    fake.missing = {0}
    assert asyncio.run(reader.read_range(coded, 0, first)) == extent[:first]
    assert sorted(fake.reads) == [0, 1, 2, 3]  # the lost one, then exactly k others
    fake.reads.clear()
    fake.slow = {1: 5.0}
    started = time.monotonic()
    assert asyncio.run(reader.read_range(coded, 0, first)) == extent[:first]
    assert time.monotonic() - started < 2.0
    assert sorted(fake.reads) == [0, 1, 2, 3, 4]
