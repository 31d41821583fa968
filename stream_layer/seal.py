"""Sealing an extent (§2 "Sealing"): fence every reachable replica and ask its commit length,
seal all of them at the smallest, and return that length.

Why the smallest is safe: the primary acknowledges an append only when every replica has it
durable, so every acknowledged byte lies below every replica's commit length — provided the
length cannot grow after it is read. Hence the fence: a probed replica first stops accepting
appends for good and lets what it accepted become durable, so its answer is final; no append
can be acknowledged past it afterwards (it would need this replica). A replica that is ahead
holds only unacknowledged bytes past the seal, which it truncates; one that is behind (it
missed appends while unreachable) is synced up to the length from a peer.

Why more than one answer: the smallest length among the replicas that answered may hold bytes
no other replica has (a primary journals an append before its secondaries have it). Decided
from one replica alone, the sealed length could be held by that replica only, and its loss
would leave a sealed length no survivor can serve: the stream stuck, acknowledged appends
unreadable. So a seal is decided only when `seal_quorum` replicas answer (two of three): each
of them holds at least the smallest of their lengths, so the sealed length survives the loss
of any one replica. With fewer answers the seal waits (raises Unavailable; callers retry)
rather than guess. A replica already sealed fixes the length on its own: that seal was
decided under the same rule.

Why not wait for every replica: a frozen or slow replica (the usual reason for a seal: it
missed its per-replica timeout) would hold the writers up for the whole probe timeout. So
the stream manager gives a grace: once `seal_quorum` replicas have answered, the rest get
only that much longer. A replica that misses it is a *straggler*: left out of the decision
(the length decided from the others is safe by the rule above: no append was acknowledged
without every replica, and the fenced ones refuse any more), sealed in phase two or when it
comes back. A replica the writer found past its per-replica timeout (the seal's cause) gets
no grace at all once a quorum has answered, and the stream manager keeps new extents off it
for a while (§2: gray failures are sealed away). A replica that merely answers the fence
late is not marked: on a busy machine a healthy one does, and marking it cost placement a
node for nothing.

`decide_seal_length` is the pure decision; `fence_replicas` and `seal_extent` do the RPCs
around it. The stream manager (and tools and tests) drive them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from common.errors import StampError, Unavailable
from stream_layer.extent_client import AsyncExtentClient

log = logging.getLogger(__name__)


# A sealed length must survive the loss of this many replicas (§8 invariant 1: "the loss of
# any one node at any moment").
SEAL_LOSSES_SURVIVED = 1


@dataclass(frozen=True)
class ReplicaLength:
    length: int
    sealed: bool


def seal_quorum(replicas: int) -> int:
    """How many replicas must answer before a seal is decided: enough that the sealed length
    is held by one more replica than the losses it must survive (2 of 3; all of a smaller
    extent, which cannot do better)."""
    return min(replicas, SEAL_LOSSES_SURVIVED + 1)


def decide_seal_length(replies: Mapping[str, ReplicaLength | None]) -> int:
    """The length to seal at, from each replica's reply (None: unreachable).

    A replica already sealed fixes the length (a seal is never redone at another length);
    otherwise the smallest commit length of the replicas that answered, provided at least
    `seal_quorum(len(replies))` did — else Unavailable: wait until enough answer.
    """
    reachable = {a: r for a, r in replies.items() if r is not None}
    sealed = {r.length for r in reachable.values() if r.sealed}
    if len(sealed) > 1:
        raise AssertionError(f"replicas sealed at different lengths: {reachable}")
    if sealed:
        return sealed.pop()
    needed = seal_quorum(len(replies))
    if len(reachable) < needed or not reachable:
        raise Unavailable(f"{len(reachable)} of the {len(replies)} replicas "
                          f"{sorted(replies)} answered; a seal needs {needed}, so that its "
                          f"length survives the loss of any one: cannot seal yet")
    return min(r.length for r in reachable.values())


@dataclass(frozen=True)
class Fenced:
    """Phase one's outcome: the sealed length, the replicas that hold at least that much
    (sources for the others), and the stragglers that did not answer in time."""

    length: int
    sources: list[str]
    stragglers: list[str]


async def fence_replicas(client: AsyncExtentClient, extent_id: int, replicas: Sequence[str],
                         timeout_s: float = 2.0, grace_s: float | None = None,
                         late: Sequence[str] = ()) -> Fenced:
    """Phase one: fence every replica that answers within `timeout_s` — or, with `grace_s`,
    once a quorum has, within `grace_s` more (the stream manager passes its
    `seal_straggler_wait_ms`) — and decide the sealed length. From here on no append can be
    acknowledged on the extent, so the length is final and may be recorded before phase
    two. Raises Unavailable when too few replicas answer; the replicas that did stay fenced,
    so a retry finds the same lengths. `late`: replicas the writer found past their
    per-replica timeout (the seal's cause): asked like the others, but once a quorum has
    answered nobody waits for them, not even the grace — they are stragglers already."""
    async def ask(address: str) -> ReplicaLength | None:
        try:
            length, sealed = await client.commit_length(address, extent_id, timeout_s=timeout_s,
                                                        fence=True)
            return ReplicaLength(length, sealed)
        except StampError as exc:
            log.info("extent %d: replica %s unreachable for seal: %s", extent_id, address, exc)
            return None

    tasks = {address: asyncio.ensure_future(ask(address)) for address in replicas}
    try:
        await _quorum_then_grace(list(tasks.values()), seal_quorum(len(replicas)), grace_s,
                                 [t for a, t in tasks.items() if a not in late])
    finally:
        for task in tasks.values():
            task.cancel()  # a straggler's fence may still land: harmless, it seals later
    replies = {a: task.result() if task.done() and not task.cancelled() else None
               for a, task in tasks.items()}
    stragglers = [a for a, task in tasks.items() if not task.done() or task.cancelled()
                  or task.result() is None]
    length = decide_seal_length(replies)
    if stragglers:
        log.info("extent %d: sealing at %d without %s (no answer in time)", extent_id, length,
                 stragglers)
    # Replicas at or past the length can serve what a shorter one lacks.
    sources = [a for a, r in replies.items() if r is not None and r.length >= length]
    return Fenced(length, sources, stragglers)


async def _quorum_then_grace(tasks: list[asyncio.Future[ReplicaLength | None]], quorum: int,
                             grace_s: float | None,
                             awaited: list[asyncio.Future[ReplicaLength | None]]) -> None:
    """Until every task is done, or `quorum` of them answered and then either every task of
    `awaited` is done or `grace_s` more passed (each task ends by its own timeout, so this
    does too); without `grace_s`, until all are."""
    pending = set(tasks)
    answered = 0
    while pending and (grace_s is None or answered < quorum):
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        answered += sum(1 for task in done if task.result() is not None)
    rest = pending.intersection(awaited)
    if rest:
        await asyncio.wait(rest, timeout=grace_s)


async def fence_extent(client: AsyncExtentClient, extent_id: int, replicas: Sequence[str],
                       timeout_s: float = 2.0, grace_s: float | None = None
                       ) -> tuple[int, list[str]]:
    """`fence_replicas` as (length, sources)."""
    fenced = await fence_replicas(client, extent_id, replicas, timeout_s, grace_s)
    return fenced.length, fenced.sources


async def seal_replicas(client: AsyncExtentClient, extent_id: int, replicas: Sequence[str],
                        length: int, sources: Sequence[str], timeout_s: float = 30.0
                        ) -> list[str]:
    """Phase two: seal each replica at `length` (truncating, or syncing from `sources`).
    Returns the replicas sealed; the others are sealed when they come back."""
    async def seal_one(address: str) -> str | None:
        try:
            await client.seal(address, extent_id, length, sources, timeout_s=timeout_s)
            return address
        except StampError as exc:
            log.warning("extent %d: sealing replica %s failed: %s", extent_id, address, exc)
            return None

    return [a for a in await asyncio.gather(*(seal_one(a) for a in replicas)) if a]


async def seal_extent(client: AsyncExtentClient, extent_id: int, replicas: Sequence[str],
                      timeout_s: float = 2.0) -> tuple[int, list[str]]:
    """Both phases: seal `extent_id` on every reachable replica; return (length, replicas
    sealed). Replicas that do not answer are left for later."""
    length, sources = await fence_extent(client, extent_id, replicas, timeout_s)
    sealed = await seal_replicas(client, extent_id, sources, length, sources)
    if not sealed:
        raise Unavailable(f"extent {extent_id}: no replica accepted the seal at {length}")
    log.info("extent %d sealed at %d on %s", extent_id, length, sealed)
    return length, sealed
