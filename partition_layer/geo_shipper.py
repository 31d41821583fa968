"""A primary partition's shipper (issue 30): its committed operations, in commit order, to
the secondary stamps of their accounts (partition_layer/geo_ship.py has the plan).

Contracts:
- **Only what is acknowledged.** An operation is shipped once the partition applied it
  (`applied_lsn`): durable, and after every operation before it. A block the commit log
  holds past that (in flight, or junk a failed owner left) is never shipped, so the
  secondary never holds a write the primary may still lose.
- **In order, one batch at a time.** The operations since the last shipped one are taken
  in LSN order, up to SHIP_OPS_MAX of them and SHIP_BYTES_MAX of rows, and squashed per
  partition name: one ReplicateOp per name with each key's last row (the name goes from one
  of the primary's states to a later one, atomically). The batch goes to each secondary
  stamp concerned; the next batch only once every request of this one was applied (the
  sender returned), and no sooner than `pace_s` after it unless what waits fills a batch
  already: a lag of that much buys batches that many times larger, each costing both stamps
  one call, one commit and its replicas' writes rather than one per handful of writes,
  without capping what a burst ships at. A failed send is retried with backoff, for ever:
  the lag grows, nothing is skipped. Applying a batch again is harmless
  (operations.Replicated), so a retry after a lost answer and a new owner re-shipping from
  an older position both converge.
- **Where operations come from.** The committer hands each durable block's operations over
  (`committed`, no I/O, on the commit path); the shipper reads the commit log instead
  (`blocks` from its position) when it is behind what it was handed: after a load, or when
  the hand-off queue passed QUEUE_BYTES_MAX while the secondary was slow (the queue is then
  dropped: memory stays bounded, the log holds everything).
- **Which operations.** Those written here: an operation applied from another stamp
  (commit_log.CommitOp.replicated: this stamp is that account's secondary) is never shipped
  on. For the others `targets(account)` names the stamp to ship to, or None (the account is
  in no location, or this stamp is stand-alone): its operations count as shipped; it raises
  when it cannot say yet (the location is unreachable, or still names another primary for
  an account whose writes this stamp took: a failover it has not heard of), and the batch
  waits and asks again: an operation written here is never skipped. When it answers
  Deposed (an unplanned failover made another stamp the primary at a later epoch), the
  account's operations in the batch are that stamp's tail: `set_aside` keeps them in a
  report (partition_layer/geo_tail.py), and once that is durable they count as shipped.
- **Last sync time** (`last_sync_s`): every write this partition acknowledged before it is
  on the secondary. From samples (wall time t, LSN a: every write acknowledged before t has
  an LSN at most a) taken as each block is handed over, before its writes are answered
  (a = its first LSN - 1): the latest t whose a was shipped; now, when nothing waits; the
  previous owner's figure (`synced_s`) until the first sample is shipped.
- **Position** (`position`): the last shipped LSN, and a commit-log block from which reading
  on finds every operation past it: a replay point the partition checkpointed (`checkpointed`:
  every block holding an operation past a replay point's LSN lands after it, checkpoint.py)
  at or below the shipped LSN, or the position the shipper started from. What the
  partition's metadata records, so a new owner resumes there; it reads a little of the log
  again, skipping what was shipped. The shipper's own fall-back reads start there too: a
  block's position in the stream is no guide, as the commit log may hold blocks out of LSN
  order (re-sent across a rollover)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from common.errors import StampError, Unavailable
from common.proto import partition_pb2 as pb
from partition_layer import keys
from partition_layer.commit_log import CommitOp, Replayer, decode_batch, within
from partition_layer.geo_ship import (
    REPLICATE_ROWS_MAX,
    Position,
    ShipSite,
    replicate_request,
    shipped_bytes,
)
from partition_layer.geo_tail import Deposed, never_deposed
from stream_layer.framing import Location

log = logging.getLogger(__name__)

SHIP_OPS_MAX = 4096
# A batch's rows, at most (one operation alone may have more: the largest legal one). Well
# under a front end's receive limit (frontend/server.request_message_bytes_max), which a
# batch that grew with a lag once passed: refused, retried for ever.
SHIP_BYTES_MAX = 1024 * 1024
QUEUE_BYTES_MAX = 64 * 1024 * 1024
SYNC_SAMPLES_MAX = 8192
SYNC_SAMPLE_S = 0.01  # at most one sample this often: 80 s of lag at full precision
RETRY_MIN_S = 0.05
RETRY_MAX_S = 2.0

Targets = Callable[[str], Awaitable[str | Deposed | None]]
Sender = Callable[[str, list[pb.Request]], Awaitable[None]]
# (partition id, the batch's last LSN, the requests set aside with what deposed them)
SetAside = Callable[[int, int, list[tuple[Deposed, pb.Request]]], Awaitable[None]]


@dataclass
class _Handed:
    ops: list[CommitOp]
    location: Location | None
    nbytes: int


@dataclass
class _Batch:
    """Operations squashed per name: (account, pname) -> {key: encoded row}."""

    rows: dict[tuple[str, str], dict[bytes, bytes]] = field(default_factory=dict)
    last_lsn: int = 0
    ops: int = 0
    nbytes: int = 0
    full: bool = False  # cut short by its bounds: more waits behind it

    def add(self, op: CommitOp) -> bool:
        """Add `op` unless it would pass the batch's bounds or take a name's rows past
        REPLICATE_ROWS_MAX (a partition server refuses a ReplicateOp with more: a squash of
        many appends to one log had passed it); the first always goes in. Whether it did.
        An operation writes one name's rows; one applied from another stamp, none to ship."""
        rows = () if op.replicated else op.mutations
        size = sum(shipped_bytes(key, row) for key, row in rows)
        name = keys.decode_key(rows[0][0])[:2] if rows else None
        held = self.rows.get(name, {}) if name is not None else {}
        if self.ops and (self.ops >= SHIP_OPS_MAX or self.nbytes + size > SHIP_BYTES_MAX
                         or len(held) + len(rows) > REPLICATE_ROWS_MAX):
            return False
        if name is not None:
            self.rows.setdefault(name, {}).update(rows)
        self.nbytes += size
        self.last_lsn = op.lsn
        self.ops += 1
        return True


class GeoShipper:
    """One partition's shipping to secondary stamps (module contract)."""

    def __init__(self, site: ShipSite, targets: Targets, send: Sender, start: Position,
                 wall: Callable[[], float] = time.time, synced_s: float = 0.0,
                 rng: random.Random | None = None, set_aside: SetAside = never_deposed,
                 pace_s: float = 0.0) -> None:
        """`start`: where the previous owner's metadata says shipping stood (Position(0,
        None) for a partition never shipped); `synced_s`: the last sync time it recorded;
        `pace_s`: the least time between two batches (0: each as soon as the last landed)."""
        self.site = site
        self._targets = targets
        self._send = send
        self._set_aside = set_aside
        self._wall = wall
        self._rng = rng or random.Random()
        self.shipped_lsn = start.lsn
        # Safe places to read the log from, (block, LSN), oldest first (module contract).
        self._safe: collections.deque[tuple[Location | None, int]] = collections.deque(
            [(start.resume_from, start.lsn)])
        self._handed: collections.deque[_Handed] = collections.deque()
        self._handed_bytes = 0
        self._wake = asyncio.Event()
        self._shipped = asyncio.Event()  # set after each batch: `drained` waits on it
        # Reading the commit log (module contract): the replayer, the block reached, the
        # stream's iterator, and operations read but not yet shipped, in LSN order.
        self._replayer: Replayer | None = None
        self._cursor: Location | None = None
        self._blocks: Any = None
        self._carried: collections.deque[CommitOp] = collections.deque()
        # (t, a) as the module contract says: the last sync time while anything waits.
        self._samples: collections.deque[tuple[float, int]] = collections.deque()
        self._samples.append((wall(), site.applied_lsn))
        self._synced_s = synced_s
        self._pace_s = pace_s
        self._shipped_at = -float("inf")  # loop time of the last batch's landing
        self._behind = False  # the last batch was cut short by its bounds
        self._between: collections.deque[tuple[Callable[[], Awaitable[Any]],
                                               asyncio.Future[Any]]] = collections.deque()
        self._stopped = False
        self.batches = 0  # batches shipped (metrics, tests)
        self.failures = 0

    # ---- the commit path --------------------------------------------------------------------

    def committed(self, ops: list[CommitOp], location: Location | None, nbytes: int) -> None:
        """A durable block's operations, applied in order (the committer, after `apply`)."""
        if ops:
            self._sample(ops[0].lsn - 1)
            if self._handed_bytes + nbytes <= QUEUE_BYTES_MAX:
                self._handed.append(_Handed(ops, location, nbytes))
                self._handed_bytes += nbytes
            else:  # the secondary is slow: the log holds it all, memory stays bounded
                self._handed.clear()
                self._handed_bytes = 0
        self._wake.set()

    def _sample(self, lsn: int) -> None:
        """Every write acknowledged before now has an LSN at most `lsn`. Kept only when the
        last sample is SYNC_SAMPLE_S old (the older one stays true, if less precise); when
        the deque is full, the oldest goes, its time kept if it was shipped already (else
        the last sync time reported is older than it could be, never newer)."""
        now = self._wall()
        if now - self._samples[-1][0] < SYNC_SAMPLE_S:
            return
        if len(self._samples) == SYNC_SAMPLES_MAX:
            at, oldest = self._samples.popleft()
            if oldest <= self.shipped_lsn:
                self._synced_s = max(self._synced_s, at)
        self._samples.append((now, lsn))

    def checkpointed(self, replay_from: Location | None, applied_lsn: int) -> None:
        """The partition recorded a replay point (checkpoint.py): a safe place to read from
        for what lies past `applied_lsn`."""
        if applied_lsn > self._safe[-1][1]:
            self._safe.append((replay_from, applied_lsn))

    # ---- what a reader is told --------------------------------------------------------------

    @property
    def position(self) -> Position:
        """Where shipping stands (module contract): what the partition's metadata keeps."""
        while len(self._safe) > 1 and self._safe[1][1] <= self.shipped_lsn:
            self._safe.popleft()
        return Position(self.shipped_lsn, self._safe[0][0])

    def lag_ops(self) -> int:
        return max(0, self.site.applied_lsn - self.shipped_lsn)

    def last_sync_s(self) -> float:
        """Every write acknowledged here before this wall time is on the secondary."""
        if self.shipped_lsn >= self.site.applied_lsn:
            self._synced_s = self._wall()  # caught up now: every write up to now is there
            return self._synced_s
        while len(self._samples) > 1 and self._samples[1][1] <= self.shipped_lsn:
            self._samples.popleft()
        at, lsn = self._samples[0]
        if lsn <= self.shipped_lsn:
            self._synced_s = max(self._synced_s, at)
        return self._synced_s

    # ---- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Ship until cancelled (the partition stops serving)."""
        try:
            await self._run()
        finally:
            self._stopped = True
            for _, waiting in self._between:
                if not waiting.done():
                    waiting.set_exception(Unavailable(f"partition {self.site.id} stopped"))

    async def between_batches(self, work: Callable[[], Awaitable[Any]]) -> Any:
        """`work()`'s result, run between two batches: shipping waits meanwhile (a geo
        bootstrap's copy, geo_copy.py). Unavailable once the partition stops shipping here."""
        if self._stopped:
            raise Unavailable(f"partition {self.site.id} stopped shipping here")
        waiting = asyncio.get_running_loop().create_future()
        self._between.append((work, waiting))
        self._wake.set()
        return await waiting

    async def _run(self) -> None:
        while True:
            if self._between:
                work, waiting = self._between[0]  # kept there until done: `run` fails it
                if waiting.done():  # its caller is gone (a timeout): shipping need not wait
                    self._between.popleft()
                    continue
                try:
                    result = await work()
                except Exception as exc:
                    result = exc
                self._between.popleft()
                if not waiting.done():  # else its caller is gone
                    (waiting.set_exception if isinstance(result, Exception)
                     else waiting.set_result)(result)
                continue
            if self.shipped_lsn >= self.site.applied_lsn:
                self._wake.clear()
                if self.shipped_lsn >= self.site.applied_lsn and not self._between:
                    await self._wake.wait()
                continue
            if not self._behind:
                await self._pace()
            batch = await self._next_batch()
            self._behind = batch.full
            if batch.ops:
                await self._ship(batch)
                self._shipped_at = asyncio.get_running_loop().time()
            else:  # behind, yet nothing readable past the position: not there yet
                await asyncio.sleep(RETRY_MIN_S)

    async def _pace(self) -> None:
        """At most one batch every `pace_s` (module contract): what commits meanwhile joins
        the next one — unless what waits fills a batch already (a burst: waiting would only
        cap the rate it ships at; `run` skips this while the last batch was cut short)."""
        full = (self._handed_bytes >= SHIP_BYTES_MAX
                or self.site.applied_lsn - self.shipped_lsn >= SHIP_OPS_MAX)
        wait_s = self._shipped_at + self._pace_s - asyncio.get_running_loop().time()
        if wait_s > 0 and not full:
            await asyncio.sleep(wait_s)

    async def _next_batch(self) -> _Batch:
        batch = _Batch()
        self._drop_handed_upto(self.shipped_lsn)
        while self._carried and self._carried[0].lsn <= self.shipped_lsn:
            self._carried.popleft()
        if not self._carried and self._handed \
                and self._handed[0].ops[0].lsn <= self.shipped_lsn + 1:
            self._stop_reading()  # caught up with the hand-off: the log is not read on
            # Whole blocks while they fit; a block cut short stays queued, its operations
            # up to the batch's last skipped next time.
            for handed in self._handed:
                for op in handed.ops:
                    if op.lsn <= max(self.shipped_lsn, batch.last_lsn):
                        continue
                    if not batch.add(op):
                        batch.full = True
                        return batch
            return batch
        while True:
            while self._carried and self._carried[0].lsn <= self.site.applied_lsn:
                if not batch.add(self._carried[0]):
                    batch.full = True
                    return batch
                self._carried.popleft()
            if self._carried or not await self._read_block():
                return batch  # what was read waits to be applied, or nothing more to read

    def _drop_handed_upto(self, lsn: int) -> None:
        while self._handed and self._handed[0].ops[-1].lsn <= lsn:
            self._handed_bytes -= self._handed.popleft().nbytes

    async def _read_block(self) -> bool:
        """Read the commit log's next block, its operations that became applicable (LSN
        order, this partition's keys: a split parent's other half is its sibling's to ship)
        carried for shipping once applied here. One reading goes on from block to block
        (a Replayer keeps what waits for a gap); it starts at the safe place (module
        contract). False at the end of what the log holds now."""
        if self._replayer is None:
            self._replayer = Replayer(self.shipped_lsn)
            self._cursor = self.position.resume_from
        if self._blocks is None:
            self._blocks = self.site.streams["log"].blocks(self._cursor)
        try:
            location, block = await anext(self._blocks)
        except StopAsyncIteration:
            self._blocks = None  # read again from the last block, which it yields again
            return False
        self._cursor = location
        self._carried.extend(within(op, self.site.range)
                             for op in self._replayer.feed(decode_batch(block)))
        return True

    def _stop_reading(self) -> None:
        if self._blocks is not None:
            asyncio.get_running_loop().create_task(self._blocks.aclose())
        self._replayer, self._blocks, self._cursor = None, None, None
        self._carried.clear()

    async def _ship(self, batch: _Batch) -> None:
        attempt = 0
        while True:  # where each account goes: asked until it is known (module contract)
            try:
                by_target = await self._requests(batch)
                break
            except StampError as exc:
                self.failures += 1
                await self._back_off(attempt, f"where to ship: {exc}")
                attempt += 1
        done: set[str] = set()
        while pending := {t: r for t, r in by_target.items() if t not in done}:
            for target, requests in pending.items():
                try:
                    if not self.site.lease_valid():
                        raise Unavailable(f"partition {self.site.id}'s lease ran out here")
                    await self._send(target, requests)
                except StampError as exc:
                    self.failures += 1
                    await self._back_off(attempt, f"shipping to {target} failed: {exc}")
                    attempt += 1
                    # Asked again: an account whose roles moved meanwhile (a failover) goes
                    # elsewhere now.
                    with contextlib.suppress(StampError):
                        by_target = await self._requests(batch)
                    break
                done.add(target)
        self.shipped_lsn = batch.last_lsn
        self.batches += 1
        self._shipped.set()

    async def _back_off(self, attempt: int, why: str) -> None:
        delay = min(RETRY_MAX_S, RETRY_MIN_S * 2 ** min(attempt, 16))
        log.warning("partition %d: %s; again in %.2f s", self.site.id, why, delay)
        await asyncio.sleep(self._rng.uniform(delay / 2, delay))

    async def drained(self) -> None:
        """Return once everything applied when called (and since) is shipped: a merge
        waits for it, as the merged partition does not read its parents' logs on."""
        while self.shipped_lsn < self.site.applied_lsn:
            self._shipped.clear()
            await self._shipped.wait()

    async def _requests(self, batch: _Batch) -> dict[str, list[pb.Request]]:
        """The batch's requests by target stamp; a deposed account's set aside first."""
        by_target: dict[str, list[pb.Request]] = {}
        aside: list[tuple[Deposed, pb.Request]] = []
        for (account, pname), rows in batch.rows.items():
            target = await self._targets(account)
            if target is None:
                continue
            request = await replicate_request(account, pname, rows.items(),
                                              self.site.read_blob)
            if isinstance(target, Deposed):
                aside.append((target, request))
            else:
                by_target.setdefault(target, []).append(request)
        if aside:
            await self._set_aside(self.site.id, batch.last_lsn, aside)
            log.warning("partition %d: %d names' operations up to LSN %d set aside: another "
                        "stamp is their account's primary now", self.site.id, len(aside),
                        batch.last_lsn)
        return by_target

