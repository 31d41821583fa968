"""Run indexes loaded on demand (partition_layer/run_cache.py): nothing is read until a run
is used, concurrent first uses share one load, and an evicted index is loaded again."""

from __future__ import annotations

import asyncio

from partition_layer.run_cache import IndexCache, Run
from partition_layer.runs import block_cache
from tests.support.runs import collect, row, write_run
from tests.support.streams import FakeStream


def test_indexes_load_on_first_use_once_and_again_after_eviction() -> None:
    async def body() -> None:
        stream = FakeStream()
        items = [(b"k%04d" % i, row(i)) for i in range(500)]
        infos = [await write_run(stream, items[:250], run_id=1, block_bytes_target=512),
                 await write_run(stream, items[250:], run_id=2, block_bytes_target=512)]
        stream.reads = 0
        one_index = IndexCache(1 << 20, stream.read, block_cache(0))
        runs = [Run(info, one_index) for info in infos]
        assert stream.reads == 0 and one_index.loads == 0  # nothing read up front
        assert await runs[0].get(b"k0300") is None  # outside run 1's keys: no index needed
        assert one_index.loads == 0
        results = await asyncio.gather(*(runs[0].get(b"k%04d" % i) for i in range(20)))
        assert results == [v for _, v in items[:20]]
        assert one_index.loads == 1  # twenty concurrent first uses, one load
        assert await collect(runs[1].scan(b"k0400", b"k0410")) == items[400:410]

        tiny = IndexCache(1, stream.read, block_cache(0))  # holds no index at all
        run = Run(infos[0], tiny)
        assert await run.get(b"k0001") == items[1][1]
        assert await run.get(b"k0002") == items[2][1]
        assert tiny.loads == 2 and tiny.nbytes == 0
    asyncio.run(body())


def test_merge_group_is_size_tiered() -> None:
    from partition_layer.checkpoint import merge_group
    from partition_layer.runs import RunInfo
    from stream_layer.framing import Location

    def run(run_id: int, size: int) -> RunInfo:
        return RunInfo(run_id, (Location(1, 0, 9),), (Location(1, 9, 9),), 1, 1, size,
                       b"a", b"b")
    sizes = {r.run_id for r in merge_group([run(5, 32), run(4, 32), run(3, 64), run(2, 512),
                                            run(1, 600)])}
    assert sizes == {5, 4, 3}  # 512 is more than twice 128: it and older ones stay
    assert [r.run_id for r in merge_group([run(2, 10), run(1, 1000)])] == [2]
    assert merge_group([]) == []
