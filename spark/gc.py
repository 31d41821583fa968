"""The gc job (§7 "gc"): extents no stream holds, and copies on extent nodes the stream
manager does not count on, deleted by mark then sweep after a grace period (the decisions:
gc_plan.py).

Listing (driver side, metadata only): every live extent node's replicas and fragments, the
stream manager's extents with the ids its leader holds outside its state (one moment), and
the marks of earlier runs (lock service key `jobs/gc/marks`). The run writes the new marks
(a dry run writes nothing) and spreads the sweep over Spark tasks, one item per copy or
extent. Each task checks again before it deletes: a copy the stream manager counts on by then
is left alone; an unreferenced extent is deleted by the stream manager first, which refuses
if a stream holds it by then (atomically, in its state machine), and only then are its copies
removed. A run killed half way, or a node SIGKILLed mid-sweep, leaves marks and copies that
the next run sweeps."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from common import faults
from common.errors import NotFound, PreconditionFailed, StampError, Unavailable
from spark.gc_plan import DELETED, REPLICA, Holding, Known, candidates, plan_sweep
from spark.job_context import JobContext
from spark.job_result import DONE, SKIPPED, WOULD, ItemResult
from stream_layer.sm_client import AsyncStreamManagerClient

log = logging.getLogger(__name__)

MARKS_KEY = "jobs/gc/marks"
WRITE_ATTEMPTS_MAX = 8
KIND_EXTENT, KIND_REPLICA, KIND_FRAGMENT = "extent", "replica", "fragment"

# (extent id, kind, node, address, fragment index or REPLICA)
GcItem = tuple[int, str, str, str, int]


async def list_items(sm: AsyncStreamManagerClient, now: float, extents: Any,
                     locks: Any, grace_s: float, marks_max: int, dry_run: bool
                     ) -> list[GcItem]:
    """What this run sweeps (see the module); writes the new marks unless `dry_run`."""
    # Every registered node, dead ones too: one the stream manager declared dead may be
    # back before it hears of it; one that does not answer keeps its marks as they are.
    nodes = await sm.list_nodes()
    holdings: list[Holding] = []
    silent: set[str] = set()
    address_of = {n.name: n.address for n in nodes}
    for node in nodes:
        try:
            replicas = await extents.list_extents(node.address)
            fragments = await extents.list_fragments(node.address)
        except StampError as exc:
            log.warning("gc: %s did not list its extents (%s): its copies wait", node.name,
                        exc)
            silent.add(node.name)
            continue
        holdings += [Holding(node.name, e.extent_id) for e in replicas]
        holdings += [Holding(node.name, e, i) for e, i in fragments]
    # After the nodes: a copy created meanwhile is either in the listing or seen next run.
    infos, busy = await sm.list_extents_and_busy()
    known = {e.extent_id: Known(e.extent_id, e.state, tuple(e.replicas), tuple(e.fragments),
                                tuple(e.streams)) for e in infos}
    found = candidates(holdings, known, busy)
    marks, version = _read_marks(locks)
    sweep, new_marks = plan_sweep(marks, found, now, grace_s, silent, marks_max)
    if not dry_run:
        _write_marks(locks, new_marks, version)
    items: list[GcItem] = []
    for key in sweep:
        kind, *rest = key.split(":")
        if kind == KIND_EXTENT:
            items.append((int(rest[0]), KIND_EXTENT, "", "", REPLICA))
        else:
            index = REPLICA if kind == KIND_REPLICA else int(kind[len(KIND_FRAGMENT):])
            node, extent_id = rest[0], int(rest[1])
            items.append((extent_id, KIND_REPLICA if index == REPLICA else KIND_FRAGMENT,
                          node, address_of[node], index))
    return items


def pending(locks: Any, grace_s: float) -> dict[str, float]:
    """The copies marked and not swept (read after a run): how many, the grace period, and
    the wall-clock times (seconds since the epoch) from which a later run may sweep the
    first and the last of them. A copy used again meanwhile loses its mark instead."""
    marks, _ = _read_marks(locks)
    if not marks:
        return {"copies": 0, "grace_s": grace_s}
    return {"copies": len(marks), "grace_s": grace_s,
            "reclaim_from": min(marks.values()) + grace_s,
            "reclaim_by": max(marks.values()) + grace_s}


def _read_marks(locks: Any) -> tuple[dict[str, float], int]:
    found = locks.get(MARKS_KEY)
    return ({}, 0) if found is None else (json.loads(found[0]), found[1])


def _write_marks(locks: Any, marks: dict[str, float], version: int) -> None:
    if locks.compare_and_set(MARKS_KEY, version, json.dumps(marks).encode()) is None:
        raise Unavailable("the gc marks changed during this run: is another gc running?")


async def gc_extent(ctx: JobContext, item: GcItem) -> ItemResult:
    """Sweep one item: an unreferenced extent (through the stream manager) or one copy."""
    extent_id, kind, node, address, index = item
    if kind == KIND_EXTENT:
        return await _delete_extent(ctx, extent_id)
    try:
        info = await ctx.sm.get_extent(extent_id)
    except NotFound:
        info = None
    if info is not None and info.state != DELETED and (
            node in info.replicas if index == REPLICA
            else index < len(info.fragments) and info.fragments[index] == node):
        return ItemResult(extent_id, SKIPPED, detail=f"{kind} on {node} is in use again")
    what = f"{kind}{'' if index == REPLICA else f' {index}'} on {node}"
    if ctx.dry_run:
        return ItemResult(extent_id, WOULD, 1, detail=f"would delete the {what}")
    nbytes = await _delete_copy(ctx, address, extent_id, index)
    return ItemResult(extent_id, DONE, 1, nbytes, detail=f"deleted the {what}")


async def _delete_copy(ctx: JobContext, address: str, extent_id: int, index: int) -> int:
    """Delete one replica or fragment; the bytes it held (0 if it was gone already)."""
    await faults.apoint("gc.before_delete_copy")
    try:
        if index == REPLICA:
            length, _ = await ctx.extents.commit_length(address, extent_id)
            await ctx.extents.delete_extent(address, extent_id)
            return length
        await ctx.extents.delete_fragment(address, extent_id, index)
        return 0
    except NotFound:
        return 0


async def _delete_extent(ctx: JobContext, extent_id: int) -> ItemResult:
    if ctx.dry_run:
        return ItemResult(extent_id, WOULD, detail="would delete the extent (no stream)")
    try:
        info = await ctx.sm.delete_extent(extent_id)
    except PreconditionFailed as exc:  # a stream holds it now
        return ItemResult(extent_id, SKIPPED, detail=str(exc))
    # Copies a node fails to delete now (it is down) are swept by a later run at once:
    # their extent is deleted.
    copies = [(a, REPLICA) for a in info.addresses] + list(
        (a, i) for i, a in enumerate(info.fragment_addresses))
    freed = await asyncio.gather(*(_delete_copy(ctx, a, extent_id, i) for a, i in copies),
                                 return_exceptions=True)
    for outcome in freed:
        if isinstance(outcome, BaseException) and not isinstance(outcome, StampError):
            raise outcome
    reclaimed = sum(n for n in freed if isinstance(n, int))
    return ItemResult(extent_id, DONE, len(info.addresses) + len(info.fragment_addresses),
                      reclaimed, detail="extent deleted (no stream held it)")
