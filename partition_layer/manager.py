"""The partition manager (PM, §4). Several run; the one holding the `pm/leader` lease acts.

The leader keeps the partition map in the lock service (`pm/map`, JSON, written only with
its lease as a fence, so a deposed leader's late write is refused), bootstraps one partition
covering the whole key space (or several, cut at `bootstrap_split_keys`), and every
`assign_interval_ms` (every SUSPECT_PASS_S while a live server's heartbeat is late: it
may be dead, and its partitions are then reassigned as soon as its session ends):
- finds the live partition servers (their registrations `ps/<name>` die with their session),
- reassigns every partition whose server is not live to the live one serving fewest
  (recorded in the history: "reassign", trigger "dead server"),
- resolves the pending splits and merges (manager_ops.py: publish, call again, roll back),
- asks each assigned server to load its partitions until it has confirmed (Load is
  idempotent; a heartbeat that no longer lists a partition sends it again) — never a
  partition with a split or merge pending (manager_ops.py loads what its op needs), and
  with `create_if_missing` only for a partition of the bootstrap map.
The lease, not the PM, decides who serves (§8 invariant 3), and the PM never takes one
from its holder: a server's partitions live and die with its session (ownership.py), so
once its registration is gone it stops serving them, and a PS that died keeps their leases
only until they expire — its successor's load waits that out (bounded by what is left of
the lease) and fails at once while a live server still holds it. A live server that serves
a partition the map assigns elsewhere hears so in its heartbeat answer and unloads it. A
failed load is sent again no sooner than `load_retry_ms` later.

Any PM answers GetMap from the lock service. Every change of the map is a compare-and-set
under `maps.lock` (map_store.LeaderMap, which the pass, the split and merge coordinator and
the balancer share: one writer in this process).
Split, merge and the balance pass live beside this module (manager_ops.py, balancer.py), the
history in history.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from common import background, metrics, rpc
from common.clock import Clock, SystemClock
from common.config import PartitionLimits, PartitionManagerConfig
from common.errors import InvalidArgument, NotLeader, StampError, Unavailable
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from lock_service.client import Lease, LockClient
from partition_layer.balancer import Balancer
from partition_layer.history import (
    OP_MOVE,
    OP_REASSIGN,
    TRIGGER_DEAD_SERVER,
    TRIGGER_OPERATOR,
    HistoryEntry,
    HistoryStore,
)
from partition_layer.manager_ops import SplitMergeCoordinator
from partition_layer.map_store import LeaderMap, MapStore, read_map
from partition_layer.partition_map import (
    BORN_BOOTSTRAP,
    PartitionMap,
    assigned_elsewhere,
    least_loaded,
)
from stream_layer.sm_client import AsyncStreamManagerClient

log = logging.getLogger(__name__)

LEADER_LOCK = "pm/leader"
LEADER_ADDRESS_KEY = "pm/leader-address"
SERVER_PREFIX = "ps/"
UNLOAD_TIMEOUT_S = 30.0
# A standby waits this long for the leader lock per try (then tries again): short enough
# that a stopping manager's last try ends soon, long enough that it costs the lock service
# almost nothing (one Acquire, then a long-poll that reads the leader's state).
STANDBY_WAIT_S = 2.0
# A live server whose heartbeat is this many intervals late may have died or frozen: its
# session ends within a lease's time of its last renewal, and until then (or its next beat)
# the pass runs every SUSPECT_PASS_S, not every assign_interval_ms, so that its partitions
# are reassigned within about that of its registration's end (issue 29: a failover waits
# for the session, then for this pass).
SUSPECT_LATE_INTERVALS = 1.25
SUSPECT_PASS_S = 0.025
# ...for at most this long past when its session must have ended if it died at its last
# beat (then it is alive, renewing, and merely not heard from: a busy or cut-off server).
SUSPECT_MARGIN_S = 1.0
# The pass lists the registrations (one List that carries their values, at the lock service's
# leader) only when it may find them changed (issue 29: listing every pass was most of an
# idle stamp's lock-service load): while a live server's heartbeat is QUIET_LATE_INTERVALS
# intervals late (it may have died: its registration ends with its session, and the pass
# must see that at once — a failover waits for it), when a server it does not list (or at
# another address) heartbeats, when a heartbeat says its registration is not the one listed
# (the server lost its session, 0, or registered again under a new one: its partitions ended
# with the old session, and the pass must see that — test_ownership_latch), and at least
# every LIVE_REFRESH_S: a server that stopped cleanly, or beats without saying (an older
# build). At 0.25 s this refresh was the one List of an idle stamp 4 times a second, before
# heartbeats said which registration they beat under.
QUIET_LATE_INTERVALS = 1.1
LIVE_REFRESH_S = 1.0


def registrations(locks: LockClient) -> dict[str, tuple[str, int]]:
    """{PS name: (address, version of its registration key)} of every registered (live)
    partition server."""
    return {key[len(SERVER_PREFIX):]: (value.decode(), version)
            for key, (value, version) in locks.list_values(SERVER_PREFIX).items()}


def live_servers(locks: LockClient) -> dict[str, str]:
    """{PS name: address} of every registered (live) partition server."""
    return {name: address for name, (address, _) in registrations(locks).items()}


class PartitionManager:
    def __init__(self, name: str, address: str, locks: LockClient, limits: PartitionLimits,
                 sm: AsyncStreamManagerClient | None = None,
                 config: PartitionManagerConfig | None = None,
                 clock: Clock | None = None) -> None:
        self.name = name
        self.clock = clock or SystemClock()  # every time the manager and its ops read
        self.address = address
        self.locks = locks
        self.limits = limits
        self.sm = sm  # None: pending ops are resolved by asking the PS again (idempotent)
        self.lease: Lease | None = None
        self.heartbeats: dict[str, tuple[float, pb.ServerLoad]] = {}
        self.confirmed: dict[int, str] = {}
        self.history = HistoryStore(locks)
        self.maps = LeaderMap(MapStore(locks, limits.bootstrap_split_keys), lambda: self.lease)
        self.ops = SplitMergeCoordinator(self, self.maps, self.clock)
        self.balancer = Balancer(self, self.maps, config or PartitionManagerConfig(), self.clock)
        self._inflight: dict[int, asyncio.Task[None]] = {}
        # Partition id -> monotonic time before which no Load of it is sent (after a failure).
        self._load_not_before: dict[int, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._channels: dict[str, object] = {}
        # The servers the last pass found live ({name: address}), when it listed them,
        # whether a heartbeat since came from a server not among them, and since when this
        # manager leads: a server it has not heard from since is late from then on
        # (`next_pass_in`, `_must_list`).
        self._live: dict[str, str] = {}
        self._registered: dict[str, int] = {}  # name -> registration version, as last listed
        self._listed_at = float("-inf")
        self._heard_unlisted = False
        self._leading_since = 0.0
        # Splits, merges, moves and reassignments, as recorded in the history (metrics).
        self.operations = metrics.counter("stamp_pm_operations", "partition operations "
                                          "finished, by op, trigger and outcome",
                                          ("op", "trigger", "outcome"))

    # ---- leadership -------------------------------------------------------------------------

    def is_leader(self) -> bool:
        return self.lease is not None and self.lease.valid()

    async def _try_lead(self) -> None:
        """Take the leader lock if it is free, or wait for it (at most STANDBY_WAIT_S): a
        standby long-polls the lock service (WaitFree: woken when the lock frees), not an
        Acquire, a Raft write, every pass; it leads as soon as the leader's lease ends."""
        ttl_s = self.limits.manager_lease_ttl_ms / 1000
        lease = await asyncio.to_thread(self.locks.acquire, LEADER_LOCK, ttl_s,
                                        STANDBY_WAIT_S)
        if lease is None:
            return
        await asyncio.to_thread(self.locks.put, LEADER_ADDRESS_KEY, self.address.encode(),
                                lease=lease)
        self.lease = lease
        self.confirmed.clear()  # what a previous leader confirmed is not known here
        self._leading_since = self.clock.monotonic()  # no server was late before: none heard
        self._listed_at = float("-inf")  # and the first pass lists the servers
        log.info("%s leads the partition managers (token %d)", self.name, lease.token)

    def leader_address(self) -> str | None:
        found = self.locks.get(LEADER_ADDRESS_KEY)
        return found[0].decode() if found else None

    async def require_leader(self) -> None:
        if not self.is_leader():
            raise NotLeader(f"{self.name} is not the leading partition manager",
                            leader=await asyncio.to_thread(self.leader_address))

    # ---- the assignment pass ------------------------------------------------------------------

    async def run_forever(self) -> None:
        """The assignment pass every `assign_interval_ms`, for as long as the process lives:
        nothing a pass raises ends it (common/background.py logs it, rate-limited) — a
        manager whose pass died would lead on and assign nothing."""
        await background.run_forever(f"{self.name}: assignment pass", self.run_once,
                                     self.limits.assign_interval_ms / 1000, logger=log,
                                     sleep=self._pause)

    async def _pause(self, interval_s: float) -> None:
        """The wait before the next pass: `interval_s`, cut short to keep SUSPECT_PASS_S
        between passes while a live server is suspect (`next_pass_in`)."""
        await asyncio.sleep(self.next_pass_in(interval_s, self.clock.monotonic()))

    def next_pass_in(self, interval_s: float, now: float) -> float:
        """How long until the next pass (pure but for the heartbeats and the live set): at
        most `interval_s`; SUSPECT_PASS_S while the heartbeat of a server the last pass
        found live is late by SUSPECT_LATE_INTERVALS intervals, until its session must have
        ended had it died at its last beat, plus SUSPECT_MARGIN_S (module constants); or
        until the next such lateness begins."""
        beat_s = self.limits.heartbeat_interval_ms / 1000
        late_s = SUSPECT_LATE_INTERVALS * beat_s
        over_s = self._suspect_until_s()
        wait_s = interval_s
        for server in self._live:
            silent_s = self._silent_s(server, now)
            if late_s <= silent_s < over_s:
                return SUSPECT_PASS_S
            if silent_s < late_s:
                wait_s = min(wait_s, max(SUSPECT_PASS_S, late_s - silent_s))
        return wait_s

    def _silent_s(self, server: str, now: float) -> float:
        """How long this manager, while leading, has not heard from `server`."""
        heard = self.heartbeats.get(server, (self._leading_since, None))[0]
        return now - max(heard, self._leading_since)

    def _suspect_until_s(self) -> float:
        """The silence past which a server that died at its last beat has lost its
        session for sure (plus SUSPECT_MARGIN_S): from then on it is not suspect."""
        return (self.limits.heartbeat_interval_ms + self.limits.server_session_ttl_ms) / 1000 \
            + SUSPECT_MARGIN_S

    def _must_list(self, now: float) -> bool:
        """Whether this pass lists the registrations rather than reuse the last pass's
        (module constants QUIET_LATE_INTERVALS, LIVE_REFRESH_S)."""
        if self._heard_unlisted or now - self._listed_at >= LIVE_REFRESH_S:
            return True
        quiet_s = QUIET_LATE_INTERVALS * self.limits.heartbeat_interval_ms / 1000
        over_s = self._suspect_until_s()
        return any(quiet_s <= self._silent_s(server, now) < over_s for server in self._live)

    async def run_once(self) -> None:
        if not self.is_leader():
            self.lease = None
            await self._try_lead()
            if not self.is_leader():
                self._live = {}  # a standby suspects nobody: it passes at its pace
                return
        now = self.clock.monotonic()
        if self._must_list(now):
            self._heard_unlisted = False  # before the List: a beat during it counts
            self._live = await self.live()
            self._listed_at = now
        live = self._live
        async with self.maps.lock:
            current, version = await self.current_map()
            before = counted = current
            changes: dict[int, str] = {}
            for entry in current.partitions:
                # The sources of a pending op move with their op (its resolution reassigns).
                if entry.server not in live and current.pending_for(entry.id) is None:
                    choice = least_loaded(live, counted)
                    if choice is None:
                        break  # no live server: nothing to assign to
                    changes[entry.id] = choice
                    counted = counted.assigned({entry.id: choice})
            if changes:
                current = await self.write_map(current.assigned(changes), version)
                log.info("%s: assigned %s (map version %d)", self.name, changes,
                         current.version)
        self.ops.resolve_pending(current, live)
        now = self.clock.monotonic()
        for entry in current.partitions:
            if (entry.server in live and self.confirmed.get(entry.id) != entry.server
                    and entry.id not in self._inflight
                    and self.ops.may_load(entry.id, current)
                    and self._load_not_before.get(entry.id, 0.0) <= now):
                self._start_load(entry.id, entry.server, live[entry.server], current)
        # After the loads are sent: the history's write (a lock-service round trip) is no
        # part of a failover's time.
        await self._record_reassigned(before, current, changes)

    async def _record_reassigned(self, before: PartitionMap, after: PartitionMap,
                                 changes: dict[int, str]) -> None:
        """History entries for partitions taken from a server that died (a first
        assignment, from no server, is not a reassignment)."""
        now = self.clock.wall()
        for partition_id, server in changes.items():
            if before.get(partition_id).server:
                await self.record(HistoryEntry(
                    OP_REASSIGN, TRIGGER_DEAD_SERVER, (partition_id,), (partition_id,), now,
                    map_version=after.version, server=server))

    async def live(self) -> dict[str, str]:
        """{name: address} of the registered servers; their registrations' versions are
        noted for the heartbeats (`_registration_changed`)."""
        found = await asyncio.to_thread(registrations, self.locks)
        self._registered = {name: version for name, (_, version) in found.items()}
        return {name: address for name, (address, _) in found.items()}

    @property
    def last_map(self) -> PartitionMap | None:
        """The map as this manager last read or wrote it (heartbeat answers)."""
        return self.maps.last

    @property
    def map_version(self) -> int:
        return self.maps.version

    async def current_map(self) -> tuple[PartitionMap, int]:
        """The stored map and its lock-service version (bootstrapped when there is none):
        from memory while this manager leads under the lease it read or wrote it with
        (map_store.py)."""
        return await self.maps.current()

    async def write_map(self, new: PartitionMap, version: int) -> PartitionMap:
        """Store `new` if the stored map is still at `version` (fenced by the lease)."""
        return await self.maps.write(new, version)

    async def record(self, entry: HistoryEntry) -> None:
        """Add to the history; a failure to record is logged, never fails the operation."""
        self.operations.labels(entry.op, entry.trigger,
                               entry.result.partition(":")[0]).inc()
        try:
            await asyncio.to_thread(self.history.add, entry, self.lease)
        except StampError as exc:
            log.warning("%s: could not record %s in the history: %s", self.name, entry, exc)

    async def split_key(self, partition_id: int, current: PartitionMap) -> bytes:
        """The balance policy's split key for the partition (an operator's split without a
        key, manager_ops.py)."""
        return await self.balancer.split_key(partition_id, current)

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def settle_load(self, partition_id: int) -> None:
        """Wait for a Load of the partition this manager has in flight (a Split or Merge
        must not race it)."""
        task = self._inflight.get(partition_id)
        if task is not None:
            await asyncio.shield(task)

    def _start_load(self, partition_id: int, server: str, address: str,
                    current: PartitionMap) -> None:
        entry = current.get(partition_id)

        async def load() -> None:
            try:
                reply = await rpc.call(self.stub(address).Load(
                    pb.LoadRequest(partition_id=partition_id, range=entry.range_pb(),
                                   map_version=current.version,
                                   create_if_missing=entry.born == BORN_BOOTSTRAP),
                    timeout=self.limits.load_timeout_ms / 1000))
                self.confirmed[partition_id] = server
                self._load_not_before.pop(partition_id, None)
                log.info("%s: %s serves partition %d (load %.3f s, %d ops replayed)",
                         self.name, server, partition_id, reply.seconds, reply.replayed_ops)
            except StampError as exc:
                self._load_not_before[partition_id] = (self.clock.monotonic()
                                                       + self.limits.load_retry_ms / 1000)
                log.warning("%s: %s could not load partition %d: %s", self.name, server,
                            partition_id, exc)
            finally:
                self._inflight.pop(partition_id, None)

        self._inflight[partition_id] = asyncio.get_running_loop().create_task(load())

    def stub(self, address: str) -> pb_grpc.PartitionServerStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = rpc.aio_channel(address, self.limits.rpc_message_bytes_max)
            self._channels[address] = channel
        return pb_grpc.PartitionServerStub(channel)

    # ---- requests -----------------------------------------------------------------------------

    def heartbeat(self, load: pb.ServerLoad) -> pb.HeartbeatReply:
        """Note a server's load; answer the partitions it serves that the map assigns to
        another server (it unloads them: a leader's map is the truth it acts on, and their
        owner by the map cannot load them while this one holds their leases). A manager
        that does not lead answers NotLeader: the server, which reads the leader's address
        only when a beat is refused (ps_main.py `LeaderHeartbeat`), then looks it up."""
        if not self.is_leader():
            raise NotLeader(f"{self.name} is not the leading partition manager")
        self.heartbeats[load.name] = (self.clock.monotonic(), load)
        if self._live.get(load.name) != load.address or self._registration_changed(load):
            self._heard_unlisted = True  # new, restarted elsewhere, or re-registered: list
        listed = {p.partition_id for p in load.partitions}
        for partition_id, server in list(self.confirmed.items()):
            if server == load.name and partition_id not in listed \
                    and partition_id not in self._inflight:
                del self.confirmed[partition_id]  # it lost it: load it again
        reply = pb.HeartbeatReply()
        if self.last_map is not None:
            serving = [p.partition_id for p in load.partitions if p.state == "serving"]
            reply.not_yours.extend(assigned_elsewhere(self.last_map, load.name, serving))
            if reply.not_yours:
                log.warning("%s: %s serves %s, assigned elsewhere: it is told to let go",
                            self.name, load.name, list(reply.not_yours))
        return reply

    def _registration_changed(self, load: pb.ServerLoad) -> bool:
        """Whether `load` says its server is not registered under the key this manager
        listed: it lost its session (0) or registered again under a new one. A server that
        does not say (an older build) is caught by the LIVE_REFRESH_S listing."""
        return (load.HasField("registration")
                and load.registration != self._registered.get(load.name))

    def partition_loads(self) -> dict[int, pb.PartitionLoad]:
        """The latest heartbeat's load of every partition a server reported serving."""
        return {p.partition_id: p for _, load in self.heartbeats.values()
                for p in load.partitions}

    async def get_map(self) -> pb.PartitionMap:
        found = await asyncio.to_thread(read_map, self.locks)
        if found is None:
            raise Unavailable("no partition map yet: is a partition manager leading?")
        live = await asyncio.to_thread(live_servers, self.locks)
        return found[0].to_pb(live)

    async def move(self, partition_id: int, server: str, trigger: str = TRIGGER_OPERATOR
                   ) -> pb.PartitionMap:
        """Move: the old owner unloads (checkpoints, releases its lease), the map names the
        new one, which loads. Writes pause for about the checkpoint and load (recorded in the
        history as the unavailable time)."""
        await self.require_leader()
        started_at, started = self.clock.wall(), self.clock.monotonic()
        live = await self.live()
        if server not in live:
            raise InvalidArgument(f"{server!r} is not a live partition server "
                                  f"(live: {', '.join(sorted(live)) or 'none'})")
        current, version = await self.current_map()
        entry = current.get(partition_id)
        if current.pending_for(partition_id) is not None or partition_id in self.ops.busy:
            raise InvalidArgument(f"partition {partition_id} has a split or merge under way")
        if entry.server != server:
            if entry.server in live:
                try:
                    await rpc.call(self.stub(live[entry.server]).Unload(
                        pb.UnloadRequest(partition_id=partition_id), timeout=UNLOAD_TIMEOUT_S))
                except StampError as exc:
                    log.warning("%s: %s did not unload partition %d cleanly: %s", self.name,
                                entry.server, partition_id, exc)
            async with self.maps.lock:
                current, version = await self.maps.current()
                current = await self.maps.write(current.assigned({partition_id: server}),
                                                version)
            self.confirmed.pop(partition_id, None)
        task = self._inflight.get(partition_id)
        if task is None and self.confirmed.get(partition_id) != server:
            self._start_load(partition_id, server, live[server], current)
            task = self._inflight.get(partition_id)
        if task is not None:
            await asyncio.shield(task)
        if self.confirmed.get(partition_id) != server:
            raise Unavailable(f"{server} did not load partition {partition_id}; the manager "
                              f"keeps trying")
        if entry.server != server:
            seconds = self.clock.monotonic() - started
            await self.record(HistoryEntry(OP_MOVE, trigger, (partition_id,), (partition_id,),
                                           started_at, seconds=seconds, unavailable_s=seconds,
                                           map_version=current.version, server=server))
        return current.to_pb(live)

    def status(self) -> pb.ManagerStatusReply:
        leader = self.is_leader()
        reply = pb.ManagerStatusReply(name=self.name, leader=leader,
                                      map_version=self.map_version)
        if leader:
            reply.leader_address = self.address
            reply.servers.extend(load for _, load in self.heartbeats.values())
        return reply

    async def close(self) -> None:
        for task in [*self._inflight.values(), *self._tasks]:
            task.cancel()
        for channel in self._channels.values():
            await channel.close()  # type: ignore[attr-defined]
        await self.ops.close()
        if self.sm is not None:
            await self.sm.close()
        if self.lease is not None:
            await asyncio.to_thread(self.lease.release)
