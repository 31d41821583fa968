"""A range partition's four streams on the stream layer (§4 "A range partition's streams",
"Partition load"): their names, opening them fenced at a load, and reading the newest
metadata record.

Contract: `open_fenced` returns only once every stream is fenced with the loader's epoch, so
any older owner's append fails from then on (§8 invariant 3); after it every extent of those
streams is sealed, which is why `newest_meta` may take sealed lengths as the true ends.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from common.errors import NotFound, StampError
from partition_layer.partition_meta import PartitionMeta, decode_meta
from stream_layer.client import AsyncStream, AsyncStreamClient
from stream_layer.framing import Location

log = logging.getLogger(__name__)

STREAM_KINDS = ("meta", "log", "row", "blob")


def stream_name(partition_id: int, kind: str) -> str:
    return f"partition/{partition_id}/{kind}"


@dataclass
class LoadReport:
    seconds: float = 0.0
    replayed_ops: int = 0
    replayed_bytes: int = 0
    runs: int = 0


async def open_fenced(client: AsyncStreamClient, partition_id: int, epoch: int
                      ) -> dict[str, AsyncStream]:
    """Each of the partition's streams (made if missing), fenced at `epoch`."""
    streams = {}
    for kind in STREAM_KINDS:
        name = stream_name(partition_id, kind)
        try:
            await client.sm.open_stream(name)
        except NotFound:
            try:
                await client.create_stream(name)
            except StampError as exc:  # another loader made it meanwhile: fencing decides
                log.info("partition %d: creating %s: %s", partition_id, name, exc)
        streams[kind] = await client.fence_stream(name, epoch)
    return streams


async def newest_meta(stream: AsyncStream) -> PartitionMeta | None:
    """The newest record of a fenced metadata stream: only its last non-empty extent is
    read."""
    extents = [e for e in (await stream.refresh()).extents if e.sealed_length > 0]
    if not extents:
        return None
    newest: bytes | None = None
    async for _, block in stream.blocks(Location(extents[-1].extent_id, 0, 0)):
        newest = block
    return decode_meta(newest) if newest is not None else None
