"""Scrubbing a replica where it lies (stream_layer/extent_node/scrub.py): the pure frame
scanner on every chunking, and the store's scan of a real data file with a flipped byte."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from pathlib import Path

from common.config import ExtentNodeLimits
from stream_layer import framing
from stream_layer.extent_node.scrub import NO_BAD_FRAME, FrameScanner
from stream_layer.extent_node.store import ExtentStore

LIMITS = dataclasses.replace(ExtentNodeLimits(), checkpoint_interval_ms=3_600_000,
                             scrub_chunk_bytes=1000)


def frames(rng: random.Random, count: int) -> bytes:
    return b"".join(framing.frame(rng.randbytes(rng.choice([0, 1, 50, 700, 3000])))
                    for _ in range(count))


def scan(data: bytes, rng: random.Random) -> FrameScanner:
    scanner = FrameScanner()
    pos = 0
    while pos < len(data):
        step = rng.choice([1, 7, 100, 4096, len(data)])
        scanner.feed(data[pos:pos + step])
        pos += step
    scanner.finish()
    return scanner


def test_every_chunking_gives_the_same_frames_and_digest() -> None:
    rng = random.Random(7)
    data = frames(rng, 60)
    results = [scan(data, random.Random(seed)).result(len(data), True) for seed in range(20)]
    assert {(r.frames, r.digest, r.bad_offset) for r in results} == {
        (60, results[0].digest, NO_BAD_FRAME)}


def test_a_flipped_byte_names_its_frame_and_changes_nothing_before_it() -> None:
    rng = random.Random(8)
    data = bytearray(frames(rng, 40))
    starts = [pos for pos, _ in framing.iter_frames(bytes(data), "test")]
    for _ in range(30):
        flip = rng.randrange(len(data))
        corrupt = bytearray(data)
        corrupt[flip] ^= 0x04
        scanner = scan(bytes(corrupt), random.Random(flip))
        frame_start = max(s for s in starts if s <= flip)
        assert not scanner.ok
        # A flip in a header may make the frame claim another length: it is still found at
        # that frame, never later.
        assert scanner.bad_offset == frame_start, (flip, scanner.reason)


def test_a_partial_frame_at_the_end_is_bad() -> None:
    rng = random.Random(9)
    data = frames(rng, 5)
    scanner = scan(data[:-3], rng)
    last = max(pos for pos, _ in framing.iter_frames(data, "test"))
    assert scanner.bad_offset == last
    assert scanner.frames == 4


def test_replicas_with_other_frames_differ_in_digest() -> None:
    rng = random.Random(10)
    one = frames(rng, 10)
    a, b = scan(one, rng), scan(framing.frame(b"x") + one, rng)
    assert a.ok and b.ok and a.result(0, True).digest != b.result(0, True).digest


def test_store_scrub_finds_a_byte_flipped_on_disk(tmp_path: Path) -> None:
    rng = random.Random(11)

    async def scenario() -> None:
        store = ExtentStore(tmp_path / "data", tmp_path / "journal", LIMITS)
        store.recover()
        await store.start()
        await store.create(5, ["me", "b", "c"])
        data = frames(rng, 30)
        await store.accept_append(5, 0, data)
        fresh = await store.scrub(5)  # partly in memory, not yet in the file
        assert (fresh.length, fresh.frames, fresh.bad_offset) == (len(data), 30, NO_BAD_FRAME)
        await store.seal(5, len(data), lambda *a: asyncio.sleep(0))
        await store.checkpoint()
        clean = await store.scrub(5)
        assert (clean.sealed, clean.digest) == (True, fresh.digest)
        replica = store.get(5)
        raw = bytearray(replica.data_path.read_bytes())
        flip = len(raw) // 2
        raw[flip] ^= 0x80
        replica.data_path.write_bytes(bytes(raw))
        bad = await store.scrub(5)
        assert bad.bad_offset != NO_BAD_FRAME and bad.bad_offset <= flip
        await store.stop()
    asyncio.run(scenario())
