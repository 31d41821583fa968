"""Sorted runs written to and read from a FakeStream."""

from __future__ import annotations

from collections.abc import AsyncIterator

from partition_layer.rows import Row, encode_row
from partition_layer.runs import RunInfo, RunWriter
from tests.support.streams import FakeStream


async def collect(it: AsyncIterator[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [item async for item in it]


async def write_run(stream: FakeStream, items: list[tuple[bytes, bytes]], **kw: int
                    ) -> RunInfo:
    writer = RunWriter(stream.append, **kw)
    for key, value in items:
        await writer.add(key, value)
    return await writer.finish()


def row(i: int, size: int = 8) -> bytes:
    return encode_row(Row(i, value=bytes([i % 251]) * size))
