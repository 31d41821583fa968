"""The primary's side of the append protocol (§2 "Append protocol").

Contract:
- The primary hands out offsets, writes to its own journal, and forwards (offset, frames) to
  every secondary. An append is acknowledged only when this replica AND every secondary have
  it durable; because each of them makes appends durable in offset order, "durable up to X
  everywhere" acknowledges exactly the appends ending at or below X, in offset order.
- Any replica failure fails the append, every append in flight behind it, and every later
  append on that extent (sticky): the extent can no longer promise three durable copies, and
  the client must seal it and continue on a new one.
- A replica that has not made an append durable within the per-replica timeout
  (replica_timeout.py) has failed it (§2: a slow or frozen node is a failed one): `overdue`
  names such replicas, and the node fails the pipeline (its own journal) or drops the
  secondary's forward stream, which fails every pipeline waiting on that secondary at once.
  A replica that makes an append durable only past its timeout (too late for the watchdog
  to see: this node's own loop was blocked by its slow disk, say) fails the pipeline too,
  once what is durable everywhere is acknowledged. The pipeline reports each replica's
  latency for each append, so the timeout adapts.
- A replica that lags its peers (`Lag`) fails the pipeline too, however long the timeout:
  the last replica to make appends durable, far behind the others and a multiple of their
  latency, several answers in a row. The timeout is absolute (a multiple of a p99, up to 500
  ms), so on a loaded stamp a +200 ms disk is never late; it is always behind its peers,
  while a busy machine slows all three alike. An answer that kept pace with the peers (or
  was fast) ends the run; one that says nothing either way (its peers' acks still queued
  behind this node's own blocked loop) leaves it.
- Forwarding is one bidi stream per secondary shared by all extents; whatever is queued when
  the stream is free goes in one message (bounded), not one RPC per block.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from common import faults, rpc, tracing
from common.config import ExtentNodeLimits
from common.errors import ReplicationFailed, StampError, Unavailable
from common.proto import extent_node_pb2 as pb
from common.proto import extent_node_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

LOCAL = ""  # this replica, in a pipeline's durability map


@dataclass
class _Inflight:
    offset: int
    end: int
    future: asyncio.Future[tuple[int, int]]
    sent_at: float
    replicas_durable: int = 0  # how many replicas have it durable
    last_durable_at: float = 0.0  # when the latest of those did


@dataclass(frozen=True)
class Lag:
    """When a replica lags its peers (config.py `replica_lag_*`): it made appends durable
    last, at least `min_s` after the others and at `ratio_min` times their latency, on
    `answers_min` of its answers in a row, each within `window_s` of the one before."""

    min_s: float
    ratio_min: float
    window_s: float
    answers_min: int


@dataclass
class _LagRun:
    count: int = 0
    last_at: float = 0.0


Observer = Callable[[str, float], None]  # (replica, seconds from submit to durable there)


def _ignore(who: str, seconds: float) -> None:
    return None


class PrimaryPipeline:
    """The appends in flight on one extent at its primary, and how far each replica has them.
    Times are the caller's (its injected clock): `now` arguments, in seconds."""

    def __init__(self, extent_id: int, secondaries: list[str], start: int,
                 observe: Observer = _ignore,
                 timeout_s: Callable[[int], float] | None = None,
                 late_appends_min: int = 1, address: str = LOCAL,
                 lag: Lag | None = None) -> None:
        self.extent_id = extent_id
        self.address = address  # this replica's, named in errors as the late one
        self.durable: dict[str, int] = {LOCAL: start, **{s: start for s in secondaries}}
        self.sent: dict[str, int] = {s: start for s in secondaries}
        self.inflight: deque[_Inflight] = deque()
        self.failed: StampError | None = None
        # The replica (address) whose per-replica timeout failed the pipeline ("": none did).
        self.late_replica = ""
        self._observe = observe
        self._timeout_s = timeout_s
        # Per replica, the absolute index (counting the acknowledged ones) of the first
        # append in flight not yet durable there: each append is timed once per replica.
        self._popped = 0
        self._covered: dict[str, int] = dict.fromkeys(self.durable, 0)
        # Per replica, how many of its acknowledgements in a row came past the timeout: one
        # late answer is a busy machine, `late_appends_min` in a row a slow replica.
        self._late_appends_min = late_appends_min
        self._late_streak: dict[str, int] = dict.fromkeys(self.durable, 0)
        self._lag = lag if len(self.durable) > 1 else None  # one replica has no peers
        self._lag_runs: dict[str, _LagRun] = {who: _LagRun() for who in self.durable}

    def submit(self, offset: int, end: int, now: float = 0.0) -> asyncio.Future[tuple[int, int]]:
        """Track an append placed at [offset, end); its future resolves to (offset, end)."""
        if self.failed is not None:
            raise self.failure(f"extent {self.extent_id}: replication already failed "
                               f"({self.failed}); seal it")
        assert not self.inflight or self.inflight[-1].end == offset, "appends out of order"
        future: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        self.inflight.append(_Inflight(offset, end, future, now))
        return future

    def on_durable(self, who: str, end: int, now: float = 0.0) -> None:
        if end <= self.durable.get(who, end):
            return
        self.durable[who] = end
        index = max(self._covered.get(who, 0) - self._popped, 0)
        late = 0.0
        replicas = len(self.durable)
        lag = self._lag
        # Of the appends `who` completes (the last replica to make them durable): the most
        # it lagged its peers on one it took `ratio_min` times as long on (-1: none), and
        # whether it kept pace on one (within `min_s` of the others).
        behind, paced = -1.0, False
        slowest = 0.0
        while index < len(self.inflight) and self.inflight[index].end <= end:
            item = self.inflight[index]
            latency = now - item.sent_at
            self._observe(who, latency)
            if self._timeout_s is not None and \
                    latency > self._timeout_s(item.end - item.offset):
                late = max(late, latency)
            item.replicas_durable += 1
            if lag is not None and item.replicas_durable == replicas:
                gap = now - item.last_durable_at
                if gap < lag.min_s:
                    paced = True
                elif latency >= lag.ratio_min * (item.last_durable_at - item.sent_at):
                    behind = max(behind, gap)
            item.last_durable_at = now
            slowest = max(slowest, latency)
            index += 1
        self._covered[who] = self._popped + index
        lagging = lag is not None and self._note_lag(who, behind, paced, slowest, now)
        self._late_streak[who] = self._late_streak.get(who, 0) + 1 if late else 0
        acked = min(self.durable.values())
        while self.inflight and self.inflight[0].end <= acked:
            item = self.inflight.popleft()
            self._popped += 1
            if not item.future.done():
                item.future.set_result((item.offset, item.end))
        if late and self._late_streak[who] >= self._late_appends_min:
            # Durable, but past its timeout again and again: a replica whose lateness the
            # watchdog could not see (this node's own loop blocked on a slow disk, say) is
            # slow all the same. What is durable everywhere was acknowledged above; the rest
            # fails: seal it.
            self.fail(ReplicationFailed(
                f"replica {who or 'primary'} took {late * 1000:.0f} ms, past its per-replica "
                f"timeout, {self._late_streak[who]} appends in a row"), late=who)
        elif lagging:
            # Durable, but far behind its peers again and again: a slow replica under the
            # timeout (a slow disk on a loaded stamp). As above: seal it away.
            self.fail(ReplicationFailed(
                f"replica {who or 'primary'} lagged its peers by {behind * 1000:.0f} ms "
                f"({slowest * 1000:.0f} ms), {self._lag_runs[who].count} answers in a row"),
                late=who)

    def _note_lag(self, who: str, behind: float, paced: bool, slowest: float,
                  now: float) -> bool:
        """Count an answer of `who` in its run of lagging ones (on_durable's `behind` and
        `paced`; `slowest`: its latency on the oldest append it covered); True once the run
        is long enough to fail it."""
        lag = self._lag
        assert lag is not None
        run = self._lag_runs.setdefault(who, _LagRun())
        if behind >= lag.min_s:
            run.count = run.count + 1 if now - run.last_at <= lag.window_s else 1
            run.last_at = now
        elif paced or slowest < lag.min_s:
            run.count = 0  # kept pace with its peers, or fast: not a slow replica
        return run.count >= lag.answers_min

    def overdue(self, now: float, timeout_s: Callable[[int], float]) -> list[str]:
        """The replicas (LOCAL: this one) that have not made the oldest append in flight
        durable within `timeout_s(its bytes)` of its submission; [] once failed."""
        if self.failed is not None or not self.inflight:
            return []
        oldest = self.inflight[0]
        if now - oldest.sent_at <= timeout_s(oldest.end - oldest.offset):
            return []
        return [who for who, durable in self.durable.items() if durable < oldest.end]

    def outstanding_to(self, secondary: str) -> bool:
        return self.sent.get(secondary, 0) > self.durable.get(secondary, 0)

    def fail(self, error: StampError, late: str | None = None) -> None:
        """Fail every append in flight and every later one. `late`: the replica (LOCAL:
        this one) whose per-replica timeout is the cause, if it is; the writer names it to
        the stream manager when it asks for the seal."""
        if self.failed is None:
            log.warning("extent %d: replication failed: %s", self.extent_id, error)
            self.failed = error
            if late is not None:
                self.late_replica = late or self.address
        while self.inflight:
            item = self.inflight.popleft()
            if not item.future.done():
                item.future.set_exception(self.failure(
                    f"extent {self.extent_id}: append at {item.offset} not replicated: {error}"))

    def failure(self, message: str) -> ReplicationFailed:
        """The error an append of this failed pipeline gets, naming the late replica."""
        error = ReplicationFailed(message)
        error.late_replica = self.late_replica
        return error


AckHandler = Callable[[str, pb.ForwardAck], None]
# (secondary, error, late): `late` when the secondary was given up for missing its timeout.
BrokenHandler = Callable[[str, StampError, bool], None]


class Forwarder:
    """The forwarding stream from this primary to one secondary, for all extents."""

    def __init__(self, address: str, limits: ExtentNodeLimits, channels: rpc.ChannelCache,
                 on_ack: AckHandler, on_broken: BrokenHandler) -> None:
        self.address = address
        self.limits = limits
        self._channels = channels
        self._on_ack = on_ack
        self._on_broken = on_broken
        # (extent id, offset, frames, traceparent) not yet sent, as plain tuples: each entry
        # is built once, in place in the batch message (appending a built entry would copy
        # its frames again). The traceparent is the primary's "en.append" (tracing on).
        self._queue: deque[tuple[int, int, bytes, str]] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._rewarm = rpc.Rewarm(self.warm)
        # Named per destination, so a test can hold back one secondary and not the other.
        self._before_send = f"en.forward.before_send@{address}"

    def send(self, extent_id: int, offset: int, frames: bytes) -> None:
        """Queue an entry; tracing on, it carries the current span's context (the primary's
        "en.append": the secondary's "en.replica_write" goes under it, common/tracing.py)."""
        self._queue.append((extent_id, offset, frames,
                            tracing.traceparent() if tracing.enabled else ""))
        self._wake.set()
        self.warm()

    def warm(self) -> None:
        """Open the stream now, ahead of the first entry: an extent created here as primary
        will forward soon, and connecting then would add milliseconds to its first append."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"forward-{self.address}")

    async def close(self) -> None:
        self._rewarm.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def abandon(self, error: StampError) -> None:
        """Give the secondary up as failed (it missed its per-replica timeout): drop the
        stream and what is queued for it, and fail every pipeline waiting on it. The next
        entry opens a fresh stream (a new extent there is unlikely: placement avoids it)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()  # its cancellation cancels the call; it reports nothing itself
        self._queue.clear()
        self._on_broken(self.address, error, True)

    async def _run(self) -> None:
        stub = pb_grpc.ExtentNodeStub(self._channels.get(self.address))
        call = stub.ForwardStream()
        reader = asyncio.get_running_loop().create_task(self._read_acks(call))
        try:
            # An empty first message sets the stream up end to end before any entry needs it.
            await call.write(pb.ForwardBatch())
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._queue:
                    batch = pb.ForwardBatch()
                    size = 0
                    while self._queue and (size == 0 or size + len(self._queue[0][2])
                                           <= self.limits.forward_batch_bytes_max):
                        extent_id, offset, frames, traceparent = self._queue.popleft()
                        size += len(frames)
                        entry = batch.entries.add(extent_id=extent_id, offset=offset,
                                                  frames=frames)
                        if traceparent:
                            entry.traceparent = traceparent
                    await faults.apoint(self._before_send)
                    await call.write(batch)
                    await faults.apoint("en.forward.after_send")
                if reader.done():
                    break
        except asyncio.CancelledError:
            call.cancel()
            reader.cancel()
            raise
        except Exception as exc:
            # Any failure of the stream, whatever gRPC raises for it (writing to a finished
            # call raises InvalidStateError, not RpcError): the forwarder must never die
            # with entries queued, or appends would wait for acks forever.
            error = exc if isinstance(exc, StampError) else Unavailable(
                f"forwarding to {self.address} failed: {exc!r}")
            self._broken(error, call, reader)
            return
        self._broken(Unavailable(f"forward stream to {self.address} ended"), call, reader)

    async def _read_acks(self, call: grpc.aio.StreamStreamCall) -> None:
        try:
            async for acks in call:
                self._rewarm.answered()
                for ack in acks.acks:
                    self._on_ack(self.address, ack)
        except grpc.RpcError as exc:
            log.warning("forward stream to %s broke: %s", self.address, exc.code())
        except Exception:
            log.exception("forward stream to %s: reading acks failed", self.address)
        finally:
            self._wake.set()  # let the writer notice the stream is gone

    def _broken(self, error: StampError, call: grpc.aio.StreamStreamCall,
                reader: asyncio.Task[None]) -> None:
        call.cancel()
        reader.cancel()
        self._queue.clear()
        self._task = None
        self._on_broken(self.address, error, False)
        self._rewarm.broken()
