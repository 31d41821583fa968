"""An extent node's fragment files (stream_layer/extent_node/fragments.py): whole, durable,
atomic writes checked against the writer's CRC32C; page-verified reads; flipped bits found."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from common.checksums import crc32c
from common.errors import ChecksumError, InvalidArgument, NotFound
from stream_layer.extent_node.fragments import PAGE_BYTES, FragmentStore, fragment_name


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


async def store_fragment(store: FragmentStore, extent_id: int, index: int, data: bytes,
                         chunk: int = 100_000, crc: int | None = None) -> None:
    writer = await store.begin(extent_id, index, len(data), crc32c(data) if crc is None
                               else crc)
    try:
        for offset in range(0, len(data), chunk):
            await store.write(writer, offset, data[offset:offset + chunk])
        await store.finish(writer)
    except BaseException:
        await store.abort(writer)
        raise


def test_write_read_verify_delete(tmp_path: Path) -> None:
    data = os.urandom(3 * PAGE_BYTES + 123)

    async def scenario() -> None:
        store = FragmentStore(tmp_path)
        await store_fragment(store, 7, 2, data)
        assert store.list() == [(7, 2)]
        for offset, length in [(0, len(data)), (5, 10), (PAGE_BYTES - 3, 7),
                               (len(data) - 1, 1), (100, 0)]:
            assert await store.read(7, 2, offset, length) == data[offset:offset + length]
        assert (await store.verify(7, 2)).crc == crc32c(data)
        with pytest.raises(InvalidArgument):
            await store.read(7, 2, len(data) - 1, 2)
        with pytest.raises(NotFound):
            await store.read(7, 3, 0, 1)
        await store.delete(7, 2)
        with pytest.raises(NotFound):
            await store.read(7, 2, 0, 1)
        store.close()
    run(scenario())


def test_a_write_with_the_wrong_checksum_or_length_leaves_nothing(tmp_path: Path) -> None:
    data = os.urandom(1000)

    async def scenario() -> None:
        store = FragmentStore(tmp_path)
        with pytest.raises(ChecksumError):
            await store_fragment(store, 1, 0, data, crc=crc32c(data) ^ 1)
        writer = await store.begin(1, 0, len(data) + 1, crc32c(data))
        await store.write(writer, 0, data)
        with pytest.raises(InvalidArgument):
            await store.finish(writer)
        assert store.list() == [] and not list(tmp_path.glob("*.tmp"))
        store.close()
    run(scenario())


def test_a_flipped_byte_fails_the_pages_it_is_in_only(tmp_path: Path) -> None:
    data = os.urandom(4 * PAGE_BYTES)

    async def scenario() -> None:
        store = FragmentStore(tmp_path)
        await store_fragment(store, 9, 0, data)
        path = tmp_path / fragment_name(9, 0)
        raw = bytearray(path.read_bytes())
        raw[2 * PAGE_BYTES + 10] ^= 0x40
        path.write_bytes(bytes(raw))
        assert await store.read(9, 0, 0, 2 * PAGE_BYTES) == data[:2 * PAGE_BYTES]
        with pytest.raises(ChecksumError):
            await store.read(9, 0, 2 * PAGE_BYTES, 20)
        with pytest.raises(ChecksumError):
            await store.verify(9, 0)
        raw[-3] ^= 1  # the trailer itself
        path.write_bytes(bytes(raw))
        with pytest.raises(ChecksumError):
            await store.read(9, 0, 0, 1)
        # A rewrite (a repair) replaces the file whole.
        await store_fragment(store, 9, 0, data)
        assert (await store.verify(9, 0)).crc == crc32c(data)
        store.close()
    run(scenario())


def test_interrupted_writes_are_cleaned_up_at_start(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = FragmentStore(tmp_path)
        writer = await store.begin(3, 1, 10, 0)
        await store.write(writer, 0, b"12345")  # ... and the node dies here
        store.close()
    run(scenario())
    assert list(tmp_path.glob("*.tmp"))
    restarted = FragmentStore(tmp_path)
    assert restarted.list() == [] and not list(tmp_path.glob("*.tmp"))
    restarted.close()
