"""A checkpointer's site without a partition (checkpoint.CheckpointSite on in-memory
streams), for the checkpointer's tests and those of what it records."""

from __future__ import annotations

from common.config import PartitionLimits
from partition_layer.cache import LruCache
from partition_layer.keys import KeyRange
from partition_layer.memtable import Memtable
from partition_layer.partition_meta import PartitionMeta
from partition_layer.run_cache import IndexCache, Run
from partition_layer.runs import block_cache
from tests.support.streams import FakeStream

EVERYTHING = KeyRange(b"", None)


class MemorySite:
    """A CheckpointSite on in-memory streams: the fields the checkpointer swaps and
    publishes, and a record of how it held the commits back."""

    def __init__(self, limits: PartitionLimits, key_range: KeyRange = EVERYTHING,
                 streams: dict[str, FakeStream] | None = None) -> None:
        self.id, self.limits, self.range = 7, limits, key_range
        self.streams = streams or {"row": FakeStream(), "meta": FakeStream()}
        self.memtable, self.frozen = Memtable(), None
        self.meta: PartitionMeta | None = PartitionMeta(7, key_range)
        self.readers: list[Run] = []
        self.row_cache = LruCache(1 << 20)
        self.indexes = IndexCache(1 << 20, self.streams["row"].read, block_cache(1 << 20))
        self.applied_lsn, self.last_commit, self.log_bytes = 0, None, 0
        self.shipper = None  # no inter-stamp replication here
        self.witnesses = None  # no CURP witnesses: entity tokens expire by their TTL alone
        self.recovering = False
        self.version_floor = 0
        self.commits: list[str] = []
        self.stopped_for: list[str] = []

    async def drain_commits(self) -> None:
        self.commits.append("drain")

    def resume_commits(self) -> None:
        self.commits.append("resume")

    async def stop(self, reason: str) -> None:
        self.stopped_for.append(reason)
