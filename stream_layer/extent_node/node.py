"""An extent node's behaviour, between the gRPC servicer (server.py) and the store (store.py):
the primary's append path, the secondary's forward path, and sealing with sync from peers.

As a primary it times every replica of every append it places (its own journal and each
secondary): one that misses the per-replica timeout, or lags its peers on the same appends
again and again, fails the append (replication.py), so a frozen or slow secondary, or this
node's own slow disk, is sealed away within a fraction of a second instead of stalling the
extent's writers (§2; issue 29).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import grpc

from common import faults, rpc
from common.checksums import verify
from common.clock import Clock, SystemClock
from common.config import ExtentNodeLimits
from common.errors import (
    ExtentFull,
    InvalidArgument,
    NotPrimary,
    ReplicationFailed,
    StampError,
    Unavailable,
)
from common.proto import extent_node_pb2 as pb
from common.proto import extent_node_pb2_grpc as pb_grpc
from stream_layer import framing
from stream_layer.extent_node.replica import Replica
from stream_layer.extent_node.replica_state import Write
from stream_layer.extent_node.replication import LOCAL, Forwarder, Lag, PrimaryPipeline
from stream_layer.extent_node.store import ExtentStore
from stream_layer.replica_timeout import AdaptiveTimeout

log = logging.getLogger(__name__)

# The replica watchdog looks this many times per shortest timeout: a late replica is found
# at most a quarter of that after its timeout.
WATCH_TICKS_PER_TIMEOUT = 4


def replica_timeout(limits: ExtentNodeLimits) -> AdaptiveTimeout:
    """A primary's timeout on each replica of its appends (its own journal included)."""
    return AdaptiveTimeout(limits.replica_timeout_min_ms / 1000,
                           limits.replica_timeout_max_ms / 1000,
                           limits.replica_timeout_multiple, limits.replica_timeout_bytes_per_s)


def replica_lag(limits: ExtentNodeLimits) -> Lag:
    """When a primary fails a replica (its own journal included) for lagging its peers."""
    return Lag(limits.replica_lag_min_ms / 1000, limits.replica_lag_ratio_min,
               limits.replica_lag_window_ms / 1000, limits.replica_lag_answers_min)


class ExtentNode:
    def __init__(self, address: str, store: ExtentStore, limits: ExtentNodeLimits,
                 clock: Clock | None = None) -> None:
        self.address = address
        self.store = store
        self.limits = limits
        self.clock = clock or SystemClock()
        self._pipelines: dict[int, PrimaryPipeline] = {}
        self._forwarders: dict[str, Forwarder] = {}
        self._channels = rpc.ChannelCache(limits.rpc_message_bytes_max)
        self.replica_timeout = replica_timeout(limits)
        self._watchdog: asyncio.Task[None] | None = None

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)
        for forwarder in self._forwarders.values():
            await forwarder.close()
        await self._channels.close()

    # ---- primary ----------------------------------------------------------------------------

    def validate_blocks(self, request: pb.AppendRequest) -> bytes:
        """Check limits and every block's CRC32C (before the journal); return the frames."""
        blocks = request.blocks
        if not blocks or len(blocks) > self.limits.append_blocks_max:
            raise InvalidArgument(f"an append carries 1..{self.limits.append_blocks_max} "
                                  f"blocks, not {len(blocks)}")
        total = 0
        for index, block in enumerate(blocks):
            if len(block.data) > self.limits.block_bytes_max:
                raise InvalidArgument(f"block {index} has {len(block.data)} bytes; the limit "
                                      f"is {self.limits.block_bytes_max}")
            verify(block.data, block.crc, f"block {index} of an append to extent "
                   f"{request.extent_id}")
            total += len(block.data)
        if total > self.limits.append_bytes_max:
            raise InvalidArgument(f"an append carries at most {self.limits.append_bytes_max} "
                                  f"bytes, not {total}")
        return framing.encode_frames([(b.data, b.crc) for b in blocks])

    def start_appends(self, extent_id: int, appends: Sequence[bytes]
                      ) -> tuple[asyncio.Future[tuple[int, int]] | None,
                                 list[tuple[int, int] | StampError]]:
        """Place appends (each one's frames) on this primary, in order, as ONE replicated
        write: one journal record, one forwarded entry per secondary, one future.

        Returns (future, outcomes): an outcome per append, its (offset, end) or the error that
        kept it out (ExtentFull: it would not fit, while later smaller ones may); the future
        resolves once every placed append is durable on all replicas (None if none was
        placed). Raises when the extent takes no append at all. Synchronous up to the
        returned future, so appends on one extent are placed in the order this is called.
        Placing a group as one write costs the same as placing one append: this is what
        lets a message of many small appends cost little more than one.
        """
        replica = self.store.get(extent_id)
        if not replica.is_primary(self.address):
            raise NotPrimary(f"extent {extent_id}: this node ({self.address}) is not its "
                             f"primary ({replica.meta.replicas[0]})")
        pipeline = self._pipeline(replica)
        if pipeline.failed is not None:
            raise pipeline.failure(f"extent {extent_id}: replication failed earlier "
                                   f"({pipeline.failed}); seal it")
        start = end = replica.accepted_end
        outcomes: list[tuple[int, int] | StampError] = []
        placed: list[bytes] = []
        for frames in appends:
            if end + len(frames) > self.limits.extent_bytes_max:
                outcomes.append(ExtentFull(f"extent {extent_id} would grow past "
                                           f"{self.limits.extent_bytes_max} bytes"))
                continue
            outcomes.append((end, end + len(frames)))
            placed.append(frames)
            end += len(frames)
        if not placed:
            return None, outcomes
        frames = placed[0] if len(placed) == 1 else b"".join(placed)
        self.store.check_append(extent_id, start, len(frames))
        acked = pipeline.submit(start, end, self.clock.monotonic())
        self._watch_replicas()
        # Forward first: the forwarders' tasks then run before the journal's, so the bytes
        # are on their way to the secondaries before a small journal write blocks the loop.
        for secondary in replica.secondaries():
            pipeline.sent[secondary] = end
            self._forwarder(secondary).send(extent_id, start, frames)
        self.store.accept_append(extent_id, start, frames, on_durable=lambda: pipeline.on_durable(
            LOCAL, end, self.clock.monotonic()))
        return acked, outcomes

    async def create(self, extent_id: int, replicas: list[str]) -> None:
        """Create a replica; as its primary, open the forward streams to its secondaries now
        (extents are created ahead of use, as spares: the first append then finds them up).
        A restarted node has no open replica to warm: recovery leaves them UNPROVEN."""
        self._warm_forwarders_of(await self.store.create(extent_id, replicas))

    def _warm_forwarders_of(self, replica: Replica) -> None:
        if replica.is_primary(self.address):
            for secondary in replica.secondaries():
                self._forwarder(secondary).warm()

    def _pipeline(self, replica: Replica) -> PrimaryPipeline:
        pipeline = self._pipelines.get(replica.extent_id)
        if pipeline is None:
            pipeline = PrimaryPipeline(replica.extent_id, replica.secondaries(),
                                       replica.durable_end, self._observe_replica,
                                       self.replica_timeout.timeout_s,
                                       self.limits.replica_late_appends_min, self.address,
                                       replica_lag(self.limits))
            self._pipelines[replica.extent_id] = pipeline
        return pipeline

    def _observe_replica(self, who: str, seconds: float) -> None:
        self.replica_timeout.observe(who or self.address, seconds)

    def _watch_replicas(self) -> None:
        """Start the replica watchdog unless it runs (one per node, not a timer per append:
        this is the hot path); it stops when nothing is in flight."""
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(
                self._watch_replicas_until_idle(), name="replica-watchdog")

    async def _watch_replicas_until_idle(self) -> None:
        tick_s = self.replica_timeout.min_s / WATCH_TICKS_PER_TIMEOUT
        try:
            while any(p.inflight and p.failed is None for p in self._pipelines.values()):
                await asyncio.sleep(tick_s)
                self.fail_late_replicas()
        finally:
            self._watchdog = None

    def _silent_timeout_s(self, nbytes: int) -> float:
        """How long a replica may leave the oldest append in flight without an answer: the
        per-replica timeout, at least `replica_silent_timeout_min_ms` (config.py)."""
        return max(self.replica_timeout.timeout_s(nbytes),
                   self.limits.replica_silent_timeout_min_ms / 1000)

    def fail_late_replicas(self) -> None:
        """Fail every append a replica has kept waiting past its timeout: this node's own
        journal fails the pipeline; a secondary loses its forward stream, which fails every
        pipeline waiting on it at once (they would all time out anyway)."""
        now = self.clock.monotonic()
        for pipeline in list(self._pipelines.values()):
            for who in pipeline.overdue(now, self._silent_timeout_s):
                error = ReplicationFailed(
                    f"extent {pipeline.extent_id}: replica {who or self.address} said nothing "
                    f"within the per-replica timeout ({self._silent_timeout_s(0) * 1000:.0f} "
                    f"ms and up): a silent replica is a failed one; seal it")
                log.warning("%s", error)
                if who == LOCAL:
                    pipeline.fail(error, late=LOCAL)
                elif who in self._forwarders:
                    self._forwarders[who].abandon(error)

    def _forwarder(self, address: str) -> Forwarder:
        forwarder = self._forwarders.get(address)
        if forwarder is None:
            forwarder = Forwarder(address, self.limits, self._channels, self._on_forward_ack,
                                  self._on_forward_broken)
            self._forwarders[address] = forwarder
        return forwarder

    def _on_forward_ack(self, secondary: str, ack: pb.ForwardAck) -> None:
        pipeline = self._pipelines.get(ack.extent_id)
        if pipeline is None:
            return
        if ack.error_kind:
            pipeline.fail(rpc.error_from_name(
                ack.error_kind, f"secondary {secondary}: {ack.error_message}"))
        else:
            pipeline.on_durable(secondary, ack.durable_end, self.clock.monotonic())

    def _on_forward_broken(self, secondary: str, error: StampError, late: bool) -> None:
        for pipeline in self._pipelines.values():
            if pipeline.outstanding_to(secondary):
                pipeline.fail(error, late=secondary if late else None)

    def forget_pipeline(self, extent_id: int, error: StampError) -> None:
        """Fail what is in flight on an extent that is being sealed or deleted."""
        pipeline = self._pipelines.pop(extent_id, None)
        if pipeline is not None:
            pipeline.fail(error)

    # ---- secondary --------------------------------------------------------------------------

    def accept_forward(self, entry: pb.ForwardEntry, on_durable: Callable[[], None]) -> None:
        """A secondary takes a forwarded write: at its end, checksums verified first;
        `on_durable` runs when it is durable."""
        framing.verify_frames(entry.frames, f"forward to extent {entry.extent_id} at "
                              f"{entry.offset}")
        self.store.accept_append(entry.extent_id, entry.offset, entry.frames, on_durable,
                                 Write.FORWARD)

    # ---- sealing ----------------------------------------------------------------------------

    async def fence(self, extent_id: int) -> tuple[int, bool]:
        await faults.apoint("en.fence.start")  # a test holds a rollover's seal up here
        self.forget_pipeline(extent_id, ReplicationFailed(f"extent {extent_id} is being sealed"))
        return await self.store.fence(extent_id)

    async def seal(self, extent_id: int, length: int, sources: Sequence[str]) -> int:
        await faults.apoint("en.seal.start")
        self.forget_pipeline(extent_id, ReplicationFailed(f"extent {extent_id} is being sealed"))

        async def fetch_missing(replica: Replica, target: int) -> None:
            await self._sync_from_peers(replica, target, sources)
        return await self.store.seal(extent_id, length, fetch_missing)

    async def _sync_from_peers(self, replica: Replica, target: int,
                               sources: Sequence[str]) -> None:
        """Bring `replica` to `target` bytes from the first peer that has them (SyncInit, then
        SyncReplicate streamed in batches)."""
        peers = [s for s in sources if s != self.address]
        if not peers:
            raise Unavailable(f"extent {replica.extent_id}: at {replica.durable_end}, needs "
                              f"{target}, and no peer to sync from")
        for peer in peers:
            start = replica.durable_end
            try:
                stub = pb_grpc.ExtentNodeStub(self._channels.get(peer))
                init = await stub.SyncInit(pb.SyncInitRequest(
                    extent_id=replica.extent_id, from_offset=start, to_offset=target),
                    timeout=self.limits.read_deadline_ms / 1000.0)
                if init.available_end < target:
                    log.info("extent %d: peer %s has only %d of %d", replica.extent_id,
                             peer, init.available_end, target)
                    continue
                last: asyncio.Future[None] | None = None
                async for chunk in stub.SyncReplicate(pb.SyncReplicateRequest(
                        extent_id=replica.extent_id, from_offset=start, to_offset=target)):
                    last = self.store.accept_synced(replica, chunk.offset, chunk.frames)
                    await faults.apoint("en.sync.after_chunk")
                if last is not None:
                    await last
                if replica.durable_end == target:
                    log.info("extent %d: synced [%d, %d) from %s", replica.extent_id, start,
                             target, peer)
                    return
            except (grpc.RpcError, StampError) as exc:
                log.warning("extent %d: sync from %s failed: %s", replica.extent_id, peer, exc)
        raise Unavailable(f"extent {replica.extent_id}: no peer of {peers} could supply "
                          f"[{replica.durable_end}, {target})")
