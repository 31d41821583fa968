"""A range partition's four streams on the stream layer (§4 "A range partition's streams",
"Partition load"): their names, opening them fenced at a load, and reading the newest
metadata record.

Contract: `open_fenced` returns only once every stream is fenced with the loader's epoch, so
any older owner's append fails from then on (§8 invariant 3); after it every extent of those
streams is sealed, which is why `newest_meta` may take sealed lengths as the true ends. It
makes missing streams only when told to (a partition of the bootstrap map): a split or merge
child whose streams are missing is refused with nothing made — an empty partition must never
be served in place of one whose split has not happened (issue 17).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from common.errors import NotFound, PreconditionFailed, StampError
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


async def open_fenced(client: AsyncStreamClient, partition_id: int, epoch: int,
                      create_if_missing: bool = False) -> dict[str, AsyncStream]:
    """Each of the partition's streams, fenced at `epoch`. Missing ones are made only with
    `create_if_missing`; else PreconditionFailed, before anything is fenced or made."""
    async def exists(kind: str) -> bool:
        try:
            await client.sm.open_stream(stream_name(partition_id, kind))
        except NotFound:
            return False
        return True

    found = await asyncio.gather(*(exists(kind) for kind in STREAM_KINDS))
    missing = [kind for kind, there in zip(STREAM_KINDS, found, strict=True) if not there]
    if missing and not create_if_missing:
        raise PreconditionFailed(f"partition {partition_id} has no {'/'.join(missing)} "
                                 "stream and may not make one (it is not a partition of the "
                                 "bootstrap map: split or merged away, or not made yet)")
    for kind in missing:
        name = stream_name(partition_id, kind)
        try:
            await client.create_stream(name)
        except StampError as exc:  # another loader made it meanwhile: fencing decides
            log.info("partition %d: creating %s: %s", partition_id, name, exc)
    fenced = await asyncio.gather(*(client.fence_stream(stream_name(partition_id, kind), epoch)
                                    for kind in STREAM_KINDS))
    return dict(zip(STREAM_KINDS, fenced, strict=True))


async def streams_exist(client: AsyncStreamClient, partition_id: int) -> bool:
    """Whether the partition's metadata stream exists (split and merge make a child's
    streams all at once, in one multi-modify: its metadata stream stands for all four)."""
    try:
        await client.sm.open_stream(stream_name(partition_id, "meta"))
    except NotFound:
        return False
    return True


async def seal_all(client: AsyncStreamClient, partition_id: int, epoch: int
                   ) -> dict[str, list[int]]:
    """Seal the last extent of each of the partition's streams (fencing again at the
    owner's own epoch, which is accepted) and list their extents: after this, they are
    exactly what a split or merge hands on."""
    async def seal(kind: str) -> list[int]:
        # The stream as the stream manager holds it after the fence and the seal: no need
        # to ask again (a split waits for this step with its range unavailable).
        stream = await client.fence_stream(stream_name(partition_id, kind), epoch)
        assert all(e.state != "open" for e in stream.extents), (stream.name, stream.extents)
        return [e.extent_id for e in stream.extents]

    sealed = await asyncio.gather(*(seal(kind) for kind in STREAM_KINDS))
    return dict(zip(STREAM_KINDS, sealed, strict=True))


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
