"""The gc job's first stage (§7 "gc", issue 18): every range partition lets go of the extents
of its streams it no longer needs — the commit log below its replay point, runs a merge
replaced, blob values of trimmed or deleted rows — through its partition server's
ReleaseExtents RPC (partition_layer/extent_release.py says why the owner decides), one
partition per item, spread over Spark tasks. An extent no stream holds afterwards is an
orphan for the second stage (spark/gc.py), which deletes it after the grace period.

Listing (driver side): each partition server's Status names the partitions it serves. A
server that does not answer is passed over (its partitions are released by a later run); a
partition that moved between the listing and its task is skipped the same way (NotOwner).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from common import rpc
from common.errors import NotOwner, StampError
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from spark.job_context import JobContext
from spark.job_result import DONE, OK, SKIPPED, WOULD, ItemResult

log = logging.getLogger(__name__)

KIND_PARTITION = "partition"
STATUS_TIMEOUT_S = 10.0
RELEASE_TIMEOUT_S = 300.0  # reads every run index and live row of one partition
MESSAGE_BYTES_MAX = 16 * 1024 * 1024

# (partition id, its partition server's address)
ReleaseItem = tuple[int, str]


async def list_partitions(addresses: Sequence[str]) -> list[ReleaseItem]:
    """The partitions each partition server serves now."""
    channels = rpc.ChannelCache(MESSAGE_BYTES_MAX)
    items: list[ReleaseItem] = []
    try:
        for address in addresses:
            stub = pb_grpc.PartitionServerStub(channels.get(address))
            try:
                status = await rpc.call(stub.Status(pb.ServerStatusRequest(),
                                                    timeout=STATUS_TIMEOUT_S))
            except StampError as exc:
                log.warning("gc: the partition server at %s did not answer (%s): its "
                            "partitions are released by a later run", address, exc)
                continue
            items += [(p.partition_id, address) for p in status.partitions
                      if p.state == "serving"]
    finally:
        await channels.close()
    return sorted(items)


async def release_partition(ctx: JobContext, item: ReleaseItem) -> ItemResult:
    """Have one partition drop the extents it no longer needs (a dry run: say which)."""
    partition_id, address = item
    channels = rpc.ChannelCache(MESSAGE_BYTES_MAX)
    try:
        stub = pb_grpc.PartitionServerStub(channels.get(address))
        reply = await rpc.call(stub.ReleaseExtents(
            pb.ReleaseExtentsRequest(partition_id=partition_id, dry_run=ctx.dry_run),
            timeout=RELEASE_TIMEOUT_S))
    except NotOwner as exc:
        return ItemResult(partition_id, SKIPPED, kind=KIND_PARTITION,
                          detail=f"moved since the listing: {exc}")
    finally:
        await channels.close()
    if reply.skipped:
        return ItemResult(partition_id, SKIPPED, kind=KIND_PARTITION, detail=reply.skipped)
    released = sum(len(s.dropped) for s in reply.streams)
    released_bytes = sum(s.dropped_bytes for s in reply.streams)
    unreferenced = sum(len(s.unreferenced) for s in reply.streams)
    parts = ", ".join(f"{s.kind} {list(s.dropped)}" for s in reply.streams)
    if not released:
        return ItemResult(partition_id, OK, kind=KIND_PARTITION, detail="needs all its extents")
    if ctx.dry_run:
        return ItemResult(partition_id, WOULD, kind=KIND_PARTITION, released=released,
                          released_bytes=released_bytes, detail=f"would release {parts}")
    return ItemResult(partition_id, DONE, kind=KIND_PARTITION, released=released,
                      released_bytes=released_bytes,
                      detail=f"released {parts}; {unreferenced} now held by no stream")
