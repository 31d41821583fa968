"""What the stream manager leader does besides committing commands (§2): it places new extents
and creates their replicas on extent nodes before the change commits, runs the seal protocol,
watches extent node heartbeats, and re-replicates the sealed extents of dead nodes.

Contracts:
- A new extent is in the replicated state only after its three replicas exist on their nodes
  (a reader that finds an extent can reach it). A create that fails picks other nodes.
- A stream's rollover (seal its open last extent, add a new one) is one Raft entry, and one at
  a time per stream on this leader; `expect_last` in the command fences a racing leader.
- Liveness is soft state here (liveness.py): a node unheard for `suspect_after` gets no new
  extents; unheard for `dead_after` it is declared dead (a command), its open extents are
  sealed and their streams continue on new extents, and its sealed extents are copied to a
  node in a fault domain not already holding them (rereplication.py), erasure-coded ones
  rebuild their fragments (fragment_repair.py) — both within one repair budget
  (repair_budget.py). A node back before `dead_after` costs no copy.
- Time is the injected clock's: heartbeat timeouts, the grace period and the repair throttle
  are tested without sleeping.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Coroutine, Iterable
from typing import Any

from common import background, faults
from common.clock import Clock, SystemClock
from common.config import StreamManagerLimits
from common.errors import NotFound, PreconditionFailed, StampError, Unavailable
from stream_layer.extent_client import AsyncExtentClient
from stream_layer.seal import fence_replicas, seal_replicas
from stream_layer.stream_manager import state as s
from stream_layer.stream_manager.fragment_repair import FragmentRepair
from stream_layer.stream_manager.liveness import NodeLiveness
from stream_layer.stream_manager.placement import Candidate, SlowNodes, place_extent
from stream_layer.stream_manager.repair_budget import RepairBudget
from stream_layer.stream_manager.replica import StreamManagerReplica
from stream_layer.stream_manager.rereplication import Rereplication

log = logging.getLogger(__name__)

CREATE_ATTEMPTS_MAX = 3
# Work a rollover leaves for later (sealing the old extent's replicas, refilling the spares)
# waits this long first: its fsyncs would otherwise queue on the disks with the new extent's
# first appends, which a writer is waiting for.
AFTER_ROLLOVER_S = 0.05


async def _nothing() -> None:
    return None


class StreamManagerLeader:
    def __init__(self, replica: StreamManagerReplica, limits: StreamManagerLimits,
                 extents: AsyncExtentClient, clock: Clock | None = None) -> None:
        self.replica = replica
        self.limits = limits
        self.extents = extents
        self.clock = clock or SystemClock()
        self._ids: list[int] = []
        self._ids_term = -1
        self._reserving = asyncio.Lock()
        # Rollovers of one stream take turns; a lock lives only while someone holds it.
        self._stream_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = \
            weakref.WeakValueDictionary()
        self.liveness = NodeLiveness(limits, self.clock)
        # Nodes whose per-replica timeout caused a seal (frozen, slow disks): new extents
        # keep off them for a while.
        self.slow_nodes = SlowNodes(limits.slow_node_avoid_ms / 1000, self.clock)
        self._placed: dict[str, int] = {}  # placed, not yet committed, per node
        self._tasks: set[asyncio.Task[None]] = set()
        self._sealing: set[tuple[int, str]] = set()  # (extent, replica) seals under way
        self._spares: list[tuple[int, tuple[str, ...]]] = []
        self._spares_term = -1
        self._refilling = False
        self.repair_budget = RepairBudget(limits.rereplication_copies_max,
                                          limits.rereplication_bytes_per_s, self.clock)
        self.rereplication = Rereplication(replica, extents, self.repair_budget,
                                           self._candidates, self._spawn)
        self.fragment_repair = FragmentRepair(replica, extents, self.repair_budget,
                                              self._candidates, self._spawn)

    # ---- leadership -----------------------------------------------------------------------

    def is_leader(self) -> bool:
        leader = self.replica.is_leader()
        if leader and not self.liveness.in_office:
            # A new leader hears nobody yet: every node gets a full grace period from now.
            self.liveness.take_office()
        elif not leader:
            self.liveness.resign()
        return leader

    def term(self) -> int:
        return int(self.replica.raft_status()["term"])

    # ---- heartbeats -----------------------------------------------------------------------

    async def heartbeat(self, name: str, address: str, fault_domain: str, upgrade_domain: str,
                        capacity_bytes: int, used_bytes: int, extents: int,
                        unsealed: Iterable[int] = ()) -> None:
        self.liveness.heard(name, used_bytes, extents)
        known = self.replica.read(lambda st: st.nodes.get(name))
        if known is None or (known.address, known.fault_domain, known.upgrade_domain) != (
                address, fault_domain, upgrade_domain):
            await self.replica.propose(s.RegisterNode(name, address, fault_domain,
                                                      upgrade_domain, capacity_bytes))
            log.info("registered extent node %s at %s (%s)", name, address, fault_domain)
        elif known.state == s.DEAD:
            await self.replica.propose(s.NodeAlive(name))
            log.info("extent node %s is back", name)
        self._seal_returned(name, unsealed)

    def _seal_returned(self, name: str, unsealed: Iterable[int]) -> None:
        """A replica the node still holds open, of an extent sealed meanwhile (the node was
        away): tell it the sealed length; it truncates or syncs to it (§2 "Sealing")."""
        def stale(st: s.StreamManagerState) -> list[tuple[int, int, list[str]]]:
            found = []
            for extent_id in unsealed:
                extent = st.extents.get(extent_id)
                if extent is not None and extent.state == s.SEALED and name in extent.replicas:
                    others = [st.node(r).address for r in extent.replicas if r != name]
                    found.append((extent_id, extent.sealed_length, others))
            return found
        for extent_id, length, sources in self.replica.read(stale):
            log.info("extent %d: %s comes back unsealed; sealing it at %d", extent_id, name,
                     length)
            self.seal_later(extent_id, length, sources, replicas=[name])

    def silent_s(self, name: str) -> float:
        return self.liveness.silent_s(name)

    def suspect(self, name: str) -> bool:
        return self.liveness.suspect(name)

    def usage(self, name: str) -> tuple[int, int]:
        return self.liveness.usage(name)

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
        async with self._reserving:  # one reservation at a time, not one per waiting caller
            term = self.term()
            if term != self._ids_term:
                self._ids, self._ids_term = [], term  # reserved under another term: dropped
            if not self._ids:
                first, end = await self.replica.propose(
                    s.ReserveExtentIds(self.limits.extent_ids_reserved))
                self._ids = list(range(end - 1, first - 1, -1))
            return self._ids.pop()

    async def create_extent(self, avoid: Iterable[str] = ()) -> tuple[int, tuple[str, ...]]:
        """A new extent id with its replicas created on nodes in distinct fault domains.

        A failed attempt leaves its id behind (replicas it did create are garbage for GC) and
        the next one uses a fresh id, so no node ever holds one id with two replica sets."""
        failed: set[str] = set()
        avoided = set(avoid)
        for _ in range(CREATE_ATTEMPTS_MAX):
            extent_id = await self._next_extent_id()
            names = self.replica.read(lambda st: self._place(st, failed, avoided))
            addresses = self.addresses(names)
            for name in names:
                self._placed[name] = self._placed.get(name, 0) + 1
            try:
                results = await asyncio.gather(*(
                    self.extents.create_extent(a, extent_id, addresses,
                                               self.limits.create_extent_timeout_ms / 1000)
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

    def _place(self, st: s.StreamManagerState, failed: set[str], avoid: set[str]) -> list[str]:
        """Placement without failed nodes and, as far as the stamp has room (replicas in
        distinct fault domains), without the nodes found slow lately, then `avoid`."""
        slow = self.slow_nodes.names()
        for excluded in (failed | avoid | slow, failed | slow, failed):
            candidates = self._candidates(st, excluded)
            if len({c.fault_domain for c in candidates}) >= self.limits.replicas:
                break
        return place_extent(candidates, self.limits.replicas)

    def addresses(self, names: Iterable[str]) -> list[str]:
        return self.replica.read(lambda st: [st.node(n).address for n in names])

    # ---- sealing and rollover -------------------------------------------------------------

    async def fence(self, extent: s.Extent, late: Iterable[str] = ()) -> tuple[int, list[str]]:
        """Phase one of the seal (stream_layer/seal.py): fence the replicas, fix the length.
        `late`: replicas (addresses) whose timeout caused the seal: not waited for."""
        addresses = self.addresses(extent.replicas)
        fenced = await fence_replicas(self.extents, extent.extent_id, addresses,
                                      timeout_s=self.limits.seal_probe_timeout_ms / 1000,
                                      grace_s=self.limits.seal_straggler_wait_ms / 1000,
                                      late=list(late))
        return fenced.length, fenced.sources

    def mark_late(self, extent: s.Extent, late: Iterable[str]) -> list[str]:
        """Mark slow the replicas of `extent` (by address) a writer found past their
        per-replica timeout: the cause of its seal, so new extents keep off them for a while
        (seal.py). Addresses that are not replicas of `extent` are ignored. Their addresses."""
        name_of = dict(zip(self.addresses(extent.replicas), extent.replicas, strict=True))
        found = [a for a in late if a in name_of]
        self.slow_nodes.mark(name_of[a] for a in found)
        return found

    def seal_later(self, extent_id: int, length: int, sources: list[str],
                   replicas: Iterable[str] | None = None) -> None:
        """Phase two, off the critical path, once the length is committed: the fenced
        replicas refuse appends already, so truncating or syncing them can wait."""
        if replicas is None:
            replicas = self.replica.read(lambda st: st.extent(extent_id).replicas)
        targets = [a for a in self.addresses(replicas) if (extent_id, a) not in self._sealing]
        if not targets:
            return
        self._sealing.update((extent_id, a) for a in targets)

        async def seal() -> None:
            try:
                await asyncio.sleep(AFTER_ROLLOVER_S)
                await seal_replicas(self.extents, extent_id, targets, length, sources)
            finally:
                self._sealing.difference_update((extent_id, a) for a in targets)
        self._spawn(seal())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def seal_and_add(self, stream_name: str, last_extent_id: int,
                           epoch: int | None = None, late: Iterable[str] = ()) -> s.Stream:
        """Seal the stream's last extent if it is still `last_extent_id` and open, and add a
        new extent — one Raft entry. If the stream moved on already, return it as it is.
        A writer whose `epoch` is below the stream's writer epoch is refused (Fenced) before
        it touches anything; None: the leader's own continuation, at the current epoch.
        `late`: the replicas (addresses) whose per-replica timeout failed the writer's
        append: marked slow before the new extent is placed, and not waited for."""
        lock = self._stream_locks.setdefault(stream_name, asyncio.Lock())
        async with lock:
            stream = self.replica.read(lambda st: st.stream(stream_name))
            if epoch is None:
                epoch = stream.writer_epoch
            s.check_epoch(stream, epoch)
            last = stream.extents[-1] if stream.extents else 0
            if last != last_extent_id:
                return stream  # another caller rolled it over: use its new extent
            started = self.clock.monotonic()
            extent = self.replica.read(lambda st: st.extent(last)) if last else None
            # The fence and the new extent are independent: do both at once. The new extent
            # avoids the old one's nodes, one of which has probably just failed; a spare
            # created ahead of time makes it free.
            late_found = self.mark_late(extent, late) if extent is not None else []
            fence = (self.fence(extent, late_found)
                     if extent is not None and extent.state == s.OPEN else _nothing())
            term = self.term()
            fenced, placed = await asyncio.gather(
                fence, self.new_extent(avoid=extent.replicas if extent else ()),
                return_exceptions=True)
            if isinstance(fenced, BaseException):
                # Too few replicas answered the fence (seal.py): nothing is decided, the
                # caller retries. The new extent is unused: keep it as a spare.
                if not isinstance(placed, BaseException):
                    self._keep_spare(placed, term)
                raise fenced
            if isinstance(placed, BaseException):
                raise placed
            extent_id, replicas = placed
            ready = self.clock.monotonic()
            commands: list[object] = []
            if fenced is not None:
                commands.append(s.SealExtent(last, fenced[0], at=self.clock.wall()))
            commands.append(s.AddExtent(stream_name, extent_id, replicas, expect_last=last,
                                        epoch=epoch))
            results = await self.replica.propose(s.MultiModify(tuple(commands)))
            if fenced is not None:
                self.seal_later(last, *fenced)
            log.info("stream %s rolled over to extent %d: fence and place %.1f ms, commit "
                     "%.1f ms", stream_name, extent_id, (ready - started) * 1000,
                     (self.clock.monotonic() - ready) * 1000)
            return results[-1]

    async def fence_stream(self, stream_name: str, epoch: int) -> s.Stream:
        """Raise the stream's writer epoch, then seal its last extent if open. In that order:
        once the epoch is committed an older writer cannot add an extent, and the seal ends
        its appends to the last one, so after this returns no older writer's append can
        succeed anywhere in the stream (§8 invariant 3)."""
        lock = self._stream_locks.setdefault(stream_name, asyncio.Lock())
        async with lock:
            stream = await self.replica.propose(s.FenceStream(stream_name, epoch))
        if stream.extents:
            await self.seal_one(stream.extents[-1])
        return self.replica.read(lambda st: st.stream(stream_name))

    async def seal_one(self, extent_id: int) -> s.Extent:
        extent = self.replica.read(lambda st: st.extent(extent_id))
        if extent.state != s.OPEN:
            return extent
        length, sources = await self.fence(extent)
        sealed = await self.replica.propose(s.SealExtent(extent_id, length,
                                                         at=self.clock.wall()))
        self.seal_later(extent_id, length, sources)
        return sealed

    # ---- spare extents ----------------------------------------------------------------------

    async def new_extent(self, avoid: Iterable[str] = ()) -> tuple[int, tuple[str, ...]]:
        """An extent ready for appends: a spare created ahead of time when one fits (on
        healthy nodes, none of them in `avoid`), else created now. Spares are refilled in
        the background; a leader that loses office leaves its spares to garbage collection."""
        avoided = set(avoid)
        term = self.term()
        if term != self._spares_term:
            self._spares, self._spares_term = [], term
        usable = self.replica.read(lambda st: {n.name for n in st.nodes.values()
                                               if n.state == s.ALIVE
                                               and not self.suspect(n.name)
                                               and not self.slow_nodes.slow(n.name)})
        domain_of = self.replica.read(lambda st: {n.name: n.fault_domain
                                                  for n in st.nodes.values()})
        healthy_domains = {domain_of[n] for n in usable}
        for index, (extent_id, replicas) in enumerate(self._spares):
            # A spare made while few nodes had reported in may share a fault domain that
            # a fresh placement would not: such a spare is not good enough any more.
            spread = len({domain_of.get(r) for r in replicas})
            if (set(replicas) <= usable and not avoided.intersection(replicas)
                    and spread >= min(len(replicas), len(healthy_domains))):
                del self._spares[index]
                self._refill_spares()
                return extent_id, replicas
        self._refill_spares()
        return await self.create_extent(avoid=avoided)

    def _keep_spare(self, extent: tuple[int, tuple[str, ...]], term: int) -> None:
        """Keep a created, unused extent as a spare if it was made in the spares' term (a
        spare of an older term is left to garbage collection). A rollover whose fence failed
        may keep one past `spare_extents`: it was made already, and is used first."""
        if term == self._spares_term:
            self._spares.append(extent)

    def _refill_spares(self) -> None:
        if self._refilling or len(self._spares) >= self.limits.spare_extents:
            return
        self._refilling = True

        async def refill() -> None:
            try:
                await asyncio.sleep(AFTER_ROLLOVER_S)
                while len(self._spares) < self.limits.spare_extents and self.is_leader():
                    term = self.term()
                    self._keep_spare(await self.create_extent(), term)
            except StampError as exc:
                log.info("could not create a spare extent: %s", exc)
            finally:
                self._refilling = False
        self._spawn(refill())

    def busy_extents(self) -> set[int]:
        """Extent ids this leader holds outside the replicated state: its spares (on extent
        nodes, in no stream yet) and the extents it is copying or rebuilding fragments of
        (new copies not recorded yet). Garbage collection leaves them alone."""
        return ({extent_id for extent_id, _ in self._spares}
                | self.rereplication.under_way() | self.fragment_repair.under_way())

    # ---- watching nodes -------------------------------------------------------------------

    async def monitor_forever(self) -> None:
        """Watch the nodes every `monitor_interval_ms`, on the leader only, until cancelled.
        On the one background helper (common/background.py): a pass that fails for whatever
        reason is logged and the next one runs; were the loop to end, dead nodes would never
        be declared dead nor their extents re-replicated."""
        await background.run_forever("monitor pass", self._monitor_if_leader,
                                     self.limits.monitor_interval_ms / 1000,
                                     delay_first=True, logger=log, clock=self.clock)

    async def _monitor_if_leader(self) -> None:
        if self.is_leader():
            await faults.apoint("sm.monitor")
            await self.monitor_once()

    async def monitor_once(self) -> None:
        nodes = self.replica.read(lambda st: list(st.nodes.values()))
        for node in nodes:
            if node.state == s.ALIVE and self.liveness.overdue(node.name):
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
            elif extent.state == s.SEALED:
                self.rereplication.schedule(extent)
        for extent in extents:  # erasure-coded extents rebuild lost fragments instead
            if extent.state == s.ERASURE_CODED and dead.intersection(extent.fragments):
                self.fragment_repair.schedule(extent.extent_id)

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
        except Unavailable as exc:
            # Too few replicas answer to decide the seal: the next pass tries again.
            log.warning("extent %d lost a replica while open; not sealed yet: %s",
                        extent.extent_id, exc)
