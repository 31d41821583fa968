"""What the stream manager leader does besides committing commands (§2): it places new extents
and creates their replicas on extent nodes before the change commits, runs the seal protocol,
watches extent node heartbeats, and re-replicates the sealed extents of dead nodes.

Contracts:
- A new extent is in the replicated state only after its three replicas exist on their nodes
  (a reader that finds an extent can reach it). A create that fails picks other nodes.
- A stream's rollover (seal its open last extent, add a new one) is one Raft entry, and one at
  a time per stream on this leader; `expect_last` in the command fences a racing leader.
- Liveness is soft state here: a node unheard for `suspect_after` gets no new extents; unheard
  for `dead_after` it is declared dead (a command), its open extents are sealed and their
  streams continue on new extents, and its sealed extents are copied to a node in a fault
  domain not already holding them — at most `rereplication_copies_max` at a time, paced to
  `rereplication_bytes_per_s`. A node back before `dead_after` costs no copy.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from common.config import StreamManagerLimits
from common.errors import NotFound, PreconditionFailed, StampError, Unavailable
from stream_layer.extent_client import AsyncExtentClient
from stream_layer.seal import seal_extent
from stream_layer.stream_manager import state as s
from stream_layer.stream_manager.placement import Candidate, place_extent, place_replacement
from stream_layer.stream_manager.replica import StreamManagerReplica

log = logging.getLogger(__name__)

CREATE_ATTEMPTS_MAX = 3


class StreamManagerLeader:
    def __init__(self, replica: StreamManagerReplica, limits: StreamManagerLimits,
                 extents: AsyncExtentClient) -> None:
        self.replica = replica
        self.limits = limits
        self.extents = extents
        self._ids: list[int] = []
        self._ids_term = -1
        self._stream_locks: dict[str, asyncio.Lock] = {}
        self._last_heard: dict[str, float] = {}
        self._usage: dict[str, tuple[int, int]] = {}  # node -> (used bytes, extents)
        self._leader_since: float | None = None
        self._placed: dict[str, int] = {}  # placed, not yet committed, per node
        self._copying: set[int] = set()
        self._copy_slots = asyncio.Semaphore(limits.rereplication_copies_max)
        self._copy_paced_until = 0.0
        self._tasks: set[asyncio.Task[None]] = set()

    # ---- leadership -----------------------------------------------------------------------

    def is_leader(self) -> bool:
        leader = self.replica.is_leader()
        if leader and self._leader_since is None:
            # A new leader hears nobody yet: every node gets a full grace period from now.
            self._leader_since = time.monotonic()
            self._last_heard.clear()
        elif not leader:
            self._leader_since = None
        return leader

    def term(self) -> int:
        return int(self.replica.raft_status()["term"])

    # ---- heartbeats -----------------------------------------------------------------------

    async def heartbeat(self, name: str, address: str, fault_domain: str, upgrade_domain: str,
                        capacity_bytes: int, used_bytes: int, extents: int) -> None:
        self._last_heard[name] = time.monotonic()
        self._usage[name] = (used_bytes, extents)
        known = self.replica.read(lambda st: st.nodes.get(name))
        if known is None or (known.address, known.fault_domain, known.upgrade_domain) != (
                address, fault_domain, upgrade_domain):
            await self.replica.propose(s.RegisterNode(name, address, fault_domain,
                                                      upgrade_domain, capacity_bytes))
            log.info("registered extent node %s at %s (%s)", name, address, fault_domain)
        elif known.state == s.DEAD:
            await self.replica.propose(s.NodeAlive(name))
            log.info("extent node %s is back", name)

    def silent_s(self, name: str) -> float:
        start = self._leader_since if self._leader_since is not None else time.monotonic()
        return time.monotonic() - self._last_heard.get(name, start)

    def suspect(self, name: str) -> bool:
        return self.silent_s(name) * 1000 > self.limits.suspect_after_ms

    def usage(self, name: str) -> tuple[int, int]:
        return self._usage.get(name, (0, 0))

    # ---- placement and creation -----------------------------------------------------------

    def _candidates(self, st: s.StreamManagerState, exclude: Iterable[str] = ()) -> list[Candidate]:
        load: dict[str, int] = dict(self._placed)
        for extent in st.extents.values():
            if extent.state in (s.OPEN, s.SEALED):
                for name in extent.replicas:
                    load[name] = load.get(name, 0) + 1
        excluded = set(exclude)
        return [Candidate(n.name, n.fault_domain, load.get(n.name, 0))
                for n in st.nodes.values()
                if n.state == s.ALIVE and n.name not in excluded and not self.suspect(n.name)]

    async def _next_extent_id(self) -> int:
        term = self.term()
        if term != self._ids_term:
            self._ids, self._ids_term = [], term  # ids reserved under another term: dropped
        if not self._ids:
            first, end = await self.replica.propose(
                s.ReserveExtentIds(self.limits.extent_ids_reserved))
            self._ids = list(range(end - 1, first - 1, -1))
        return self._ids.pop()

    async def create_extent(self) -> tuple[int, tuple[str, ...]]:
        """A new extent id with its replicas created on nodes in distinct fault domains.

        A failed attempt leaves its id behind (replicas it did create are garbage for GC) and
        the next one uses a fresh id, so no node ever holds one id with two replica sets."""
        failed: set[str] = set()
        for _ in range(CREATE_ATTEMPTS_MAX):
            extent_id = await self._next_extent_id()
            names = self.replica.read(lambda st: place_extent(
                self._candidates(st, failed), self.limits.replicas))
            addresses = self.addresses(names)
            for name in names:
                self._placed[name] = self._placed.get(name, 0) + 1
            try:
                results = await asyncio.gather(*(
                    self.extents.create_extent(a, extent_id, addresses)
                    for a in addresses), return_exceptions=True)
            finally:
                for name in names:
                    self._placed[name] -= 1
            bad = [n for n, r in zip(names, results, strict=True) if isinstance(r, Exception)]
            if not bad:
                return extent_id, tuple(names)
            log.warning("creating extent %d failed on %s; placing it elsewhere", extent_id, bad)
            failed.update(bad)
        raise Unavailable(f"could not create an extent in {CREATE_ATTEMPTS_MAX} placements "
                          f"(failed: {sorted(failed)})")

    def addresses(self, names: Iterable[str]) -> list[str]:
        return self.replica.read(lambda st: [st.node(n).address for n in names])

    # ---- sealing and rollover -------------------------------------------------------------

    async def seal(self, extent: s.Extent) -> int:
        """Run the seal protocol on an open extent's replicas; return the sealed length."""
        length, _ = await seal_extent(self.extents, extent.extent_id,
                                      self.addresses(extent.replicas),
                                      timeout_s=self.limits.seal_probe_timeout_ms / 1000)
        return length

    async def seal_and_add(self, stream_name: str, last_extent_id: int) -> s.Stream:
        """Seal the stream's last extent if it is still `last_extent_id` and open, and add a
        new extent — one Raft entry. If the stream moved on already, return it as it is."""
        lock = self._stream_locks.setdefault(stream_name, asyncio.Lock())
        async with lock:
            stream = self.replica.read(lambda st: st.stream(stream_name))
            last = stream.extents[-1] if stream.extents else 0
            if last != last_extent_id:
                return stream  # another caller rolled it over: use its new extent
            commands: list[object] = []
            if last:
                extent = self.replica.read(lambda st: st.extent(last))
                if extent.state == s.OPEN:
                    commands.append(s.SealExtent(last, await self.seal(extent)))
            extent_id, replicas = await self.create_extent()
            commands.append(s.AddExtent(stream_name, extent_id, replicas, expect_last=last))
            results = await self.replica.propose(s.MultiModify(tuple(commands)))
            return results[-1]

    async def seal_one(self, extent_id: int) -> s.Extent:
        extent = self.replica.read(lambda st: st.extent(extent_id))
        if extent.state != s.OPEN:
            return extent
        return await self.replica.propose(s.SealExtent(extent_id, await self.seal(extent)))

    # ---- watching nodes -------------------------------------------------------------------

    async def monitor_forever(self) -> None:
        while True:
            await asyncio.sleep(self.limits.monitor_interval_ms / 1000)
            if not self.is_leader():
                continue
            try:
                await self.monitor_once()
            except StampError as exc:
                log.warning("monitor pass failed: %s", exc)

    async def monitor_once(self) -> None:
        nodes = self.replica.read(lambda st: list(st.nodes.values()))
        for node in nodes:
            if node.state == s.ALIVE and self.silent_s(node.name) * 1000 > \
                    self.limits.dead_after_ms:
                log.warning("extent node %s silent for %.1fs: dead", node.name,
                            self.silent_s(node.name))
                await self.replica.propose(s.NodeDead(node.name))
        dead = self.replica.read(lambda st: {n.name for n in st.nodes.values()
                                             if n.state == s.DEAD})
        if not dead:
            return
        extents, streams = self.replica.read(
            lambda st: (list(st.extents.values()), dict(st.streams)))
        last_of = {stream.extents[-1]: stream.name for stream in streams.values()
                   if stream.extents}
        for extent in extents:
            if not dead.intersection(extent.replicas):
                continue
            if extent.state == s.OPEN:
                await self._continue_stream(extent, last_of.get(extent.extent_id))
            elif extent.state == s.SEALED and extent.extent_id not in self._copying:
                self._copying.add(extent.extent_id)
                task = asyncio.get_running_loop().create_task(self._rereplicate(extent))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _continue_stream(self, extent: s.Extent, stream_name: str | None) -> None:
        """An open extent lost a replica: seal it; its stream continues on a new extent."""
        try:
            if stream_name is None:
                await self.seal_one(extent.extent_id)
            else:
                await self.seal_and_add(stream_name, extent.extent_id)
            log.info("extent %d lost a replica while open: sealed%s", extent.extent_id,
                     f", stream {stream_name} continues" if stream_name else "")
        except (PreconditionFailed, NotFound) as exc:
            log.info("extent %d: moved on meanwhile (%s)", extent.extent_id, exc)

    async def _rereplicate(self, extent: s.Extent) -> None:
        try:
            async with self._copy_slots:
                await self._pace(extent.sealed_length)
                await self._copy_replicas(extent.extent_id)
        except StampError as exc:
            log.warning("re-replicating extent %d failed (will retry): %s", extent.extent_id,
                        exc)
        finally:
            self._copying.discard(extent.extent_id)

    async def _pace(self, nbytes: int) -> None:
        """Space copies so that they average at most rereplication_bytes_per_s."""
        now = time.monotonic()
        start = max(now, self._copy_paced_until)
        self._copy_paced_until = start + nbytes / self.limits.rereplication_bytes_per_s
        if start > now:
            await asyncio.sleep(start - now)

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
            target_address = self.addresses([target])[0]
            await self.extents.create_extent(target_address, extent_id, self.addresses(replicas))
            # The new replica fetches the sealed bytes from healthy peers (SyncReplicate,
            # batched, checksummed) and seals itself at the recorded length.
            await self.extents.seal(target_address, extent_id, extent.sealed_length,
                                    self.addresses(healthy), timeout_s=600)
            await self.replica.propose(s.ReplaceReplica(extent_id, dead[0], target))
            log.info("extent %d: replica on dead %s copied to %s (%d bytes)", extent_id,
                     dead[0], target, extent.sealed_length)
