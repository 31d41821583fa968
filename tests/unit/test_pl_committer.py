"""The group committer on a partition over in-memory streams (pure logic): appends commit in
order with consecutive sequence numbers, and the committer's own lookups (a log's meta row,
an append's token) put nothing in the row cache, even when they reach the checkpoints."""

from __future__ import annotations

import asyncio
import dataclasses

from common.config import PartitionLimits
from partition_layer import partition as partition_module
from partition_layer.keys import KeyRange
from partition_layer.operations import LogAppend
from partition_layer.partition_meta import PartitionMeta
from partition_layer.run_cache import IndexCache
from tests.unit.test_pl_runs import FakeStream


def serving_partition(limits: PartitionLimits) -> partition_module.RangePartition:
    """A partition as `load` leaves a new one, on in-memory streams."""
    p = partition_module.RangePartition(1, KeyRange(b"", None), None,  # type: ignore[arg-type]
                                        limits, epoch=1, lease_valid=lambda: True)
    p.streams = {kind: FakeStream() for kind in ("log", "row", "meta", "blob")}  # type: ignore[misc]
    p.meta = PartitionMeta(partition_id=1, key_range=p.range, runs=[], replay_from=None,
                           applied_lsn=0, next_run_id=1, intents=[])
    p.indexes = IndexCache(limits.index_cache_bytes_max, p.streams["row"].read,
                           p.block_cache)
    p.state = partition_module.SERVING
    p.committer.start()
    return p


def test_committed_appends_leave_no_row_cache_entries() -> None:
    limits = dataclasses.replace(PartitionLimits(), memtable_bytes_max=64 * 1024)

    async def scenario() -> None:
        p = serving_partition(limits)
        cached: list[bytes] = []
        put = p.row_cache.put

        def spy(key: bytes, value: object) -> None:
            cached.append(key)
            put(key, value)
        p.row_cache.put = spy  # type: ignore[method-assign]
        expected = {f"log-{i}": 0 for i in range(8)}
        for round_ in range(60):
            futures = [p.committer.submit_nowait(
                LogAppend("acct", log, (b"r" * 300,), token=f"t-{round_}-{log}"), 400)
                for log in expected]
            firsts = await asyncio.gather(*futures)
            assert firsts == list(expected.values())  # consecutive, per log
            for log in expected:
                expected[log] += 1
        assert p.checkpointer.checkpoints >= 2, "the test needs runs to look through"
        # Each lookup missed (tokens are new; meta rows were being written), and each key
        # was written by the commit right after: caching the misses would only churn.
        assert cached == [] and len(p.row_cache) == 0
        for log, next_seq in expected.items():
            state = await p.log_state("acct", log)
            assert (state.first_seq, state.next_seq) == (0, next_seq)
        # A retried token still finds its original answer (in a run by now).
        retry = LogAppend("acct", "log-3", (b"r" * 300,), token="t-0-log-3")
        assert await p.committer.submit_nowait(retry, 400) == 0
        p.committer.cancel()

    asyncio.run(scenario())
