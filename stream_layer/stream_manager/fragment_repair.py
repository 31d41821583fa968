"""The stream manager leader's repair of erasure-coded extents (§2): lost fragments are
rebuilt, like lost replicas are copied.

Contracts:
- A fragment on a node declared dead (after the same grace period as replicas, liveness.py) is
  rebuilt from any k others, written to a node holding none of the extent's fragments (in the
  fault domain with the fewest), verified as stored, and only then recorded
  (ReplaceFragment): a crash before the record leaves the old map, and the repair reruns.
- A fragment a reader reports missing or corrupt is first verified on its node; if it really
  is bad, it is rebuilt in place (the node replaces the file atomically) — the map does not
  change, so nothing is recorded.
- Repairs draw on the leader's one repair budget (repair_budget.py), shared with
  re-replication: at most `rereplication_copies_max` repairs of either kind at once,
  `rereplication_bytes_per_s` on average. One repair per extent at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from common.errors import ChecksumError, NotFound, StampError
from stream_layer.ec.layout import FragmentLayout
from stream_layer.ec.reader import CodedExtent, rebuild_fragments
from stream_layer.extent_client import AsyncExtentClient
from stream_layer.stream_manager import state as s
from stream_layer.stream_manager.placement import Candidate, place_fragment_replacement
from stream_layer.stream_manager.repair_budget import RepairBudget
from stream_layer.stream_manager.replica import StreamManagerReplica

log = logging.getLogger(__name__)


def coded_extent(st: s.StreamManagerState, extent: s.Extent) -> CodedExtent:
    return CodedExtent(extent.extent_id, FragmentLayout(extent.ec_k, extent.ec_m,
                                                        extent.ec_cuts),
                       tuple(st.node(f).address for f in extent.fragments), extent.ec_crcs)


class FragmentRepair:
    def __init__(self, replica: StreamManagerReplica, extents: AsyncExtentClient,
                 budget: RepairBudget,
                 candidates: Callable[[s.StreamManagerState], list[Candidate]],
                 spawn: Callable[[Coroutine[Any, Any, None]], None]) -> None:
        self.replica = replica
        self.extents = extents
        self.budget = budget
        self._candidates = candidates
        self._spawn = spawn
        self._repairing: set[int] = set()

    def under_way(self) -> frozenset[int]:
        """The extents whose fragments are being rebuilt now (not recorded yet)."""
        return frozenset(self._repairing)

    def schedule(self, extent_id: int, suspect: int | None = None) -> None:
        """Repair `extent_id` in the background (its dead nodes' fragments, and `suspect`)."""
        if extent_id in self._repairing:
            return
        self._repairing.add(extent_id)
        self._spawn(self._repair(extent_id, suspect))

    def report(self, extent_id: int, index: int, reason: str) -> None:
        """A reader found fragment `index` missing or corrupt."""
        log.warning("extent %d: fragment %d reported bad (%s)", extent_id, index, reason)
        extent = self.replica.read(lambda st: st.extent(extent_id))
        if extent.state != s.ERASURE_CODED or not 0 <= index < len(extent.fragments):
            raise NotFound(f"extent {extent_id} has no fragment {index}")
        self.schedule(extent_id, index)

    async def _repair(self, extent_id: int, suspect: int | None) -> None:
        try:
            extent = self.replica.read(lambda st: st.extent(extent_id))
            fragment_bytes = FragmentLayout(extent.ec_k, extent.ec_m,
                                            extent.ec_cuts).fragment_bytes
            # A rebuild reads k fragments: that is the traffic it costs.
            async with self.budget.repair(fragment_bytes * extent.ec_k):
                await self._rebuild(extent_id, suspect)
        except StampError as exc:
            log.warning("repairing extent %d failed (will retry if still needed): %s",
                        extent_id, exc)
        finally:
            self._repairing.discard(extent_id)

    async def _rebuild(self, extent_id: int, suspect: int | None) -> None:
        extents = self.extents
        extent, coded, dead = self.replica.read(lambda st: (
            st.extent(extent_id), coded_extent(st, st.extent(extent_id)),
            {i for i, f in enumerate(st.extent(extent_id).fragments)
             if st.node(f).state == s.DEAD}))
        if extent.state != s.ERASURE_CODED:
            return
        in_place: set[int] = set()
        if suspect is not None and suspect not in dead:
            try:
                crc = await extents.verify_fragment(coded.addresses[suspect], extent_id, suspect)
                if crc != coded.crcs[suspect]:
                    raise ChecksumError(f"fragment {suspect} has crc32c {crc:#010x}")
            except (ChecksumError, NotFound) as exc:
                log.warning("extent %d: fragment %d on %s is bad (%s): rebuilding it in place",
                            extent_id, suspect, extent.fragments[suspect], exc)
                in_place.add(suspect)
        if not dead and not in_place:
            return
        rebuilt = await rebuild_fragments(extents, coded, dead | in_place)
        for index in sorted(in_place):
            await self._store(coded, index, rebuilt[index], coded.addresses[index])
            log.info("extent %d: fragment %d rebuilt in place on %s", extent_id, index,
                     extent.fragments[index])
        keep = [f for i, f in enumerate(extent.fragments) if i not in dead]
        for index in sorted(dead):
            target, address = self.replica.read(lambda st, keep=keep: self._place(st,
                                                                                          keep))
            await self._store(coded, index, rebuilt[index], address)
            await self.replica.propose(s.ReplaceFragment(
                extent_id, index, extent.fragments[index], target))
            keep.append(target)
            log.info("extent %d: fragment %d of dead %s rebuilt on %s", extent_id, index,
                     extent.fragments[index], target)

    def _place(self, st: s.StreamManagerState, keep: list[str]) -> tuple[str, str]:
        target = place_fragment_replacement(
            self._candidates(st), keep, {n.name: n.fault_domain for n in st.nodes.values()})
        return target, st.node(target).address

    async def _store(self, coded: CodedExtent, index: int, fragment: bytes,
                     address: str) -> None:
        extents = self.extents
        crc = await extents.write_fragment(address, coded.extent_id, index, fragment)
        stored = await extents.verify_fragment(address, coded.extent_id, index)
        if stored != crc or crc != coded.crcs[index]:
            raise ChecksumError(f"extent {coded.extent_id}: fragment {index} on {address} "
                                f"does not read back as rebuilt")
