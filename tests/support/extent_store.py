"""One extent node's store (ExtentStore) opened on a directory, without a process."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from common.config import ExtentNodeLimits
from stream_layer import framing
from stream_layer.extent_node.store import ExtentStore

LIMITS = dataclasses.replace(ExtentNodeLimits(), checkpoint_interval_ms=3_600_000,
                             extent_bytes_max=1 << 20)


def open_store(root: Path) -> ExtentStore:
    store = ExtentStore(root / "data", root / "journal", LIMITS)
    store.recover()
    return store


async def append(store: ExtentStore, extent_id: int, payloads: list[bytes]) -> int:
    replica = store.get(extent_id)
    frames = b"".join(framing.frame(p) for p in payloads)
    offset = replica.accepted_end
    await store.accept_append(extent_id, offset, frames)
    return offset + len(frames)
