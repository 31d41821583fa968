"""Sizes through views and the size split key (partition_layer/size_split.py, issue 17)."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace

from common.config import PartitionLimits
from partition_layer import keys
from partition_layer.keys import KIND_ENTITY, KIND_META, KeyRange, encode_key
from partition_layer.memtable import Memtable
from partition_layer.run_cache import IndexCache, Run
from partition_layer.runs import RunIndex, RunInfo, block_cache
from partition_layer.size_split import run_bytes_in_view, size_split_key
from tests.support.partitions import serving_partition
from tests.support.runs import row, write_run
from tests.support.streams import FakeStream

ITEMS = [(b"k%04d" % i, row(i, 40)) for i in range(1000)]


def viewed(info: RunInfo, low: bytes, high: bytes | None) -> RunInfo:
    return dataclasses.replace(info, view_low=low, view_high=high)


def about(got: int, expected: float, within: float) -> bool:
    return abs(got - expected) <= within * expected


def test_a_run_reports_its_bytes_within_its_view() -> None:
    async def body() -> None:
        stream = FakeStream()
        info = await write_run(stream, ITEMS, block_bytes_target=1024)
        index = await RunIndex.load(info, stream.read)
        assert info.data_blocks > 40
        assert run_bytes_in_view(info, index) == info.data_bytes
        assert run_bytes_in_view(viewed(info, b"", b"k9999"), index) == info.data_bytes
        left = run_bytes_in_view(viewed(info, b"", b"k0500"), index)
        right = run_bytes_in_view(viewed(info, b"k0500", None), index)
        assert about(left, info.data_bytes / 2, 0.05) and about(right, info.data_bytes / 2,
                                                                0.05)
        assert about(left + right, info.data_bytes, 0.01), "the halves add up"
        quarter = run_bytes_in_view(viewed(info, b"k0250", b"k0500"), index)
        assert about(quarter, info.data_bytes / 4, 0.08)
        assert run_bytes_in_view(viewed(info, b"m", None), index) == 0
        assert run_bytes_in_view(viewed(info, b"", b"k"), index) == 0
        # The index not loaded yet: RunInfo alone says data_bytes, or 0 for a disjoint view.
        assert run_bytes_in_view(viewed(info, b"k0500", None), None) == info.data_bytes
        assert run_bytes_in_view(viewed(info, b"m", None), None) == 0

        one = await write_run(stream, ITEMS[:10], block_bytes_target=1 << 20)
        one_index = await RunIndex.load(one, stream.read)
        assert one.data_blocks == 1
        halves = [run_bytes_in_view(viewed(one, b"", b"k0005"), one_index),
                  run_bytes_in_view(viewed(one, b"k0005", None), one_index)]
        assert all(abs(h - one.data_bytes / 2) <= 1 for h in halves), (
            "a block partly in the view: half of it", halves, one.data_bytes)
    asyncio.run(body())


def entity(name: str, n: int) -> bytes:
    return encode_key("acct", name, KIND_ENTITY, b"r%04d" % n)


def name_start(name: str) -> bytes:
    return encode_key("acct", name, KIND_META, b"")


def rows_of(names: dict[str, int]) -> list[tuple[bytes, bytes]]:
    """`count` rows of 100 bytes under each name, in key order."""
    return sorted((entity(name, n), row(n, 100)) for name, count in names.items()
                  for n in range(count))


EVERYTHING = KeyRange(b"", None)


def partition_of(runs: list[Run], key_range: KeyRange = EVERYTHING,
                 memtable: Memtable | None = None) -> SimpleNamespace:
    return SimpleNamespace(range=key_range, memtable=memtable or Memtable(), frozen=None,
                           readers=runs)


async def loaded_runs(stream: FakeStream, infos: list[RunInfo]) -> list[Run]:
    cache = IndexCache(1 << 24, stream.read, block_cache(0))
    runs = [Run(info, cache) for info in infos]
    for r in runs:
        await r.warm()
    return runs


def left_share(items: list[tuple[bytes, bytes]], key: bytes) -> float:
    return sum(len(k) + len(v) for k, v in items if k < key) / sum(
        len(k) + len(v) for k, v in items)


def test_the_size_split_key_halves_the_data_at_the_start_of_a_name() -> None:
    names = {f"n{i:03d}": 20 for i in range(100)}
    items = rows_of(names)

    async def body() -> None:
        stream = FakeStream()
        info = await write_run(stream, items, block_bytes_target=2048)
        (run,) = await loaded_runs(stream, [info])
        key = size_split_key(partition_of([run]))
        pname = keys.decode_key(key)[1]
        assert key == name_start(pname), "a split never cuts a partition name"
        assert 0.45 <= left_share(items, key) <= 0.55
        # The right half as a split child lists it: the key halves the view, not the run.
        child = KeyRange(key, None)
        (half,) = await loaded_runs(stream, [viewed(info, key, None)])
        quarter = size_split_key(partition_of([half], child))
        mine = [(k, v) for k, v in items if k >= key]
        assert quarter == name_start(keys.decode_key(quarter)[1])
        assert 0.45 <= left_share(mine, quarter) <= 0.55
        assert child.low < quarter
        # The memtable alone, and a run whose index is not loaded yet (ignored).
        memtable = Memtable()
        for k, v in items:
            memtable.put(k, v)
        unloaded = Run(info, IndexCache(1 << 24, stream.read, block_cache(0)))
        from_memtable = size_split_key(partition_of([unloaded], memtable=memtable))
        assert 0.45 <= left_share(items, from_memtable) <= 0.55
        assert size_split_key(partition_of([unloaded])) == b"", "nothing known: no key"
    asyncio.run(body())


def test_one_name_holding_it_all_has_no_split_key_and_a_big_first_name_yields_the_next(
        ) -> None:
    async def body() -> None:
        stream = FakeStream()
        alone = rows_of({"big": 500})
        (run,) = await loaded_runs(stream, [await write_run(stream, alone,
                                                            block_bytes_target=2048)])
        assert size_split_key(partition_of([run])) == b""
        assert size_split_key(partition_of([run], KeyRange(name_start("big"), None))) == b""

        lopsided = rows_of({"a": 700, "b": 200, "c": 100})
        (run,) = await loaded_runs(stream, [await write_run(stream, lopsided,
                                                            block_bytes_target=2048)])
        # "a" holds the median but starts the range: the next name is the best cut.
        assert size_split_key(partition_of([run], KeyRange(name_start("a"), None))) == \
            name_start("b")
        assert size_split_key(partition_of([run])) == name_start("b")
        # A range that ends before "c": "b" still cuts it, strictly inside.
        assert size_split_key(partition_of([run], KeyRange(b"", name_start("c")))) == \
            name_start("b")
    asyncio.run(body())


def test_load_report_sizes_runs_through_their_views() -> None:
    """A partition listing a run with a view of half its keys reports about half its bytes,
    and its size split key lies inside its own range."""
    items = rows_of({f"n{i:03d}": 20 for i in range(100)})
    split = name_start("n050")

    async def body() -> None:
        p = serving_partition(PartitionLimits())
        info = await write_run(p.streams["row"], items,  # type: ignore[arg-type]
                               block_bytes_target=2048)
        p.range = KeyRange(split, None)
        p.readers = [Run(viewed(info, split, None), p.indexes)]  # type: ignore[arg-type]
        await p.readers[0].warm()
        report = p.load_report()
        assert about(report["size_bytes"], info.data_bytes / 2, 0.05), (
            report["size_bytes"], info.data_bytes)
        key = report["size_split_key"]
        assert isinstance(key, bytes) and split < key
        assert 0.45 <= left_share([(k, v) for k, v in items if k >= split], key) <= 0.55
        await p.stop("test over")
        await p.closed()
    asyncio.run(body())
