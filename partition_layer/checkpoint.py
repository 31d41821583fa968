"""Checkpoints and merges of one range partition (§4, an LSM).

A checkpoint freezes the memtable (writes go on into a fresh one), writes it to the row-data
stream as a sorted run, then appends a metadata record naming the runs and the new replay
point: the commit-log block of the last operation in the frozen memtable, and its LSN (replay
skips what is at or below it). Until that record is durable nothing changes for a reader or
a future load: the frozen memtable is still consulted, the old record still rules.

When there are more than `runs_max` runs, the newest runs of similar size are merged into one
in the background (`merge_group`, size-tiered): the newest version of each key; trimmed log
records dropped; tombstones dropped when the group reaches the oldest run. Checkpoints and
merges write metadata records one at a time, each naming every run that is current then.

Views (issue 17): a split child lists its parent's runs narrowed to its range, a merged
partition its two parents' runs with disjoint views (runs.py RunInfo). A merge reads each
source run through its view and, like a checkpoint, writes only keys in the partition's
range; the run it writes gets that range as its view. The tombstone rule is unchanged and
still sound: a merge group is the newest runs, so one that reaches the oldest run holds
every run listed, and every older version of a key is in a run whose view holds the key.

Memory stays bounded: at most one memtable is being checkpointed; when the live one fills up
too, writes wait (`wait_for_room`).

The checkpointer touches its partition only through `CheckpointSite`: it swaps the memtable
and publishes runs, the partition reads them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from common import faults
from common.config import PartitionLimits
from common.errors import PreconditionFailed
from partition_layer import keys
from partition_layer.cache import LruCache
from partition_layer.extent_needs import WritePins
from partition_layer.keys import KeyRange
from partition_layer.memtable import Memtable
from partition_layer.merge import aiter_sync, merge
from partition_layer.partition_meta import GeoMark, PartitionMeta, encode_meta
from partition_layer.run_cache import IndexCache, Run
from partition_layer.runs import RunInfo, RunWriter
from partition_layer.size_split import run_bytes_in_view
from partition_layer.witness_set import WitnessSet
from partition_layer.witness_sweep import token_cutoffs
from stream_layer.client import AsyncStream
from stream_layer.framing import Location

log = logging.getLogger(__name__)


MERGE_SIZE_RATIO = 2
# A run is written on the event loop that serves the partition's writes, and its sources
# rarely suspend (a frozen memtable never does): writing it in one go stalled every commit
# for the 10-20 ms between two of its appends. Let the loop run after this many rows.
ROWS_PER_YIELD = 64
# A split child's or merged partition's first own record waits this long (publish_first).
FIRST_RECORD_DELAY_S = 0.5
# The rows of a flushed memtable kept in the row cache (_keep_flushed_rows): never dropped
# or changed by the flush.
KEPT_KINDS = frozenset((keys.KIND_META, keys.KIND_ENTITY))


def _data_bytes(info: RunInfo) -> int:
    return info.data_bytes


def merge_group(runs: list[RunInfo], size: Callable[[RunInfo], int] = _data_bytes
                ) -> list[RunInfo]:
    """The runs to merge (size-tiered): the newest run and each next older one while it is
    at most MERGE_SIZE_RATIO times the size of the group so far. Each byte is then rewritten
    about log(size) times, not once per merge. `size`: a run's bytes as this partition
    lists it — within its view, so a parent's run a split child lists with half its keys
    counts half, and the child rewrites it (and stops sharing it) as soon as its own."""
    if not runs:
        return []
    group, total = [runs[0]], size(runs[0])
    for run in runs[1:]:
        run_bytes = size(run)
        if run_bytes > MERGE_SIZE_RATIO * total:
            break
        group.append(run)
        total += run_bytes
    return group


class CheckpointSite(Protocol):
    """What the checkpointer needs of its partition, and all it touches (RangePartition is
    one; tests/unit/test_pl_checkpoint.py has a small one on in-memory streams)."""

    id: int
    range: KeyRange  # runs written hold only these keys and have it as their view
    limits: PartitionLimits
    streams: Mapping[str, AsyncStream]  # "row": runs are written there; "meta": records
    memtable: Memtable  # swapped for a fresh one at a checkpoint
    frozen: Memtable | None  # the one being written, until its record is durable
    meta: PartitionMeta | None  # the record in force; replaced by each one published
    readers: list[Run]  # the runs reads use, newest first; replaced with `meta`
    indexes: IndexCache | None
    row_cache: LruCache  # cleared when the runs change
    applied_lsn: int
    last_commit: Location | None  # with applied_lsn: the replay point a checkpoint records
    log_bytes: int  # lowered by what a checkpoint made replay skip
    shipper: Any  # inter-stamp replication's GeoShipper (issue 30), or None: no shipping
    version_floor: int  # the highest row version applied (partition_meta.py)
    witnesses: Any  # its CURP witnesses' OwnerCalls (their `swept_at`), or None: it has none
    recovering: bool  # executing the records of its last owner's witnesses (CURP)

    async def drain_commits(self) -> None:
        """Hold new commit-log blocks back until those in flight have finished."""

    def resume_commits(self) -> None: ...

    async def stop(self, reason: str) -> None: ...


class Checkpointer:
    def __init__(self, site: CheckpointSite) -> None:
        self.p = site
        self._task: asyncio.Task[None] | None = None
        self._merge: asyncio.Task[None] | None = None
        # Set while the run merge publishes its record: from then on it is allowed to end.
        self._merge_publishing = False
        # A split child's or merged partition's first own record (publish_first), appended
        # while it already serves; every later record waits for it.
        self._first: asyncio.Task[None] | None = None
        # Whether the partition serves, not split or merged (after_load).
        self._serving: Callable[[], bool] = lambda: True
        self._meta_lock = asyncio.Lock()
        # Runs being written, each pinned at the row stream's last extent when it began:
        # garbage collection keeps every row extent from there on (extent_needs.py).
        self.row_pins = WritePins()
        self.checkpoints = 0
        self.merges = 0

    def due(self) -> bool:
        """Past any of the thresholds: the memtable's bytes, or the commit log a load would
        replay, in bytes or in operations (a replay's time goes by operations)."""
        limits = self.p.limits
        return (self.p.memtable.nbytes >= limits.memtable_bytes_max
                or self.p.log_bytes >= limits.commit_log_bytes_max
                or self.ops_to_replay() >= limits.commit_log_ops_max)

    def ops_to_replay(self) -> int:
        """Operations a load would replay now: LSNs are dense, one per operation, and the
        record in force names the last one a load skips."""
        meta = self.p.meta
        return self.p.applied_lsn - (meta.applied_lsn if meta is not None else 0)

    def maybe_start(self) -> None:
        if self._task is None and self.due():
            self._task = asyncio.get_running_loop().create_task(self._run_checkpoint())

    async def wait_for_room(self) -> None:
        """Back-pressure: while a checkpoint runs and the live memtable is full again."""
        while (self._task is not None and self.p.memtable.nbytes
               >= self.p.limits.memtable_bytes_max):
            await asyncio.shield(self._task)

    async def checkpoint_now(self) -> None:
        if self._task is not None:
            await asyncio.shield(self._task)
        if len(self.p.memtable) or self.p.log_bytes:
            self._task = asyncio.get_running_loop().create_task(self._run_checkpoint())
            await asyncio.shield(self._task)

    def after_load(self, derived: bool, serving: Callable[[], bool]) -> None:
        """Once the partition serves: a derived partition's first own record
        (`publish_first`), and from now on a run merge only while `serving()` (no split or
        merge of the partition under way): the checkpoints of an operation used to start
        one that the operation abandoned at once, work thrown away while the range was
        unavailable."""
        self._serving = serving
        if derived:
            self.publish_first()

    def publish_first(self) -> None:
        """Append the partition's meta as its first own record, in the background (a split
        child or merged partition derives its meta from a parent's intent record: §4,
        meta_derive.py). It may serve meanwhile: a load before this record is durable
        derives the same meta from the same intent record and replays the same commit
        log. Every record published later waits for this one, so it is never newer than
        one of theirs. A failure stops the partition, as a failed checkpoint does."""
        p = self.p
        assert p.meta is not None and self._first is None
        record = encode_meta(p.meta)

        async def append() -> None:
            try:
                # Not at once: the append rolls the meta stream over to a new extent (the
                # load's fence sealed its last one), a stream-manager change and seals on
                # three extent nodes that slowed the first commits after a split 5-20 ms,
                # while the range was still catching up.
                await asyncio.sleep(FIRST_RECORD_DELAY_S)
                await p.streams["meta"].append([record])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("partition %d: its first record failed: %s", p.id, exc)
                await p.stop(f"its first record failed: {exc}")
                raise

        self._first = asyncio.get_running_loop().create_task(append())

    async def _first_published(self) -> None:
        if self._first is not None:
            await asyncio.shield(self._first)  # raises if it failed: nothing is published

    async def record_witnesses(self, witnesses: WitnessSet | None,
                               still: Callable[[], bool] | None = None) -> None:
        """Append a metadata record naming `witnesses` (CURP, partition_meta.py), in turn
        with the checkpoints' and merges' records, so none of theirs drops the set.
        PreconditionFailed, nothing appended, unless `still()` holds once it is its turn: a
        split or merge checkpoints under the lock after it stopped admitting, and its intent
        must be the record after that one (witness_repick.py passes "still serving")."""
        p = self.p
        await self._first_published()
        async with self._meta_lock:
            if still is not None and not still():
                raise PreconditionFailed(f"partition {p.id}: no witness set is named now")
            assert p.meta is not None
            meta = dataclasses.replace(p.meta, witnesses=witnesses)
            await p.streams["meta"].append([encode_meta(meta)])
            p.meta = meta

    def cancel(self) -> None:
        for task in (self._task, self._merge, self._first):
            if task is not None and task is not asyncio.current_task():
                task.cancel()

    async def abort_merge(self) -> None:
        """End the run merge under way without waiting for it, unless it is publishing its
        record (a moment). A merge only rewrites runs the record in force still lists: the
        bytes it wrote so far are left unreferenced (garbage collection reclaims them), and
        no reader or later load is any the wiser. A split or merge calls this: waiting for
        a merge of a large partition kept its range unavailable for seconds."""
        merge = self._merge
        if merge is None or merge is asyncio.current_task():
            return
        if not self._merge_publishing:
            merge.cancel()
            log.info("partition %d: run merge abandoned", self.p.id)
        await asyncio.gather(merge, return_exceptions=True)

    async def closed(self) -> None:
        """Until the checkpoint and merge under way (cancelled by `cancel`) have ended."""
        current = asyncio.current_task()
        tasks = [t for t in (self._task, self._merge, self._first)
                 if t is not None and t is not current]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _run_checkpoint(self) -> None:
        try:
            await self._checkpoint()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The metadata stream refused us (fenced) or the stream layer gave up: the old
            # record still rules and the frozen memtable is still in the commit log.
            log.warning("partition %d: checkpoint failed: %s", self.p.id, exc)
            await self.p.stop(f"checkpoint failed: {exc}")
        finally:
            self._task = None

    async def _checkpoint(self) -> None:
        p = self.p
        assert p.frozen is None and p.meta is not None
        # With no block in flight, every later block lands after `last_commit` in the stream:
        # replaying from there misses nothing the frozen memtable lacks (committer.py).
        await p.drain_commits()
        try:
            frozen, p.memtable = p.memtable.freeze(), Memtable()
            p.frozen = frozen
            replay_from, applied_lsn, log_bytes = p.last_commit, p.applied_lsn, p.log_bytes
        finally:
            p.resume_commits()
        info: RunInfo | None = None
        # The run is referenced by nothing durable until its record is: pinned until then.
        with self.row_pins.pinned(p.streams["row"].last_extent_id):
            if len(frozen):
                info = await self._write_run(
                    [aiter_sync(frozen.items(p.range.low, p.range.high))],
                    drop_tombstones=not p.readers)
            await faults.apoint("ps.checkpoint.before_meta")
            async with self._meta_lock:
                runs = ([info] if info is not None else []) + list(p.meta.runs)
                await self._publish(runs, replay_from, applied_lsn)
                p.frozen = None
                p.log_bytes -= log_bytes
                await self._keep_flushed_rows(frozen)
        self.checkpoints += 1
        log.info("partition %d: checkpoint %d at lsn %d: %s", p.id, self.checkpoints,
                 applied_lsn, f"run {info.run_id}, {info.key_count} keys" if info else "no run")
        if len(p.meta.runs) > p.limits.runs_max and self._merge is None and self._serving():
            self._merge = asyncio.get_running_loop().create_task(self._run_merge())

    async def _keep_flushed_rows(self, frozen: Memtable) -> None:
        """The meta and entity rows a checkpoint just wrote into its run go into the row
        cache (which the publish cleared), when the memtable was small enough to fit: they
        are the newest of their keys in the runs and the likeliest read next (a log's meta
        row is read by its next append), which would otherwise wait for the new run's index
        and a data block from the extent nodes. Records and tokens are left out: the flush
        may drop them (trimmed, expired: merge.py), and appends do not read them back.
        Correct while it runs: a key written since the freeze is in the memtable, which
        shadows the row cache until the next publish clears it."""
        p = self.p
        if not len(frozen) or frozen.nbytes > p.row_cache.max_bytes // 2:
            return
        for count, (key, encoded) in enumerate(frozen.items(p.range.low, p.range.high), 1):
            if key[keys.kind_offset(key)] in KEPT_KINDS:
                p.row_cache.put(key, encoded)
            if count % ROWS_PER_YIELD == 0:
                await asyncio.sleep(0)

    async def _write_run(self, sources: list, drop_tombstones: bool) -> RunInfo | None:
        p = self.p
        assert p.meta is not None
        run_id = p.meta.next_run_id
        p.meta = dataclasses.replace(p.meta, next_run_id=run_id + 1)
        writer = RunWriter(p.streams["row"].append, run_id=run_id,
                           block_bytes_target=p.limits.data_block_bytes)
        count = 0
        # Entity tokens past retries, and trimmed logs' tokens, only where no witness can
        # still hold their write's record (witness_sweep.py: a recovery would execute it).
        expired, trimmed_kept_above = token_cutoffs(p.witnesses, time.time(), p.recovering)
        async for key, encoded in merge(sources, drop_tombstones=drop_tombstones,
                                        tokens_expire_before_ms=expired,
                                        trimmed_tokens_kept_above=trimmed_kept_above):
            await writer.add(key, encoded)
            count += 1
            if count % ROWS_PER_YIELD == 0:
                await asyncio.sleep(0)
        if not count:
            return None
        info = await writer.finish()
        if p.indexes is not None and writer.index is not None:
            p.indexes.install(info, writer.index)
        return dataclasses.replace(info, view_low=p.range.low, view_high=p.range.high)

    async def _publish(self, runs: list[RunInfo], replay_from: Location | None,
                       applied_lsn: int) -> None:
        """Append the metadata record naming `runs`, then make them the ones reads use."""
        p = self.p
        await self._first_published()
        assert p.meta is not None
        assert p.indexes is not None
        readers = {r.info: r for r in p.readers}
        fresh = [readers.get(info) or Run(info, p.indexes) for info in runs]
        meta = dataclasses.replace(p.meta, runs=runs, replay_from=replay_from,
                                   applied_lsn=applied_lsn,
                                   geo=self._geo_mark(replay_from, applied_lsn),
                                   version_floor=p.version_floor)
        await p.streams["meta"].append([encode_meta(meta)])
        # A run id handed out meanwhile (a checkpoint's run while a merge publishes) stays
        # handed out: the next run must not take it again.
        p.meta = dataclasses.replace(meta, next_run_id=max(meta.next_run_id,
                                                           p.meta.next_run_id))
        p.readers = fresh
        p.row_cache.clear()

    def _geo_mark(self, replay_from: Location | None, applied_lsn: int) -> GeoMark | None:
        """Where inter-stamp replication stands, for the record (partition_meta.py): the
        shipper's position, told first of this replay point (a safe place to read from for
        what lies past `applied_lsn`); the record in force's mark when nothing ships."""
        shipper = self.p.shipper
        assert self.p.meta is not None
        if shipper is None:
            return self.p.meta.geo
        shipper.checkpointed(replay_from, applied_lsn)
        position = shipper.position
        return GeoMark(position.lsn, position.resume_from, shipper.last_sync_s())

    async def _run_merge(self) -> None:
        try:
            await self._merge_runs()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("partition %d: merge failed: %s", self.p.id, exc)
            await self.p.stop(f"merge failed: {exc}")
        finally:
            self._merge = None
            self._merge_publishing = False

    async def _merge_runs(self) -> None:
        p = self.p
        assert p.meta is not None
        indexes = {r.info: r.loaded_index() for r in p.readers}
        victims = merge_group(p.meta.runs,
                              lambda info: run_bytes_in_view(info, indexes.get(info)))
        if len(victims) < 2:
            return  # every older run is much bigger: merging now would rewrite it for little
        ids = {v.run_id for v in victims}
        readers = [r for r in p.readers if r.info.run_id in ids]
        bottom = victims[-1].run_id == p.meta.runs[-1].run_id
        with self.row_pins.pinned(p.streams["row"].last_extent_id):
            # Each source through its view (Run.scan), and only the partition's keys: a run
            # shared with a split sibling holds the sibling's keys too.
            merged = await self._write_run(
                [r.scan(p.range.low, p.range.high) for r in readers], drop_tombstones=bottom)
            async with self._meta_lock:
                self._merge_publishing = True
                # Runs checkpointed meanwhile are newer than the group, the rest older: the
                # merged run takes the group's place.
                current = p.meta.runs
                at = next(i for i, r in enumerate(current) if r.run_id in ids)
                runs = [r for r in current[:at] if r.run_id not in ids] + (
                    [merged] if merged else []) + [r for r in current[at:]
                                                   if r.run_id not in ids]
                await self._publish(runs, p.meta.replay_from, p.meta.applied_lsn)
        self.merges += 1
        log.info("partition %d: merged %d runs into %s", p.id, len(victims),
                 merged.run_id if merged else "nothing")
