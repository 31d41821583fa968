"""The scrub job's work for one extent (§7 "scrub"): have every copy verified where it lies,
compare the replicas (invariant 2), repair a bad copy from a good one, report what was found
and fixed.

- A sealed extent: each replica's node scans it (ScrubExtent: every frame's CRC32C, its
  length, a digest of its frames). `judge_replicas` (pure) decides which copies are good:
  those that verify, are sealed at the recorded length and share the digest of the majority
  of such copies. A bad copy is rebuilt on its node from the good ones by the extent node's
  own sync (delete it, create it empty with the same replica set, seal it at the recorded
  length with the good copies as sources: the copy re-replication makes), then scanned again.
  A crash half way leaves an empty unsealed replica of a sealed extent, which the stream
  manager seals (syncs) at the recorded length when the node next heartbeats.
- An erasure-coded extent: each fragment's node reads and verifies it (VerifyFragment) and
  its CRC32C is compared with the recorded one; a bad fragment is reported to the stream
  manager, which rebuilds it in place from k others (fragment_repair.py), and the job waits
  until it verifies.
- A copy on an unreachable node is neither judged nor touched (re-replication owns dead
  nodes); copies whose digests disagree with no majority are reported, never "repaired".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from common import rpc
from common.errors import ChecksumError, NotFound, StampError
from common.proto import extent_node_pb2 as en_pb
from common.proto import stream_manager_pb2 as sm_pb
from spark.job_context import JobContext
from spark.job_result import DAMAGED, OK, REPAIRED, SKIPPED, ItemResult
from stream_layer.extent_node.scrub import NO_BAD_FRAME
from stream_layer.sm_client import AsyncStreamManagerClient

log = logging.getLogger(__name__)

SEALED, ERASURE_CODED = "sealed", "erasure_coded"
FRAGMENT_POLL_S = 0.2


@dataclass(frozen=True)
class ReplicaReport:
    """One replica as its node scanned it, or why it could not be."""

    node: str
    length: int = 0
    sealed: bool = False
    digest: bytes = b""
    bad_offset: int = NO_BAD_FRAME
    missing: bool = False       # the node answered that it holds no such replica
    unreachable: str = ""       # the node did not answer: not judged
    reason: str = ""


@dataclass(frozen=True)
class Verdict:
    good: tuple[str, ...]
    bad: tuple[tuple[str, str], ...]        # (node, why)
    unjudged: tuple[tuple[str, str], ...]   # (node, why): unreachable, not sealed yet, tie


def judge_replicas(reports: Sequence[ReplicaReport], sealed_length: int) -> Verdict:
    """Which replicas of a sealed extent are good, bad, or cannot be judged (see module)."""
    good: list[str] = []
    bad: list[tuple[str, str]] = []
    unjudged: list[tuple[str, str]] = []
    candidates: list[ReplicaReport] = []
    for r in reports:
        if r.unreachable:
            unjudged.append((r.node, f"unreachable: {r.unreachable}"))
        elif r.missing:
            bad.append((r.node, "replica missing"))
        elif r.bad_offset != NO_BAD_FRAME:
            bad.append((r.node, r.reason or f"bad frame at {r.bad_offset}"))
        elif not r.sealed:
            if r.length > sealed_length:
                bad.append((r.node, f"unsealed at {r.length}, past the sealed length "
                                    f"{sealed_length}"))
            else:
                unjudged.append((r.node, "not sealed here yet"))
        elif r.length != sealed_length:
            bad.append((r.node, f"length {r.length}, sealed length {sealed_length}"))
        else:
            candidates.append(r)
    if candidates:
        votes = Counter(r.digest for r in candidates).most_common()
        top, count = votes[0]
        if len(votes) > 1 and votes[1][1] == count:
            unjudged.extend((r.node, "digests disagree with no majority") for r in candidates)
        else:
            for r in candidates:
                if r.digest == top:
                    good.append(r.node)
                else:
                    bad.append((r.node, "digest differs from the other replicas"))
    return Verdict(tuple(good), tuple(bad), tuple(unjudged))


async def scrub_extent(ctx: JobContext, extent_id: int) -> ItemResult:
    """Verify (and unless dry run, repair) every copy of one extent."""
    info = await ctx.sm.get_extent(extent_id)
    if info.state == SEALED:
        return await _scrub_replicas(ctx, info)
    if info.state == ERASURE_CODED:
        return await _scrub_fragments(ctx, info)
    return ItemResult(extent_id, SKIPPED, detail=f"extent is {info.state}")


async def _report(ctx: JobContext, info: sm_pb.ExtentInfo, node: str,
                  address: str) -> ReplicaReport:
    try:
        found: en_pb.ScrubExtentReply = await ctx.extents.scrub_extent(address,
                                                                       info.extent_id)
    except NotFound:
        return ReplicaReport(node, missing=True)
    except StampError as exc:
        return ReplicaReport(node, unreachable=str(exc))
    return ReplicaReport(node, found.length, found.sealed, found.digest, found.bad_offset,
                         reason=found.reason)


async def _scrub_replicas(ctx: JobContext, info: sm_pb.ExtentInfo) -> ItemResult:
    extent_id = info.extent_id
    address_of = dict(zip(info.replicas, info.addresses, strict=True))
    reports = await asyncio.gather(*(_report(ctx, info, n, a) for n, a in address_of.items()))
    verdict = judge_replicas(reports, info.sealed_length)
    scanned = sum(r.length for r in reports if not (r.unreachable or r.missing))
    notes = [f"{node}: {why}" for node, why in (*verdict.bad, *verdict.unjudged)]
    if not verdict.bad:
        return ItemResult(extent_id, OK, len(reports), scanned, detail="; ".join(notes))
    if ctx.dry_run or not verdict.good:
        why = "dry run" if ctx.dry_run else "no good replica to repair from"
        return ItemResult(extent_id, DAMAGED, len(reports), scanned, len(verdict.bad),
                          detail="; ".join([*notes, why]))
    good_digest = next(r.digest for r in reports if r.node == verdict.good[0])
    sources = [address_of[n] for n in verdict.good]
    fixed = 0
    for node, why in verdict.bad:
        try:
            await _rebuild_replica(ctx, info, address_of[node], sources, good_digest)
            fixed += 1
            log.info("extent %d: replica on %s was bad (%s): rebuilt from %s", extent_id, node,
                     why, ", ".join(verdict.good))
            notes.append(f"{node}: rebuilt")
        except StampError as exc:
            notes.append(f"{node}: repair failed: {exc}")
    status = REPAIRED if fixed == len(verdict.bad) else DAMAGED
    return ItemResult(extent_id, status, len(reports), scanned, len(verdict.bad), fixed,
                      "; ".join(notes))


async def _rebuild_replica(ctx: JobContext, info: sm_pb.ExtentInfo, address: str,
                           sources: list[str], good_digest: bytes) -> None:
    """Replace the replica on `address` with a copy synced from `sources` (see module)."""
    extents = ctx.extents
    with contextlib.suppress(NotFound):
        await extents.delete_extent(address, info.extent_id)
    await extents.create_extent(address, info.extent_id, list(info.addresses))
    await extents.seal(address, info.extent_id, info.sealed_length, sources,
                       timeout_s=ctx.limits.repair_timeout_s)
    again = await extents.scrub_extent(address, info.extent_id)
    if (again.bad_offset, again.length, again.digest) != (NO_BAD_FRAME, info.sealed_length,
                                                          good_digest):
        raise ChecksumError(f"extent {info.extent_id}: the rebuilt replica on {address} does "
                            f"not verify ({again.reason or 'digest differs'})")


async def _verify_fragment(ctx: JobContext, info: sm_pb.ExtentInfo, index: int
                           ) -> tuple[str, int]:
    """('' if fragment `index` verifies with its recorded CRC32C, else why; its length)."""
    address = info.fragment_addresses[index]
    try:
        reply = await rpc.call(ctx.extents.stub(address).VerifyFragment(
            en_pb.FragmentRequest(extent_id=info.extent_id, index=index),
            timeout=ctx.limits.repair_timeout_s))
    except (ChecksumError, NotFound) as exc:
        return f"bad: {exc}", 0
    except StampError as exc:
        return f"unreachable: {exc}", 0
    if reply.crc != info.ec_crcs[index]:
        return f"bad: crc32c {reply.crc:#010x}, recorded {info.ec_crcs[index]:#010x}", 0
    return "", reply.length


async def _scrub_fragments(ctx: JobContext, info: sm_pb.ExtentInfo) -> ItemResult:
    extent_id = info.extent_id
    checks = await asyncio.gather(*(_verify_fragment(ctx, info, i)
                                    for i in range(len(info.fragments))))
    scanned = sum(length for _, length in checks)
    bad = [i for i, (why, _) in enumerate(checks) if why.startswith("bad")]
    notes = [f"fragment {i} on {info.fragments[i]}: {why}" for i, (why, _) in enumerate(checks)
             if why]
    if not bad:
        return ItemResult(extent_id, OK, len(checks), scanned, detail="; ".join(notes))
    if ctx.dry_run:
        return ItemResult(extent_id, DAMAGED, len(checks), scanned, len(bad),
                          detail="; ".join([*notes, "dry run"]))
    fixed = 0
    for index in bad:
        try:
            await ctx.sm.report_fragment(extent_id, index, f"scrub: {checks[index][0]}")
            await _wait_fragment_good(ctx, info, index)
            fixed += 1
            notes.append(f"fragment {index}: rebuilt")
        except StampError as exc:
            notes.append(f"fragment {index}: repair failed: {exc}")
    return ItemResult(extent_id, REPAIRED if fixed == len(bad) else DAMAGED, len(checks),
                      scanned, len(bad), fixed, "; ".join(notes))


async def _wait_fragment_good(ctx: JobContext, info: sm_pb.ExtentInfo, index: int) -> None:
    deadline = time.monotonic() + ctx.limits.fragment_repair_wait_s
    while True:
        why, _ = await _verify_fragment(ctx, info, index)
        if not why:
            return
        if time.monotonic() > deadline:
            raise ChecksumError(f"fragment {index} of extent {info.extent_id} still fails "
                                f"after {ctx.limits.fragment_repair_wait_s} s ({why})")
        await asyncio.sleep(FRAGMENT_POLL_S)



async def list_items(sm: AsyncStreamManagerClient, now: float) -> list[int]:
    """Every sealed or erasure-coded extent (an open one is still being written)."""
    return [e.extent_id for e in await sm.list_extents() if e.state in (SEALED, ERASURE_CODED)]
