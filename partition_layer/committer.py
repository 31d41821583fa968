"""Group commit for one range partition, pipelined (§4 "Writes").

Operations queue up; the committer takes as many as fit in one commit-log block, decides each
in order against the partition's rows plus the effects of the blocks still in flight
(operations.py), gives each mutating one the next LSN, and appends the block. Up to
`commit_pipeline_depth` blocks are in flight at once, so the log's latency does not cap the
rate at one block per round trip.

Contracts:
- An operation is answered (and its effects become visible to reads) only when its block and
  every block before it are durable: `_finish` runs strictly in block order. So no answer ever
  depends on a write that might still be lost.
- If a block's append fails, nobody can tell whether it was written: the partition stops
  serving, and every operation of that block and of the blocks behind it fails with
  Unavailable (ambiguous). The next owner's replay decides (commit_log.Replayer: a block whose
  predecessor is missing is junk and is never applied).
- `drain()` holds new blocks back until every one in flight has finished: a checkpoint
  freezes the memtable only then, so the replay point it records is at or after every block
  that holds an operation it does not contain (blocks sent later land later in the stream).
- An exception nobody expected (a bug) in the loop or in a block's finish does not leave the
  partition serving without a committer: the partition stops (its lease goes, the PM has it
  loaded again) and every operation held is answered: NotOwner if its block was never sent,
  Unavailable (ambiguous) if it was. `abort()` (the partition stopping) cancels the appends
  in flight and answers their operations Unavailable; `closed()` waits until every task of
  the committer has ended, so a stopping process leaves none behind.
- The committer touches its partition only through `CommitSite`.
- CURP (speculation.py): an operation whose front end sent a version hint may be answered
  as soon as it is decided (a `Speculative` result), before its block is durable; its
  `Pending.answer` at `_finish` is then a no-op, and a failed block leaves its fate to the
  witnesses and the next owner.
- The latency it records for the partition's load figures (the PM's, and the pressure front
  ends throttle on) leaves out the time the commit log spent sealing a failed extent away
  (`AsyncStream.stalled_s`): a gray failure sealed away is not load.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from common import faults, tracing
from common.config import PartitionLimits
from common.errors import NotOwner, StampError, Throttled, Unavailable
from partition_layer import commit_spans
from partition_layer.commit_log import CommitBatch, CommitOp, encode_batch
from partition_layer.linger import Linger
from partition_layer.operations import Operation, Overlay, Replicated
from partition_layer.queued_op import Done, Outcome, Pending
from partition_layer.rows import Row, encode_row
from partition_layer.speculation import Speculation, early_version, replay_version, replaying
from partition_layer.stats import LoadStats
from stream_layer.client import AsyncStream
from stream_layer.framing import Location

log = logging.getLogger(__name__)

# How long a partition remembers how many operations it had outstanding (linger.py).
LINGER_WINDOW_S = 0.2


class CommitSite(Protocol):
    """What the group committer needs of its partition, and all it touches (RangePartition
    is one; tests/unit/test_pl_committer.py has a small one on in-memory streams)."""

    id: int
    epoch: int  # written into every block: replay tells owners apart
    limits: PartitionLimits
    streams: Mapping[str, AsyncStream]  # "log": the commit log it appends to
    applied_lsn: int  # read at start: the first block takes the next LSN
    version_floor: int  # read at start: the highest row version applied (`_floor`)
    last_commit: Location | None  # set to each durable block: a checkpoint's replay point
    log_bytes: int  # grown by each durable block: what a reload would replay
    stats: LoadStats
    shipper: Any  # a GeoShipper told each durable block's operations, or None (issue 30)

    def committing(self) -> bool:
        """Serving or unloading: the loop goes on taking operations."""

    def gone(self) -> bool:
        """Stopped: a block still in flight is answered Unavailable, not applied."""

    def lease_valid(self) -> bool: ...

    def row_in_memory(self, key: bytes) -> tuple[bool, Row | None]: ...

    async def row_from_checkpoints(self, key: bytes, remember_absent: bool = True
                                   ) -> Row | None: ...

    def apply(self, op: CommitOp) -> None:
        """Make a durable operation visible; called strictly in LSN order."""

    def wake_logs(self, ops: Iterable[Operation]) -> None: ...

    async def wait_for_room(self) -> None:
        """Back-pressure from the checkpointer: return once the memtable may grow."""

    def checkpoint_if_due(self) -> None: ...

    async def stop(self, reason: str) -> None:
        """Stop serving; it calls `abort()` and `fail_queued()` back."""


class GroupCommitter:
    def __init__(self, site: CommitSite) -> None:
        self.p = site
        self.limits = site.limits
        self.queue: deque[Pending] = deque()
        self._wake = asyncio.Event()
        # key -> (lsn, row or None when deleted): what blocks in flight will have written.
        self._inflight_rows: dict[bytes, tuple[int, Row | None]] = {}
        self.inflight = 0
        self._inflight_ops = 0  # operations in the blocks in flight
        self._linger = Linger(site.limits.commit_linger_ms / 1000, LINGER_WINDOW_S)
        # Operations taken off the queue whose block is not yet started (`_start` may await
        # rows from the checkpoints): neither queued nor in flight, but not settled either.
        self.deciding = 0
        self.next_lsn = 0
        self._floor = 0  # the highest row version decided (`_start`: ETags never repeat)
        self._tail: asyncio.Task[None] | None = None
        self._paused = False
        self._task: asyncio.Task[None] | None = None
        self._appends: set[asyncio.Task[Any]] = set()  # sent, not yet finished: abort() ends them
        self.speculation = Speculation()  # early answers' rows, and waits for durability
        self._hinted = 0  # queued operations with a version hint (`_commit_until_stopped`)

    def start(self) -> None:
        self.next_lsn, self._floor = self.p.applied_lsn + 1, self.p.version_floor
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def submit(self, op: Operation, nbytes: int, hint: int = 0) -> Any:
        return await self.submit_nowait(op, nbytes, hint)

    def submit_nowait(self, op: Operation, nbytes: int, hint: int = 0) -> asyncio.Future[Any]:
        """Queue `op`; the future gives its result once its commit is durable (or, with a
        version `hint`, maybe a `Speculative` one as soon as it is decided)."""
        future = asyncio.get_running_loop().create_future()
        self._enqueue(Pending(op, nbytes, time.monotonic(), future=future, hint=hint,
                              recovered=replaying.get()))
        return future

    def submit_with(self, op: Operation, nbytes: int, done: Done, hint: int = 0) -> None:
        """Queue `op`; `done(result, None)` once its commit is durable (or early, as
        `submit_nowait`), or `done(None, error)`. `done` runs inside the committer: it must
        be quick and must not raise."""
        self._enqueue(Pending(op, nbytes, time.monotonic(), done=done, hint=hint,
                              recovered=replaying.get()))

    def _enqueue(self, pending: Pending) -> None:
        if len(self.queue) >= self.limits.pending_ops_max:
            raise Throttled(f"partition {self.p.id} has {len(self.queue)} operations queued",
                            retry_after_s=0.05)
        if tracing.enabled:
            pending.span = commit_spans.begin(self.p.id, pending.op)
        self.queue.append(pending)
        self._hinted += pending.hint > 0
        self._linger.observe(len(self.queue) + self.deciding + self._inflight_ops,
                             pending.started)
        self._wake.set()

    def idle(self) -> bool:
        """Nothing queued, being decided or in flight: every operation taken is answered
        (a split or merge checkpoints after this and then writes its intent: an operation
        committed later would land past the checkpoint and be lost to the children)."""
        return not self.queue and not self.deciding and not self.inflight

    async def settle(self) -> None:
        """Until every queued operation is answered (an unload hands over nothing pending)."""
        while not self.idle() and self.p.lease_valid():
            if self._tail is not None and not self._tail.done():
                await asyncio.shield(self._tail)
            else:
                await asyncio.sleep(0.001)  # the loop has yet to take the queue (or waits for room)

    async def drain(self) -> None:
        """Hold new blocks back and wait until every block in flight has finished."""
        self._paused = True
        while self._tail is not None and not self._tail.done():
            await asyncio.shield(self._tail)

    def resume(self) -> None:
        self._paused = False
        self._wake.set()

    def fail_queued(self, reason: str) -> None:
        while self.queue:
            self.queue.popleft().answer(None, NotOwner(f"partition {self.p.id}: {reason}"))
        self._hinted = 0
        self._wake.set()

    def abort(self) -> None:
        """The partition stops: end the loop and the appends in flight (their operations
        hear Unavailable from `_finish`: nobody knows whether the block landed)."""
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
        for append in self._appends:
            append.cancel()
        self.speculation.fail(Unavailable(f"partition {self.p.id} stopped: a write answered "
                                          "early may or may not be durable"))

    async def closed(self) -> None:
        """Until every task of this committer has ended (after `abort()`)."""
        tasks = [t for t in (self._task, self._tail) if t is not None]
        if tasks:
            await asyncio.gather(*tasks, *self._appends, return_exceptions=True)

    # ---- the loop ---------------------------------------------------------------------------

    async def _loop(self) -> None:
        try:
            await self._commit_until_stopped()
        except Exception as exc:
            # A bug deciding a batch, or a checkpoint read that failed. Without its
            # committer the partition would go on taking operations and never answer
            # them: stop it instead, so the lease goes and the PM has it loaded afresh.
            log.exception("partition %d: the group committer failed", self.p.id)
            await self.p.stop(f"its group committer failed: {type(exc).__name__}: {exc}")

    async def _commit_until_stopped(self) -> None:
        while self.p.committing():
            # A fuller block is waited for unless a hinted op is queued: CURP answers it once
            # decided, so a wait for the blocks in flight would be its whole latency.
            if (not self.queue or self._paused
                    or self.inflight >= self.limits.commit_pipeline_depth
                    or (self.inflight and not self._hinted
                        and len(self.queue) < self.limits.commit_batch_ops_min)):
                self._wake.clear()
                await self._wake.wait()
                continue
            if not self.inflight and not self._hinted:
                wait_s = self._linger.wait_s(len(self.queue), self.limits.commit_batch_ops_max,
                                             time.monotonic())
                if wait_s > 0:
                    # A short block with the pipeline empty: the writers just answered may
                    # be on their way back (linger.py). Any arrival wakes the loop to look again.
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait_s):
                            await self._wake.wait()
                    continue
            await self.p.wait_for_room()
            if self._paused or not self.queue:
                continue
            self._linger.sent()
            batch = self._take_batch()
            self.deciding += len(batch)
            try:
                await self._start(batch)
            except BaseException:
                # Stopped (cancelled) while reading rows for the batch, or a bug in deciding
                # it: nothing of it was appended (_start creates the append last, with no
                # await after it), so "not the owner" is the truth and a retry is safe.
                for pending in batch:
                    pending.answer(None, NotOwner(f"partition {self.p.id} stopped serving"))
                raise
            finally:
                self.deciding -= len(batch)
            # Let the block's append go out before deciding the next one: its round trip
            # then overlaps with this process's work on the operations still queued.
            await asyncio.sleep(0)

    def _take_batch(self) -> list[Pending]:
        batch: list[Pending] = []
        size = 0
        while self.queue and len(batch) < self.limits.commit_batch_ops_max:
            nbytes = self.queue[0].nbytes
            if batch and size + nbytes > self.limits.commit_batch_bytes_max:
                break
            batch.append(pending := self.queue.popleft())
            self._hinted -= pending.hint > 0
            size += nbytes
        return batch

    async def _start(self, batch: list[Pending]) -> None:
        found = {}
        for key in {key for pending in batch for key in pending.op.reads()}:
            inflight = self._inflight_rows.get(key)
            if inflight is not None:
                found[key] = inflight[1]
                continue
            # Most rows are in memory: no await for those. A miss is not cached: an
            # operation reads the keys it writes (a log's meta row, an append's token), so
            # its commit would evict the entry straight away.
            known, row = self.p.row_in_memory(key)
            found[key] = (row if known else
                          await self.p.row_from_checkpoints(key, remember_absent=False))
        overlay = Overlay(found)
        outcomes: list[Outcome] = []
        ops: list[CommitOp] = []
        if tracing.enabled:
            commit_spans.waits([p.span for p in batch])
        for pending in batch:
            # Its LSN, or above the versions rows replicated from another stamp brought.
            version = max(self.next_lsn, self._floor + 1)
            early = None
            if pending.recovered:
                version = replay_version(pending.op, pending.hint, overlay, version)
            elif pending.hint and self.speculation.may_answer_early(pending.op):
                early = early_version(pending.op, pending.hint, self._floor, version,
                                      self._inflight_rows.__contains__)
            try:
                result, mutations = pending.op.apply(overlay, version if early is None else early)
            except StampError as exc:
                outcomes.append(Outcome(pending, error=exc))
                continue
            version = version if early is None else early
            if mutations:
                overlay.write(mutations)
                for key, row in mutations:
                    self._inflight_rows[key] = (self.next_lsn,
                                                None if row.tombstone else row)
                replicated = isinstance(pending.op, Replicated)  # rows of their own versions
                ops.append(CommitOp(self.next_lsn, [(k, encode_row(r)) for k, r in mutations],
                                    replicated))
                self.next_lsn += 1
                self._floor = max(self._floor, version, *(
                    row.version for _, row in mutations) if replicated else ())
            outcomes.append(Outcome(pending, result))
            if early is not None:  # its answer rests on durable rows only
                self.speculation.answer(pending, result, [key for key, _ in mutations],
                                        self.next_lsn - 1)
        append: asyncio.Task[Any] | None = None
        nbytes = 0
        if ops:
            faults.point("ps.commit.encode")  # a test throws a bug's exception here
            block = encode_batch(CommitBatch(ops, self.p.epoch))
            nbytes = len(block)
            append = asyncio.get_running_loop().create_task(
                self._append(block) if not tracing.enabled else
                commit_spans.appending(self._append(block), [p.span for p in batch],
                                       len(block), len(ops)))
            self._appends.add(append)
        self.inflight += 1
        self._inflight_ops += len(outcomes)
        self._tail = asyncio.get_running_loop().create_task(
            self._finish(self._tail, append, ops, outcomes, nbytes))

    def row_in_flight(self, key: bytes) -> bool:
        """Whether a block in flight (decided, not yet applied) writes `key`."""
        return key in self._inflight_rows

    async def _append(self, block: bytes) -> Any:
        await faults.apoint("ps.commit.before_append")
        (location,) = await self.p.streams["log"].append([block])
        return location

    async def _finish(self, previous: asyncio.Task[None] | None, append: asyncio.Task[Any] | None,
                      ops: list[CommitOp], outcomes: list[Outcome], nbytes: int) -> None:
        try:
            if previous is not None:
                await asyncio.shield(previous)
            if self.p.gone():
                raise Unavailable(f"partition {self.p.id} stopped with a commit in flight")
            location = await append if append is not None else None
        except (Exception, asyncio.CancelledError) as exc:
            if append is not None:
                append.cancel()
                self._appends.discard(append)
            self._answer_unknown(outcomes, exc)
            if isinstance(exc, asyncio.CancelledError):
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # this task itself is cancelled (the process is going)
                return  # abort() cancelled the append: the partition is stopping already
            await self.p.stop(f"commit-log append failed: {type(exc).__name__}: {exc}")
            return
        finally:
            self.inflight -= 1
            self._inflight_ops -= len(outcomes)
            self._wake.set()
        if append is not None:
            self._appends.discard(append)
        try:
            for op in ops:
                self.p.apply(op)
                for key, _ in op.mutations:
                    if self._inflight_rows.get(key, (0,))[0] == op.lsn:
                        del self._inflight_rows[key]
            self.speculation.durable(ops[-1].lsn if ops else None,
                                     (o.pending for o in outcomes))
            if location is not None:
                self.p.last_commit = location
                self.p.log_bytes += nbytes
            if self.p.shipper is not None:  # inter-stamp replication (geo_shipper.py)
                self.p.shipper.committed(ops, location, nbytes)
            now = time.monotonic()
            log_stream = self.p.streams["log"]
            for outcome in outcomes:
                outcome.pending.answer(outcome.result, outcome.error)
                started = outcome.pending.started
                # Not load: the log sealing a failed extent away (module docstring).
                self.p.stats.record(outcome.pending.nbytes,
                                    now - started - log_stream.stalled_s(started, now))
            self.p.wake_logs(o.pending.op for o in outcomes)
            self.p.checkpoint_if_due()
        except Exception as exc:
            # A bug after the block was durable: what is in memory can no longer be
            # trusted, the commit log can. Stop; the next load replays the block.
            log.exception("partition %d: finishing a durable block failed", self.p.id)
            self._answer_unknown(outcomes, exc)
            await self.p.stop(f"its group committer failed: {type(exc).__name__}: {exc}")

    def _answer_unknown(self, outcomes: list[Outcome], cause: BaseException) -> None:
        """Answer every operation of a block whose fate is unknown (answers already given
        stand: `Pending.answer` answers once)."""
        error = cause if isinstance(cause, StampError) else Unavailable(repr(cause))
        for outcome in outcomes:
            outcome.pending.answer(None, Unavailable(
                f"partition {self.p.id}: commit failed, it may or may not have happened: "
                f"{error}"))
