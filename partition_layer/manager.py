"""The partition manager (PM, §4). Several run; the one holding the `pm/leader` lease acts.

The leader keeps the partition map in the lock service (`pm/map`, JSON, written only with
its lease as a fence, so a deposed leader's late write is refused), bootstraps one partition
covering the whole key space (or several, cut at `bootstrap_split_keys`), and every
`assign_interval_ms`:
- finds the live partition servers (their registrations `ps/<name>` die with their session),
- reassigns every partition whose server is not live to the live one serving fewest,
- asks each assigned server to load its partitions until it has confirmed (Load is
  idempotent; a heartbeat that no longer lists a partition sends it again).
A PS that died keeps its partitions' leases until they expire, so its successor's load
waits for that (the lease, not the PM, decides who serves, §8 invariant 3).

Any PM answers GetMap from the lock service; the policy that picks a server is one function
(`partition_map.least_loaded`), to be replaced by a balancing policy class later.
"""

from __future__ import annotations

import asyncio
import logging
import time

from common import rpc
from common.config import PartitionLimits
from common.errors import InvalidArgument, NotFound, NotLeader, StampError, Unavailable
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from lock_service.client import Lease, LockClient
from partition_layer.partition_map import PartitionMap, bootstrap_split_keys, least_loaded

log = logging.getLogger(__name__)

MAP_KEY = "pm/map"
LEADER_LOCK = "pm/leader"
LEADER_ADDRESS_KEY = "pm/leader-address"
SERVER_PREFIX = "ps/"
UNLOAD_TIMEOUT_S = 30.0


def read_map(locks: LockClient) -> tuple[PartitionMap, int] | None:
    found = locks.get(MAP_KEY)
    return None if found is None else (PartitionMap.from_json(found[0]), found[1])


def live_servers(locks: LockClient) -> dict[str, str]:
    """{PS name: address} of every registered (live) partition server."""
    servers = {}
    for key in locks.list(SERVER_PREFIX):
        found = locks.get(key)
        if found is not None:
            servers[key[len(SERVER_PREFIX):]] = found[0].decode()
    return servers


class PartitionManager:
    def __init__(self, name: str, address: str, locks: LockClient, limits: PartitionLimits
                 ) -> None:
        self.name = name
        self.address = address
        self.locks = locks
        self.limits = limits
        self.lease: Lease | None = None
        self.heartbeats: dict[str, tuple[float, pb.ServerLoad]] = {}
        self.confirmed: dict[int, str] = {}
        self._inflight: dict[int, asyncio.Task[None]] = {}
        self._channels: dict[str, object] = {}
        self.map_version = 0

    # ---- leadership -------------------------------------------------------------------------

    def is_leader(self) -> bool:
        return self.lease is not None and self.lease.valid()

    async def _try_lead(self) -> None:
        ttl_s = self.limits.manager_lease_ttl_ms / 1000
        lease = await asyncio.to_thread(self.locks.acquire, LEADER_LOCK, ttl_s, 0.0)
        if lease is None:
            return
        await asyncio.to_thread(self.locks.put, LEADER_ADDRESS_KEY, self.address.encode(),
                                lease=lease)
        self.lease = lease
        self.confirmed.clear()  # what a previous leader confirmed is not known here
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
        interval_s = self.limits.assign_interval_ms / 1000
        while True:
            try:
                await self.run_once()
            except StampError as exc:
                log.warning("%s: assignment pass failed: %s", self.name, exc)
            await asyncio.sleep(interval_s)

    async def run_once(self) -> None:
        if not self.is_leader():
            self.lease = None
            await self._try_lead()
            if not self.is_leader():
                return
        live = await asyncio.to_thread(live_servers, self.locks)
        current, version = await self._current_map()
        counted = current
        changes: dict[int, str] = {}
        for entry in current.partitions:
            if entry.server not in live:
                choice = least_loaded(live, counted)
                if choice is None:
                    break  # no live server: nothing to assign to
                changes[entry.id] = choice
                counted = counted.assigned({entry.id: choice})
        if changes:
            current = await self._write_map(current.assigned(changes), version)
            log.info("%s: assigned %s (map version %d)", self.name, changes, current.version)
        self.map_version = current.version
        for entry in current.partitions:
            if (entry.server in live and self.confirmed.get(entry.id) != entry.server
                    and entry.id not in self._inflight):
                self._start_load(entry.id, entry.server, live[entry.server], current)

    async def _current_map(self) -> tuple[PartitionMap, int]:
        found = await asyncio.to_thread(read_map, self.locks)
        if found is not None:
            return found
        fresh = PartitionMap.bootstrap(bootstrap_split_keys(self.limits.bootstrap_split_keys))
        written = await asyncio.to_thread(self.locks.compare_and_set, MAP_KEY, 0,
                                          fresh.to_json(), fence=self.lease)
        if written is None:
            raise Unavailable("the partition map changed while bootstrapping it")
        log.info("%s: bootstrapped the partition map: %d partition(s) for the key space",
                 self.name, len(fresh.partitions))
        return fresh, written

    async def _write_map(self, new: PartitionMap, version: int) -> PartitionMap:
        written = await asyncio.to_thread(self.locks.compare_and_set, MAP_KEY, version,
                                          new.to_json(), fence=self.lease)
        if written is None:
            raise Unavailable("the partition map changed under this pass; trying again")
        return new

    def _start_load(self, partition_id: int, server: str, address: str,
                    current: PartitionMap) -> None:
        entry = current.get(partition_id)

        async def load() -> None:
            try:
                reply = await rpc.call(self._stub(address).Load(
                    pb.LoadRequest(partition_id=partition_id, range=entry.range_pb(),
                                   map_version=current.version),
                    timeout=self.limits.load_timeout_ms / 1000))
                self.confirmed[partition_id] = server
                log.info("%s: %s serves partition %d (load %.3f s, %d ops replayed)",
                         self.name, server, partition_id, reply.seconds, reply.replayed_ops)
            except StampError as exc:
                log.warning("%s: %s could not load partition %d: %s", self.name, server,
                            partition_id, exc)
            finally:
                self._inflight.pop(partition_id, None)

        self._inflight[partition_id] = asyncio.get_running_loop().create_task(load())

    def _stub(self, address: str) -> pb_grpc.PartitionServerStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = rpc.aio_channel(address, self.limits.rpc_message_bytes_max)
            self._channels[address] = channel
        return pb_grpc.PartitionServerStub(channel)

    # ---- requests -----------------------------------------------------------------------------

    def heartbeat(self, load: pb.ServerLoad) -> None:
        self.heartbeats[load.name] = (time.monotonic(), load)
        listed = {p.partition_id for p in load.partitions}
        for partition_id, server in list(self.confirmed.items()):
            if server == load.name and partition_id not in listed \
                    and partition_id not in self._inflight:
                del self.confirmed[partition_id]  # it lost it: load it again

    async def get_map(self) -> pb.PartitionMap:
        found = await asyncio.to_thread(read_map, self.locks)
        if found is None:
            raise Unavailable("no partition map yet: is a partition manager leading?")
        live = await asyncio.to_thread(live_servers, self.locks)
        return found[0].to_pb(live)

    async def move(self, partition_id: int, server: str) -> pb.PartitionMap:
        """Operator move: the old owner unloads (checkpoints, releases its lease), the map
        names the new one, which loads. Writes pause for about the checkpoint and load."""
        await self.require_leader()
        live = await asyncio.to_thread(live_servers, self.locks)
        if server not in live:
            raise InvalidArgument(f"{server!r} is not a live partition server "
                                  f"(live: {', '.join(sorted(live)) or 'none'})")
        current, version = await self._current_map()
        entry = current.get(partition_id)
        if entry.server != server:
            if entry.server in live:
                try:
                    await rpc.call(self._stub(live[entry.server]).Unload(
                        pb.UnloadRequest(partition_id=partition_id), timeout=UNLOAD_TIMEOUT_S))
                except StampError as exc:
                    log.warning("%s: %s did not unload partition %d cleanly: %s", self.name,
                                entry.server, partition_id, exc)
            current = await self._write_map(current.assigned({partition_id: server}), version)
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
        for task in list(self._inflight.values()):
            task.cancel()
        for channel in self._channels.values():
            await channel.close()  # type: ignore[attr-defined]
        if self.lease is not None:
            await asyncio.to_thread(self.lease.release)


class ManagerServicer(pb_grpc.PartitionManagerServicer):
    def __init__(self, manager: PartitionManager) -> None:
        self.manager = manager

    @rpc.rpc_errors
    async def GetMap(self, request: pb.GetMapRequest, context: object) -> pb.PartitionMap:
        return await self.manager.get_map()

    @rpc.rpc_errors
    async def Heartbeat(self, request: pb.ServerLoad, context: object) -> pb.HeartbeatReply:
        self.manager.heartbeat(request)
        return pb.HeartbeatReply()

    @rpc.rpc_errors
    async def Move(self, request: pb.MoveRequest, context: object) -> pb.PartitionMap:
        if not request.server:
            raise InvalidArgument("move names the partition server to move to")
        try:
            return await self.manager.move(request.partition_id, request.server)
        except NotFound as exc:
            raise InvalidArgument(str(exc)) from exc

    @rpc.rpc_errors
    async def Status(self, request: pb.ManagerStatusRequest, context: object
                     ) -> pb.ManagerStatusReply:
        reply = self.manager.status()
        if not reply.leader:
            reply.leader_address = await asyncio.to_thread(self.manager.leader_address) or ""
        return reply
