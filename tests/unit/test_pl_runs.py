"""Sorted runs over an in-memory stream, against a dict (property tests), plus corruption."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import ChecksumError, Internal, InvalidArgument
from partition_layer import run_blocks
from partition_layer.rows import Row, encode_row
from partition_layer.runs import RunIndex, RunInfo, RunReader, RunWriter, block_cache
from stream_layer.framing import frame_bytes
from tests.support.runs import collect, row, write_run
from tests.support.streams import FakeStream


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


keys_st = st.lists(st.binary(min_size=0, max_size=6), min_size=1, max_size=300, unique=True)


@settings(max_examples=60, deadline=None)
@given(keys_st, st.integers(64, 600), st.lists(st.binary(max_size=7), max_size=12),
       st.data())
def test_run_against_a_dict(keys: list[bytes], target: int, probes: list[bytes],
                            data: st.DataObject) -> None:
    items = sorted((k, row(i, i % 40)) for i, k in enumerate(keys))
    ref = dict(items)

    async def body() -> None:
        stream = FakeStream()
        info = await write_run(stream, items, block_bytes_target=target,
                               index_block_bytes_target=64)
        assert info.key_count == len(items)
        assert (info.first_key, info.last_key) == (items[0][0], items[-1][0])
        assert RunInfo.from_dict(info.to_dict()) == info
        index = await RunIndex.load(info, stream.read)
        assert len(index.first_keys) == info.data_blocks and index.nbytes > 0
        reader = RunReader(index, stream.read, block_cache(1 << 20))
        for key in [*ref, *probes]:
            assert await reader.get(key) == ref.get(key)
            if key in ref:
                assert index.may_contain(key) and index.block_for(key) is not None
        assert await collect(reader.scan(b"", None)) == items
        for _ in range(5):
            start = data.draw(st.binary(max_size=6))
            end = data.draw(st.none() | st.binary(max_size=6))
            expected = [(k, v) for k, v in items if start <= k and (end is None or k < end)]
            assert await collect(reader.scan(start, end)) == expected
            blocks = index.blocks_for_range(start, end)
            assert len(blocks) <= info.data_blocks
            if expected:
                assert index.block_for(expected[0][0]) in blocks
                assert index.block_for(expected[-1][0]) in blocks

    run(body())


def test_versions_sizes_and_batching() -> None:
    items = [(b"k%06d" % i, row(i, 100)) for i in range(5000)]

    async def body() -> None:
        stream = FakeStream(append_bytes_max=frame_bytes(4 << 20) * 2, append_blocks_max=5)
        info = await write_run(stream, items, block_bytes_target=1024,
                               append_bytes_max=frame_bytes(4 << 20) * 2, append_blocks_max=5)
        assert (info.min_version, info.max_version) == (0, 4999)
        assert info.data_blocks > 400 and max(stream.appends) <= 5
        assert info.data_bytes == sum(len(b) for loc, b in stream.blocks.items()
                                      if b.startswith(run_blocks.DATA_MAGIC))
        for loc, block in stream.blocks.items():
            if block.startswith(run_blocks.DATA_MAGIC):
                assert len(block) <= 1024 + 100, (loc, len(block))
        reader = RunReader(await RunIndex.load(info, stream.read), stream.read)
        stream.reads = 0
        assert await reader.get(b"k002500") == items[2500][1]
        assert stream.reads == 1  # one data block per get
        misses = [b"q%06d" % i for i in range(1000)]
        before = stream.reads
        assert all([await reader.get(m) is None for m in misses])
        assert stream.reads - before < 30  # the bloom filter turns away almost all

    run(body())


def test_appends_smaller_than_a_block_carry_one_block_each() -> None:
    """A checkpoint's appends are kept small (APPEND_BYTES_MAX_DEFAULT), smaller than a block
    can be: such a block goes in an append of its own."""
    items = [(b"k%06d" % i, row(i, 100)) for i in range(3000)]

    async def body() -> None:
        stream = FakeStream(append_bytes_max=20_000)
        info = await write_run(stream, items, block_bytes_target=30_000, append_bytes_max=20_000)
        sizes = sorted(len(b) for b in stream.blocks.values())
        assert sizes[-1] > 20_000, "the test needs a block over the append limit"
        assert len(stream.appends) >= info.data_blocks
        reader = RunReader(await RunIndex.load(info, stream.read), stream.read)
        assert [await reader.get(k) for k, _ in items[::97]] == [v for _, v in items[::97]]

    run(body())


def test_block_cache_serves_repeated_gets() -> None:
    items = [(b"k%04d" % i, row(i)) for i in range(1000)]

    async def body() -> None:
        stream = FakeStream()
        info = await write_run(stream, items, block_bytes_target=512)
        cache = block_cache(1 << 20)
        reader = RunReader(await RunIndex.load(info, stream.read), stream.read, cache)
        stream.reads = 0
        for _ in range(3):
            assert await reader.get(b"k0500") == items[500][1]
        assert stream.reads == 1 and cache.hits == 2
        await collect(reader.scan(b"", None))  # scans do not fill the cache
        assert len(cache) == 1

    run(body())


def test_big_index_and_bloom_span_several_blocks() -> None:
    items = [(b"key-%08d" % i, row(i, 1)) for i in range(4000)]

    async def body() -> None:
        stream = FakeStream()
        info = await write_run(stream, items, block_bytes_target=64,
                               index_block_bytes_target=2000)
        assert len(info.index_blocks) > 10
        index = await RunIndex.load(info, stream.read)
        reader = RunReader(index, stream.read)
        assert await collect(reader.scan(b"key-00001000", b"key-00001010")) == items[1000:1010]
        assert await reader.get(b"key-00003999") == items[-1][1]

    run(body())


def test_writer_refuses_misuse() -> None:
    async def body() -> None:
        writer = RunWriter(FakeStream().append)
        await writer.add(b"b", row(1))
        with pytest.raises(AssertionError):
            await writer.add(b"b", row(2))
        with pytest.raises(AssertionError):
            await writer.add(b"a", row(2))
        with pytest.raises(InvalidArgument):
            await writer.add(b"c", encode_row(Row(1, value=b"x" * (4 << 20))))
        await writer.finish()
        with pytest.raises(AssertionError):
            await writer.add(b"z", row(3))
        with pytest.raises(AssertionError):
            await RunWriter(FakeStream().append).finish()

    run(body())


def test_corrupt_and_misplaced_blocks_never_read_as_data() -> None:
    items = [(b"k%04d" % i, row(i)) for i in range(500)]

    async def body() -> None:
        stream = FakeStream()
        info = await write_run(stream, items, block_bytes_target=512)
        index = await RunIndex.load(info, stream.read)
        rng = random.Random(3)
        data_locs = list(index.locations)
        # Flip a bit in a data block: ChecksumError.
        victim = data_locs[3]
        good = stream.blocks[victim]
        flipped = bytearray(good)
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        stream.blocks[victim] = bytes(flipped)
        key = index.first_keys[3]
        with pytest.raises(ChecksumError):
            await RunReader(index, stream.read).get(key)
        # A valid block of the wrong place: Internal.
        stream.blocks[victim] = stream.blocks[data_locs[4]]
        with pytest.raises(Internal):
            await RunReader(index, stream.read).get(key)
        with pytest.raises(Internal):
            await collect(RunReader(index, stream.read).scan(b"", None))
        stream.blocks[victim] = good
        # Damaged index or bloom blocks: the load fails.
        for loc in (info.index_blocks[0], info.bloom_blocks[0]):
            saved = stream.blocks[loc]
            stream.blocks[loc] = saved[:-5] + bytes([saved[-5] ^ 0x10]) + saved[-4:]
            with pytest.raises(ChecksumError):
                await RunIndex.load(info, stream.read)
            stream.blocks[loc] = saved
        # A RunInfo that does not match the blocks: Internal.
        lying = RunInfo.from_dict({**info.to_dict(), "data_blocks": info.data_blocks + 1})
        with pytest.raises(Internal):
            await RunIndex.load(lying, stream.read)
        swapped = RunInfo.from_dict({**info.to_dict(), "bloom_blocks": [[
            loc.extent_id, loc.offset, loc.length] for loc in info.index_blocks]})
        with pytest.raises(Internal):
            await RunIndex.load(swapped, stream.read)

    run(body())


@given(st.lists(st.tuples(st.binary(max_size=5), st.binary(max_size=9)), min_size=1,
                max_size=30, unique_by=lambda kv: kv[0]))
def test_data_block_round_trip(entries: list[tuple[bytes, bytes]]) -> None:
    entries.sort()
    block = run_blocks.DataBlock(run_blocks.encode_data_block(entries))
    assert list(block.items()) == entries
    for key, value in entries:
        assert block.find(key) == value
    assert block.find(b"\xff" * 6) is None


def test_structurally_bad_blocks_raise_internal() -> None:
    def sealed(body: bytes) -> bytes:
        from common.checksums import crc32c
        return body + crc32c(body).to_bytes(4, "little")

    head = run_blocks._HEADER
    bad = [
        b"",
        sealed(head.pack(b"XX", 1, 1)),
        sealed(head.pack(run_blocks.DATA_MAGIC, 9, 1)),
        sealed(head.pack(run_blocks.DATA_MAGIC, 1, 0)),
        sealed(head.pack(run_blocks.DATA_MAGIC, 1, 1) + (0).to_bytes(4, "little")
               + (9).to_bytes(4, "little") + b"\x00" * 5),
        sealed(head.pack(run_blocks.DATA_MAGIC, 1, 1) + (0).to_bytes(4, "little")
               + (5).to_bytes(4, "little") + (7).to_bytes(4, "little") + b"x"),
    ]
    for buf in bad:
        with pytest.raises(Internal):
            block = run_blocks.DataBlock(buf)
            block.find(b"x")
    with pytest.raises(Internal):
        run_blocks.decode_index_block(sealed(head.pack(run_blocks.INDEX_MAGIC, 1, 0)))
    with pytest.raises(Internal):
        run_blocks.decode_index_block(sealed(head.pack(run_blocks.INDEX_MAGIC, 1, 3) + b"\x00"))
    with pytest.raises(Internal):
        run_blocks.decode_bloom_block(sealed(head.pack(run_blocks.BLOOM_MAGIC, 1, 0) + b"\x04"))


@pytest.mark.slow
def test_large_run_streams_with_bounded_batches() -> None:
    n = 200_000
    items = [(b"acct/log/%010d" % i, row(i, 200)) for i in range(n)]

    async def body() -> None:
        stream = FakeStream()
        info = await write_run(stream, items)
        assert info.data_bytes > 40 << 20 and max(stream.appends) <= 128
        index = await RunIndex.load(info, stream.read)
        reader = RunReader(index, stream.read)
        count = 0
        async for key, value in reader.scan(items[n // 2][0], None):
            assert (key, value) == items[n // 2 + count]
            count += 1
        assert count == n - n // 2

    run(body())
