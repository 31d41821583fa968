"""The partition server (PS, §4): serves many range partitions over gRPC.

It owns a range partition exactly while it holds that partition's lease in the lock service
(`partition/<id>`) AND its own session (ownership.py): the lease's fencing token is the
epoch with which it fences the partition's streams at load. When a lease is lost (the lock
service could not be reached in time) the partition stops serving at once; when the session
is lost every partition stops at once and its lease is released (the PM reassigns the
partitions of a server whose registration died, and their new owners must be able to load
them). Loads and unloads come from the PM; loads are idempotent (a second Load of a
partition loading or serving here waits for the same one); an unload always ends with the
partition stopped and its lease released, whatever fails or is cancelled on the way. A
partition that the PM's heartbeat answer says is assigned elsewhere is unloaded
(`drop_not_ours`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NamedTuple

from common import faults, rpc
from common.config import PartitionLimits
from common.errors import NotOwner, PreconditionFailed, StampError, Unavailable
from common.proto import partition_pb2 as pb
from lock_service.client import Lease, LockClient
from partition_layer import keys, witness_replay
from partition_layer.ownership import (
    HeldBy,
    LockCalls,
    Ownership,
    decide_wait,
    held_by,
    lease_name,
    orphaned,
    still_held,
)
from partition_layer.partition import SERVING, RangePartition
from partition_layer.partition_streams import LoadReport
from partition_layer.requests import handle, route_key
from partition_layer.split_merge import SplitMerge
from partition_layer.stats import PressureGauge
from partition_layer.witness_set import MESSAGE_BYTES_MAX as WITNESS_MESSAGE_BYTES_MAX
from stream_layer.client import AsyncStreamClient

log = logging.getLogger(__name__)


class _Load(NamedTuple):
    """A load under way here: its task and the range it loads."""

    task: asyncio.Task[LoadReport]
    key_range: keys.KeyRange


class PartitionServer:
    """The partitions this process serves, and the ownership (lease and session) behind
    each."""

    def __init__(self, name: str, streams: AsyncStreamClient, locks: LockClient,
                 limits: PartitionLimits) -> None:
        self.name = name
        self.streams = streams
        self.locks = locks
        self.limits = limits
        # To the partitions' CURP witnesses (witness_set.py): one channel per extent node.
        self.witness_channels = rpc.ChannelCache(WITNESS_MESSAGE_BYTES_MAX)
        self.partitions: dict[int, RangePartition] = {}
        # The ownership of every partition loaded here, by id (the one its partition serves
        # under); `owned` holds every ownership not yet released, loaded or not.
        self.leases: dict[int, Ownership] = {}
        self.owned: set[Ownership] = set()
        # The session that partitions acquired from now on live and die with (ps_main.py's
        # registration sets it); None: none yet, nothing is loaded.
        self.session: Lease | None = None
        self.lock_calls = LockCalls(limits.lock_threads_max, name)
        self.reports: dict[int, LoadReport] = {}
        # Told of each partition once it serves here (inter-stamp replication's shippers,
        # partition_layer/geo_shipping.py); None: nobody is.
        self.on_loaded: Callable[[RangePartition], None] | None = None
        self._loading: dict[int, _Load] = {}
        self._unloading: dict[RangePartition, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # session ends, heartbeat drops
        # One per partition served: when it stops, forget it and release its lease.
        self._watchers: dict[RangePartition, asyncio.Task[None]] = {}
        # Partitions split or merged away by this process: never loaded here again.
        self.retired: set[int] = set()
        # Reported on every response batch of the Call streams (front ends throttle on it).
        self.pressure = PressureGauge(lambda: [p.stats for p in self.partitions.values()])
        self.split_merge = SplitMerge(self)

    def pressure_pb(self) -> pb.ServerPressure:
        queue_ops, p99_ms = self.pressure.read()
        return pb.ServerPressure(server=self.name, queue_ops=queue_ops, p99_ms=p99_ms)

    async def handle(self, request: pb.Request) -> pb.Response:
        """Run one data request. One refused NotOwner because its range is being split,
        merged or loaded here waits for that to end (at most `split_hold_ms`) and runs again
        where its key is served then: the range is unavailable for the split's (or the
        load's) own time, not that plus the client's map refresh and retry — a client sent
        here by a fresh map after a failover gets its answer as the load ends."""
        deadline = time.monotonic() + self.limits.split_hold_ms / 1000
        while True:
            response = await handle(request, self.find, self.limits)
            remaining = deadline - time.monotonic()
            if response.error != NotOwner.__name__ or remaining <= 0:
                return response
            key = route_key(request.account, request.pname)
            load = self._load_of(key)
            if load is not None:
                await asyncio.wait({load}, timeout=remaining)
            elif self.split_merge.hold.holds(key):
                await self.split_merge.hold.settled(remaining)
            else:
                return response

    def held(self, request: pb.Request) -> bool:
        """Whether the request's key is in a range being split, merged or loaded here."""
        key = route_key(request.account, request.pname)
        return self.split_merge.hold.holds(key) or self._load_of(key) is not None

    def _load_of(self, key: bytes) -> asyncio.Task[LoadReport] | None:
        """The load under way here of a partition whose range holds `key`, if any."""
        for load in self._loading.values():
            if load.key_range.contains(key):
                return load.task
        return None

    def find(self, key: bytes) -> RangePartition:
        held = ""
        for partition in self.partitions.values():
            if partition.range.contains(key):
                if partition.state == SERVING:
                    return partition
                held = f" (partition {partition.id} is {partition.state} here)"
        raise NotOwner(f"{self.name} serves no partition holding that key{held}")

    # ---- the session ------------------------------------------------------------------------

    def session_lost(self, session: Lease) -> None:
        """`session` ended (on the loop; ps_main.py's registration calls it): every
        ownership taken under it ends now — its partition stops, its load is cancelled, its
        lease is released. The partitions stopped claiming already (`Ownership.valid`)."""
        if self.session is session:
            self.session = None
        ended = [own for own in self.owned if own.session is session]
        if not ended:
            return
        log.warning("%s lost its session (token %d): %d partition(s) stop here", self.name,
                    session.token, len(ended))
        for own in ended:
            load = self._loading.get(own.partition_id)
            if load is not None:
                load.task.cancel()  # _load stops what it loaded and releases the lease
            self._spawn(self._end(own, "this server's session was lost"))

    async def _end(self, own: Ownership, why: str) -> None:
        if own.partition is not None:
            await own.partition.stop(why)
        await self.release(own)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def release(self, own: Ownership) -> None:
        """Release `own`'s lease (once; a failure is logged: the lease expires on its own)."""
        if own not in self.owned:
            return
        self.owned.discard(own)
        if self.leases.get(own.partition_id) is own:
            del self.leases[own.partition_id]
        try:
            await self.lock_calls.run(own.lease.release)
        except StampError as exc:
            log.warning("partition %d: releasing its lease: %s", own.partition_id, exc)

    # ---- load -------------------------------------------------------------------------------

    async def load(self, partition_id: int, key_range: keys.KeyRange,
                   create_if_missing: bool = False, acquired: Ownership | None = None,
                   parents: Sequence[RangePartition] = ()) -> LoadReport:
        """Load the partition here (idempotent). `acquired`: its ownership, taken beforehand
        (`acquire`: a split takes its children's before the parent stops admitting);
        `parents`: the ones it was split or merged from here (RangePartition.load)."""
        if partition_id in self.retired:
            raise PreconditionFailed(f"partition {partition_id} was split or merged away")
        current = self.partitions.get(partition_id)
        if current is not None and current.state == SERVING:
            return self.reports[partition_id]
        load = self._loading.get(partition_id)
        if load is None:
            task = asyncio.get_running_loop().create_task(
                self._load(partition_id, key_range, create_if_missing, acquired, parents))
            load = self._loading[partition_id] = _Load(task, key_range)
            task.add_done_callback(lambda _: self._loading.pop(partition_id, None))
        return await asyncio.shield(load.task)

    async def acquire(self, partition_id: int) -> Ownership:
        """The partition's ownership under the current session: losing its lease stops the
        partition it guards, losing the session ends it (`session_lost`). A lease another
        server holds is waited out for at most the rest of its time; still held then, its
        holder is live and the load fails, naming it (ownership.py `decide_wait`)."""
        session = self.session
        if session is None or not session.valid():
            raise Unavailable(f"{self.name} has no session: it loads nothing until it is "
                              f"registered again")
        loop = asyncio.get_running_loop()
        # The ownership, once made: set on the loop, read on the thread on_lost runs on.
        box: list[Ownership] = []

        def lost(_: Lease) -> None:  # on a thread of the lock client's (on_lost)
            faults.point("ps.lease_lost")  # a test delays noticing, to attack the fence
            partition = box[0].partition if box else None
            if partition is not None:
                loop.call_soon_threadsafe(
                    lambda: loop.create_task(partition.stop("its lease was lost")))

        name = lease_name(partition_id)
        ttl_s = self.limits.partition_lease_ttl_ms / 1000
        # Who holds it is asked alongside: a failover's load finds it held by the dead
        # server, and a lock-service round trip less before it may end that lease.
        # (A failed listing never loses a lease granted: return_exceptions.)
        lease, leases = await asyncio.gather(
            self.lock_calls.run(self.locks.acquire, name, ttl_s, 0.0, lost),
            self.lock_calls.run(self.locks.list_leases), return_exceptions=True)
        if isinstance(lease, BaseException):
            raise lease
        if lease is None:
            if isinstance(leases, BaseException):
                raise leases
            held = held_by(leases, name)
            if held is not None and orphaned(held) and await self._end_orphan(partition_id, held):
                held = None
            wait_s = decide_wait(held, self.limits.load_timeout_ms / 1000)
            lease = await self.lock_calls.run(self.locks.acquire, name, ttl_s, wait_s, lost)
            if lease is None:
                raise still_held(partition_id, held_by(
                    await self.lock_calls.run(self.locks.list_leases), name), wait_s)
        own = Ownership(partition_id, lease, session)
        box.append(own)
        self.owned.add(own)
        if not session.valid():  # lost while acquiring: session_lost may have missed it
            await self.release(own)
            raise Unavailable(f"{self.name} lost its session while acquiring partition "
                              f"{partition_id}")
        return own

    async def _end_orphan(self, partition_id: int, held: HeldBy) -> bool:
        """End the partition's lease, held by a server with no session left (ownership.py
        `orphaned`): whether that worked (if not, the load waits it out)."""
        try:
            await self.lock_calls.run(self.locks.end, held.token)
        except StampError as exc:
            log.warning("partition %d: ending the lease %s left (token %d): %s",
                        partition_id, held.holder, held.token, exc)
            return False
        log.info("partition %d: ended the lease of %s (token %d, %.2f s left): its session "
                 "has ended", partition_id, held.holder, held.token, held.expires_in_s)
        return True

    async def _load(self, partition_id: int, key_range: keys.KeyRange,
                    create_if_missing: bool, acquired: Ownership | None,
                    parents: Sequence[RangePartition]) -> LoadReport:
        own = acquired or await self.acquire(partition_id)
        loop = asyncio.get_running_loop()
        partition = RangePartition(partition_id, key_range, self.streams, self.limits,
                                   own.lease.token, own.valid)
        own.partition = partition
        partition.witness_channels = self.witness_channels
        try:
            report = await partition.load(create_if_missing, parents)
            await witness_replay.recover(partition)
        except BaseException:
            await partition.stop("load failed")
            await self.release(own)
            raise
        if not own.valid():
            await partition.stop("lease or session ran out during the load")
            await self.release(own)
            raise Unavailable(f"partition {partition_id}: the lease or the session ran out "
                              f"during the load")
        self.partitions[partition_id] = partition
        self.leases[partition_id] = own
        self.reports[partition_id] = report
        if self.on_loaded is not None:
            self.on_loaded(partition)
        watcher = loop.create_task(self._forget_when_stopped(partition))
        self._watchers[partition] = watcher
        watcher.add_done_callback(lambda _: self._watchers.pop(partition, None))
        return report

    async def _forget_when_stopped(self, partition: RangePartition) -> None:
        """Once `partition` stops (for any reason: unloaded, lease or session lost, its
        committer failed): wait for its tasks, forget it, release its lease so that the PM
        can have it loaded again at once (here, when it asks, or elsewhere)."""
        await partition.stopped.wait()
        await partition.closed()
        if self.partitions.get(partition.id) is partition:
            del self.partitions[partition.id]
            self.reports.pop(partition.id, None)
        own = self.leases.get(partition.id)
        if own is not None and own.lease.token == partition.epoch:
            await self.release(own)

    # ---- unload -----------------------------------------------------------------------------

    async def unload(self, partition_id: int) -> None:
        """Unload the partition (RangePartition.unload: settle, checkpoint, stop), and
        return once its lease is released. The unload runs in a task of its own: a caller
        that gives up (an RPC deadline) abandons the wait, never the unload, so no partition
        is left half unloaded with its lease renewed for ever."""
        partition = self.partitions.get(partition_id)
        if partition is None:
            return
        task = self._unloading.get(partition)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._unload(partition))
            self._unloading[partition] = task
            task.add_done_callback(lambda _: self._unloading.pop(partition, None))
        await asyncio.wait({task})  # cancelling this wait leaves the unload running
        watcher = self._watchers.get(partition)
        if watcher is not None:
            await asyncio.wait({watcher})  # the lease is released when Unload returns

    async def _unload(self, partition: RangePartition) -> None:
        """The unload, at most `unload_timeout_ms`: then, or on any error, the partition
        stops anyway (RangePartition.unload; its checkpoint is only a courtesy to the next
        owner)."""
        try:
            async with asyncio.timeout(self.limits.unload_timeout_ms / 1000):
                await partition.unload()
        except Exception as exc:  # whatever it was, the partition has stopped
            log.warning("partition %d: unload cut short (%r): stopped without it",
                        partition.id, exc)

    def drop_not_ours(self, partition_ids: Sequence[int]) -> None:
        """The PM's heartbeat answer says these partitions, reported serving here, are
        assigned elsewhere: unload each (in the background), so that its owner by the map
        can have its lease."""
        for partition_id in partition_ids:
            partition = self.partitions.get(partition_id)
            if partition is not None and partition.state == SERVING:
                log.warning("%s: partition %d is assigned to another server: unloading it",
                            self.name, partition_id)
                self._spawn(self.unload(partition_id))

    async def close(self) -> None:
        """A clean stop: every partition stops (each operation it holds is answered), its
        tasks end and its lease is released."""
        loading = [load.task for load in self._loading.values()]
        for task in loading:
            task.cancel()  # _load stops what it loaded and releases the lease
        if loading:
            await asyncio.gather(*loading, return_exceptions=True)
        for partition in list(self.partitions.values()):
            await partition.stop("server stopping")
        watchers = list(self._watchers.values())
        if watchers:
            await asyncio.gather(*watchers, return_exceptions=True)
        # Unloads and session ends under way: their partitions have stopped already.
        leftovers = [*self._tasks, *self._unloading.values()]
        for task in leftovers:
            task.cancel()
        if leftovers:
            await asyncio.gather(*leftovers, return_exceptions=True)
        for own in list(self.owned):
            await self.release(own)
        await self.witness_channels.close()
        self.lock_calls.close()

    def load_pb(self, address: str) -> pb.ServerLoad:
        reply = pb.ServerLoad(name=self.name, address=address)
        for partition in self.partitions.values():
            report = partition.load_report()
            low, high = partition.range.low, partition.range.high
            reply.partitions.append(pb.PartitionLoad(
                partition_id=partition.id, state=partition.state, epoch=partition.epoch,
                range=pb.KeyRange(low=low, high=high or b"", has_high=high is not None),
                # What the balancing policy reads (balance_policy.py): operations waiting
                # for the commit log, and where a split would halve the load or the data.
                queue_ops=report.get("queue_ops", len(partition.committer.queue)),
                samples=[pb.LoadSample(key=key, left=left, right=right, contained=contained)
                         for key, left, right, contained in report.get("samples", ())],
                size_split_key=report.get("size_split_key") or b"",
                requests_sampled=report.get("requests_sampled", 0),
                **geo_figures(partition),
                **{k: report[k] for k in ("ops_per_s", "bytes_per_s", "p50_ms", "p99_ms",
                                          "size_bytes", "memtable_bytes", "runs")}))
        for partition_id in self._loading:
            reply.partitions.append(pb.PartitionLoad(partition_id=partition_id,
                                                     state="loading"))
        return reply


def geo_figures(partition: RangePartition) -> dict[str, Any]:
    """PartitionLoad's inter-stamp replication fields (none when nothing ships)."""
    shipper = partition.shipper
    if shipper is None:
        return {}
    return {"geo": True, "geo_lag_ops": shipper.lag_ops(),
            "geo_synced_s": shipper.last_sync_s()}
