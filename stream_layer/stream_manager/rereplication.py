"""The stream manager leader's copies of sealed extents that lost a replica (§2).

Contracts:
- Only a replica on a node declared dead (after the grace period, liveness.py) is copied; a
  node back before then costs nothing.
- The copy goes to a node in a fault domain not already holding the extent (placement.py),
  fetches the sealed bytes from healthy peers and seals itself at the recorded length; only
  then is it recorded (ReplaceReplica). A crash before the record leaves the old map, and the
  copy reruns.
- Copies draw on the leader's one repair budget (repair_budget.py), shared with fragment
  repair. One copy per extent at a time.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from common.errors import StampError, Unavailable
from stream_layer.extent_client import AsyncExtentClient
from stream_layer.stream_manager import state as s
from stream_layer.stream_manager.placement import Candidate, place_replacement
from stream_layer.stream_manager.repair_budget import RepairBudget
from stream_layer.stream_manager.replica import StreamManagerReplica

log = logging.getLogger(__name__)

COPY_TIMEOUT_S = 600  # fetching a whole sealed extent from its peers


class Rereplication:
    def __init__(self, replica: StreamManagerReplica, extents: AsyncExtentClient,
                 budget: RepairBudget,
                 candidates: Callable[[s.StreamManagerState], list[Candidate]],
                 spawn: Callable[[Coroutine[Any, Any, None]], None]) -> None:
        self.replica = replica
        self.extents = extents
        self.budget = budget
        self._candidates = candidates
        self._spawn = spawn
        self._copying: set[int] = set()

    def under_way(self) -> frozenset[int]:
        """The extents being copied now (their new replicas are not recorded yet)."""
        return frozenset(self._copying)

    def schedule(self, extent: s.Extent) -> None:
        """Copy `extent`'s replicas on dead nodes, in the background, unless under way."""
        if extent.extent_id in self._copying:
            return
        self._copying.add(extent.extent_id)
        self._spawn(self._rereplicate(extent))

    async def _rereplicate(self, extent: s.Extent) -> None:
        try:
            async with self.budget.repair(extent.sealed_length):
                await self._copy_replicas(extent.extent_id)
        except StampError as exc:
            log.warning("re-replicating extent %d failed (will retry): %s", extent.extent_id,
                        exc)
        finally:
            self._copying.discard(extent.extent_id)

    def _plan_copy(self, st: s.StreamManagerState, extent_id: int
                   ) -> tuple[s.Extent, list[str], str | None]:
        """(extent, its replicas on dead nodes, a node to copy one to) as the state is now."""
        extent = st.extent(extent_id)
        dead = [r for r in extent.replicas if st.node(r).state == s.DEAD]
        if extent.state != s.SEALED or not dead or len(dead) == len(extent.replicas):
            return extent, dead, None
        healthy = [r for r in extent.replicas if r not in dead]
        target = place_replacement(self._candidates(st), healthy,
                                   {n.name: n.fault_domain for n in st.nodes.values()},
                                   exclude=extent.replicas)
        return extent, dead, target

    async def _copy_replicas(self, extent_id: int) -> None:
        while True:
            extent, dead, target = self.replica.read(lambda st: self._plan_copy(st, extent_id))
            if target is None:
                if dead and len(dead) == len(extent.replicas):
                    raise Unavailable(f"extent {extent_id}: no healthy replica to copy from")
                return
            healthy = [r for r in extent.replicas if r not in dead]
            replicas = [target if r == dead[0] else r for r in extent.replicas]
            target_address, addresses, sources = self.replica.read(functools.partial(
                _copy_addresses, target=target, replicas=replicas, healthy=healthy))
            await self.extents.create_extent(target_address, extent_id, addresses)
            # The new replica fetches the sealed bytes from healthy peers (SyncReplicate,
            # batched, checksummed) and seals itself at the recorded length.
            await self.extents.seal(target_address, extent_id, extent.sealed_length, sources,
                                    timeout_s=COPY_TIMEOUT_S)
            await self.replica.propose(s.ReplaceReplica(extent_id, dead[0], target))
            log.info("extent %d: replica on dead %s copied to %s (%d bytes)", extent_id,
                     dead[0], target, extent.sealed_length)


def _copy_addresses(st: s.StreamManagerState, target: str, replicas: list[str],
                    healthy: list[str]) -> tuple[str, list[str], list[str]]:
    """(the new replica's address, the new replica set's, the copy sources')."""
    return (st.node(target).address, [st.node(r).address for r in replicas],
            [st.node(r).address for r in healthy])
