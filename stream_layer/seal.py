"""Sealing an extent (§2 "Sealing"): fence every reachable replica and ask its commit length,
seal all of them at the smallest, and return that length.

Why the smallest is safe: the primary acknowledges an append only when every replica has it
durable, so every acknowledged byte lies below every replica's commit length — provided the
length cannot grow after it is read. Hence the fence: a probed replica first stops accepting
appends for good and lets what it accepted become durable, so its answer is final; no append
can be acknowledged past it afterwards (it would need this replica). A replica that is ahead
holds only unacknowledged bytes past the seal, which it truncates; one that is behind (it
missed appends while unreachable) is synced up to the length from a peer.

`decide_seal_length` is the pure decision; `seal_extent` does the RPCs around it. The stream
manager (and, until it exists, tools and tests) drive it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from common.errors import StampError, Unavailable
from stream_layer.extent_client import AsyncExtentClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplicaLength:
    length: int
    sealed: bool


def decide_seal_length(replies: Mapping[str, ReplicaLength | None]) -> int:
    """The length to seal at, from each replica's reply (None: unreachable).

    A replica already sealed fixes the length (a seal is never redone at another length);
    otherwise the smallest commit length of the reachable replicas.
    """
    reachable = {a: r for a, r in replies.items() if r is not None}
    if not reachable:
        raise Unavailable(f"no replica of {sorted(replies)} is reachable: cannot seal")
    sealed = {r.length for r in reachable.values() if r.sealed}
    if len(sealed) > 1:
        raise AssertionError(f"replicas sealed at different lengths: {reachable}")
    if sealed:
        return sealed.pop()
    return min(r.length for r in reachable.values())


async def fence_extent(client: AsyncExtentClient, extent_id: int, replicas: Sequence[str],
                       timeout_s: float = 2.0) -> tuple[int, list[str]]:
    """Phase one: fence every reachable replica and decide the sealed length. Returns (length,
    sources): the replicas that hold at least that much. From here on no append can be
    acknowledged on the extent, so the length is final and may be recorded before phase two.
    """
    async def ask(address: str) -> ReplicaLength | None:
        try:
            length, sealed = await client.commit_length(address, extent_id, timeout_s=timeout_s,
                                                        fence=True)
            return ReplicaLength(length, sealed)
        except StampError as exc:
            log.info("extent %d: replica %s unreachable for seal: %s", extent_id, address, exc)
            return None

    replies = dict(zip(replicas, await asyncio.gather(*(ask(a) for a in replicas)),
                       strict=True))
    length = decide_seal_length(replies)
    # Replicas at or past the length can serve what a shorter one lacks.
    return length, [a for a, r in replies.items() if r is not None and r.length >= length]


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
