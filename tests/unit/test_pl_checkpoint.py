"""The checkpointer writes a run without holding the event loop (pure logic, in-memory
stream): the partition's commits interleave with a long run write."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from common.config import PartitionLimits
from partition_layer.checkpoint import ROWS_PER_YIELD, Checkpointer
from partition_layer.keys import KeyRange
from partition_layer.memtable import Memtable
from partition_layer.merge import aiter_sync
from partition_layer.operations import record_key
from partition_layer.partition_meta import PartitionMeta
from partition_layer.rows import Row, encode_row
from tests.unit.test_pl_runs import FakeStream


def test_a_run_write_lets_other_tasks_run_between_rows() -> None:
    rows = 40 * ROWS_PER_YIELD
    memtable = Memtable()
    for n in range(rows):
        memtable.put(record_key("acct", "log", n), encode_row(Row(n + 1, value=b"v" * 100)))
    stream = FakeStream()
    partition = SimpleNamespace(meta=PartitionMeta(1, KeyRange(b"", None)),
                                streams={"row": stream}, limits=PartitionLimits())

    async def scenario() -> tuple[int, int]:
        turns = 0
        done = False

        async def other_work() -> None:  # stands for the committer
            nonlocal turns
            while not done:
                turns += 1
                await asyncio.sleep(0)

        other = asyncio.get_running_loop().create_task(other_work())
        await asyncio.sleep(0)
        info = await Checkpointer(partition)._write_run(  # type: ignore[arg-type]
            [aiter_sync(memtable.items())], drop_tombstones=True)
        done = True
        await other
        assert info is not None
        return info.key_count, turns

    key_count, turns = asyncio.run(scenario())
    assert key_count == rows
    # The in-memory stream never suspends: every turn the other task got was a yield.
    assert turns >= rows // ROWS_PER_YIELD
