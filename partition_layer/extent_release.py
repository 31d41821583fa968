"""A range partition lets go of the extents of its streams it no longer needs (issue 18, gc):
it works out which (extent_needs.py) and has the stream manager drop the others from its
streams (DropExtents); the gc job's orphan sweep deletes an extent once no stream holds it,
after its grace period (spark/gc_plan.py).

Why the partition server decides and asks the stream manager itself (the PS's
ReleaseExtents RPC, which the gc job's Spark tasks call, one partition each), rather than the
job computing it from the outside: only the owner knows its writes in flight (a run being
written, a value in blob data whose operation has not committed: `WritePins`), can keep a
split or merge from starting meanwhile (the caller holds SplitMerge.paused), and holds the
epoch that fences it — the stream manager refuses the drop of a deposed owner (Fenced), so a
stale owner that still believes it serves decides nothing.

Contracts (§8; what a reload of the partition may read is never dropped):
- Decided from durable state only: the metadata record in force (`meta`: its replay point
  and runs — a record being appended is newer, with a later replay point and only runs that
  were pinned while written), rows that are committed (the memtables hold nothing else).
  The metadata stream is never touched.
- The streams are listed (stream manager) after the pins are watched and before the rows are
  looked at: a write that began before the listing is pinned; one that begins after lands
  at or after the stream's last extent of the listing, which is never dropped.
- Each stream is one DropExtents (atomic, through Raft). A SIGKILL between two leaves some
  streams done and the others as they were: both are states a reload handles, and the next
  run does the rest. A resent drop skips the extents gone already.
- Stale requests are safe at the stream manager too: only extents still in the stream are
  dropped, never its last or an open one.
- A reader that took its snapshot before a row was deleted or trimmed (a scan stream) still
  reads its value: this server's stream client keeps a dropped extent's location, and the
  sweep deletes the extent only a grace period (jobs.gc_grace_s) after it saw it unheld.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from common import faults
from common.errors import NotOwner
from common.proto import partition_pb2 as pb
from common.proto import stream_manager_pb2 as sm_pb
from partition_layer import extent_needs
from partition_layer.extent_needs import Listed
from partition_layer.merge import aiter_sync
from partition_layer.partition_streams import stream_name

if TYPE_CHECKING:
    from partition_layer.partition import RangePartition

log = logging.getLogger(__name__)

RELEASED_KINDS = ("log", "row", "blob")  # never "meta": a reload reads its newest record


@dataclass
class StreamRelease:
    """One stream's outcome: the extents dropped (or that would be, in a dry run), their
    bytes (one replica's), and those no stream holds any more (the orphan sweep's now)."""

    kind: str
    stream: str
    dropped: list[int] = field(default_factory=list)
    dropped_bytes: int = 0
    unreferenced: list[int] = field(default_factory=list)
    unreferenced_bytes: int = 0


@dataclass
class ReleaseReport:
    partition_id: int
    dry_run: bool
    streams: list[StreamRelease] = field(default_factory=list)
    skipped: str = ""  # why nothing was decided (the partition is not serving, ...)

    @property
    def dropped(self) -> int:
        return sum(len(s.dropped) for s in self.streams)

    @property
    def dropped_bytes(self) -> int:
        return sum(s.dropped_bytes for s in self.streams)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def release_extents(request: pb.ReleaseExtentsRequest, server_name: str,
                          partitions: Mapping[int, RangePartition],
                          no_split_merge: Callable[[], AbstractAsyncContextManager[None]]
                          ) -> pb.ReleaseExtentsReply:
    """The PS's ReleaseExtents RPC: `release_unneeded` of a partition served here (one of
    `partitions`), holding `no_split_merge()` (split_merge.SplitMerge.paused: no split or
    merge here meanwhile); NotOwner when it is not served here. What it needs of its
    server is passed in: this module does not import the server, which imports it."""
    async with no_split_merge():
        partition = partitions.get(request.partition_id)
        if partition is None:
            raise NotOwner(f"{server_name} does not serve partition {request.partition_id}")
        report = await release_unneeded(partition, request.dry_run)
    return pb.ReleaseExtentsReply(partition_id=report.partition_id, skipped=report.skipped,
                                  streams=[pb.StreamRelease(**asdict(s))
                                           for s in report.streams])


def _listed(info: sm_pb.StreamInfo) -> list[Listed]:
    return [Listed(e.extent_id, e.state != "open", e.sealed_length) for e in info.extents]


async def release_unneeded(p: RangePartition, dry_run: bool = False) -> ReleaseReport:
    """Drop from `p`'s log, row and blob streams the extents it no longer needs (see the
    module). The caller keeps splits and merges of `p` from starting meanwhile."""
    report = ReleaseReport(p.id, dry_run)
    started = time.monotonic()
    why = _not_now(p)
    if why:
        report.skipped = why
        return report
    assert p.indexes is not None
    with p.blob_pins.watch() as blob_pinned, p.checkpointer.row_pins.watch() as row_pinned:
        names = {kind: stream_name(p.id, kind) for kind in RELEASED_KINDS}
        infos = await asyncio.gather(*(p.client.sm.open_stream(names[k])
                                       for k in RELEASED_KINDS))
        listed = {k: _listed(info) for k, info in zip(RELEASED_KINDS, infos, strict=True)}
        # One moment, no await: the record in force and every source of committed rows.
        meta, readers = p.meta, list(p.readers)
        assert meta is not None
        low, high = p.range.low, p.range.high
        tables = [list(t.items(low, high)) for t in (p.memtable, p.frozen) if t is not None]
        # Blob references of the live rows (reads run indexes and data blocks: awaits).
        live = await extent_needs.live_blob_extents(
            [aiter_sync(rows) for rows in tables] + [r.scan(low, high) for r in readers])
        runs: set[int] = set()
        for run in readers:
            index = (await p.indexes.reader(run.info)).index
            runs |= extent_needs.run_extents(run.info, index.locations)
        decided = {
            "log": extent_needs.log_unneeded(listed["log"], meta.replay_from, meta.geo),
            "row": extent_needs.data_unneeded(listed["row"], runs, row_pinned),
            "blob": extent_needs.data_unneeded(listed["blob"], live, blob_pinned),
        }
        why = _not_now(p)
        if why:  # stopped meanwhile (lease lost, split): decide nothing
            report.skipped = why
            return report
        for kind in RELEASED_KINDS:
            if decided[kind]:
                report.streams.append(await _drop(p, kind, names[kind], decided[kind],
                                                  listed[kind], dry_run))
                await faults.apoint("ps.release.after_drop")  # a SIGKILL between streams
    log.info("partition %d: %s %d extents (%d bytes) no longer needed in %.3f s: %s", p.id,
             "would release" if dry_run else "released", report.dropped,
             report.dropped_bytes, time.monotonic() - started,
             {s.kind: s.dropped for s in report.streams})
    return report


async def _drop(p: RangePartition, kind: str, name: str, extents: list[int],
                listed: list[Listed], dry_run: bool) -> StreamRelease:
    sizes = {e.extent_id: e.nbytes for e in listed}
    if dry_run:
        return StreamRelease(kind, name, extents, sum(sizes[e] for e in extents))
    reply = await p.client.sm.drop_extents(name, extents, p.epoch)
    return StreamRelease(kind, name, list(reply.dropped),
                         sum(sizes.get(e, 0) for e in reply.dropped),
                         list(reply.unreferenced), reply.unreferenced_bytes)


def _not_now(p: RangePartition) -> str:
    from partition_layer.partition import SERVING

    if p.state != SERVING:
        return f"partition {p.id} is {p.state}"
    if not p.lease_valid():
        return f"partition {p.id}: the lease ran out"
    if p.meta is None or p.meta.intents:
        return f"partition {p.id} has an outstanding split or merge intent"
    return ""
