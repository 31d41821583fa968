"""A split child or merged partition starts warm (issue 17): with what its parents, served
on the same partition server, had cached — rows in its range, run indexes and data blocks.

Why it holds: a split or merge checkpoints its parents fully and changes no row, so each
cached row is still the row at its key; runs never change, so their indexes and blocks are
the child's too (it lists the same physical runs). Without it, the first operations after
the split waited for indexes and blocks from the extent nodes while the range was
unavailable (the meta rows an append reads are cached: checkpoint.py `_keep_flushed_rows`).
A parent that committed past its last checkpoint (not the state the child starts from)
hands over nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from partition_layer.partition import RangePartition

log = logging.getLogger(__name__)


def inherit_caches(child: RangePartition, parents: Sequence[RangePartition]
                   ) -> tuple[int, int, int]:
    """(rows, indexes, blocks) the child holds afterwards, logged when it had parents."""
    assert child.indexes is not None
    for parent in parents:
        if len(parent.memtable) or parent.frozen is not None or parent.indexes is None:
            continue
        for key, encoded in parent.row_cache.items():
            if child.range.contains(key):
                child.row_cache.put(key, encoded)
        child.indexes.adopt(parent.indexes)
        for location, block in parent.block_cache.items():
            child.block_cache.put(location, block)
    held = len(child.row_cache), child.indexes.count, len(child.block_cache)
    if parents:
        log.info("partition %d: warm from its parents: %d rows, %d indexes, %d blocks",
                 child.id, *held)
    return held
