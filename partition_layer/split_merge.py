"""Split and merge on the partition server (issue 17; /work/notes/split17.md "PS flow").

Split(B, K, C, D): B stops admitting (SPLITTING: NotOwner, the client refreshes its map and
retries), settles and checkpoints fully; B's meta carrying the split intent is appended to
its metadata stream; B's four streams are sealed; one stream-manager multi-modify fences
them (a guard: a newer owner of B makes it fail), makes C's and D's streams out of B's
extents (pointers only) and retires B's; B stops, C and D load here (they derive their meta
from the intent record: meta_derive.py). Merge(C, D, E) has the same shape.

Contracts:
- Idempotent: a retry of the same request finishes or confirms the same operation (the
  children's metadata stream there and the parents' streams gone means it committed);
  after a crash before the commit, a load of the parent rolls the intent back.
- Fault points, in order: ps.split.checkpointed, .intent_written, .sealed, .committed,
  .children_loading; ps.merge.checkpointed, .intent_written, .sealed, .committed,
  .merged_loading.
- The parent is fully checkpointed before the intent is written (asserted): a child replays
  nothing of its parent's that is not in the runs it lists.
- Never both the parent and a child serving on this process (asserted before a child loads).
- A failure before the intent: the parent serves on. After it: the parent stops (its lease
  goes), and the next Split or Load decides from the stream manager which side survives.
- While one runs, requests for the parents' ranges that meet NotOwner here wait for it to
  end (`holds`, `settled`; at most `split_hold_ms`) and then run where their key is served:
  on a child here, or the parent again after a failure before the intent (server.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Protocol

from common import faults
from common.clock import Clock, SystemClock
from common.errors import InvalidArgument, PreconditionFailed, Unavailable
from common.proto import partition_pb2 as pb
from partition_layer import keys, meta_derive
from partition_layer.keys import KeyRange
from partition_layer.partition import GONE, MERGING, SERVING, SPLITTING, RangePartition
from partition_layer.partition_meta import encode_meta
from partition_layer.partition_streams import (
    STREAM_KINDS,
    seal_all,
    stream_name,
    streams_exist,
)
from partition_layer.range_hold import RangeHold
from stream_layer.stream_ops import create_from_op, fence_op, retire_op

if TYPE_CHECKING:
    from common.proto.stream_manager_pb2 import StreamOp
    from partition_layer.ownership import Ownership
    from stream_layer.client import AsyncStreamClient

log = logging.getLogger(__name__)

GEO_DRAIN_S = 10.0  # how long a merge waits for inter-stamp replication to catch up
ANYWHERE = keys.WHOLE_KEY_SPACE  # a child's range comes from its derived meta
Leases = Mapping[int, "Ownership"]
NO_LEASES: Leases = {}


class Steps:
    """When each step of one split or merge ended, for its log line: where the unavailable
    time goes (quiesce, intent, seal, commit, children's load)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._last = clock.monotonic()
        self.spent: list[tuple[str, float]] = []

    def done(self, step: str) -> None:
        now = self.clock.monotonic()
        self.spent.append((step, now - self._last))
        self._last = now

    def __str__(self) -> str:
        return " ".join(f"{step} {seconds * 1000:.1f}ms" for step, seconds in self.spent)


def range_pb(key_range: KeyRange) -> pb.KeyRange:
    high = key_range.high
    return pb.KeyRange(low=key_range.low, high=high or b"", has_high=high is not None)


def check_split_key(key_range: KeyRange, key: bytes) -> None:
    """K strictly inside the range and the first key of a partition name (a split never
    cuts a log or an entity group)."""
    if not key_range.contains(key) or key == key_range.low:
        raise InvalidArgument(f"split key {key.hex()} is not strictly inside the range")
    account, pname, _, _ = keys.decode_key(key)
    if keys.encode_key(account, pname, keys.KIND_META, b"") != key:
        raise InvalidArgument(f"split key {key.hex()} is not the first key of a partition "
                              "name")


class PartitionHost(Protocol):
    """What split and merge need of the partition server they run on, and all they touch
    (server.PartitionServer is one), as the committer reaches its partition only through
    CommitSite: this module does not import the server, which imports it."""

    partitions: MutableMapping[int, RangePartition]  # read: who serves what here
    retired: set[int]  # added to: split or merged away here, never loaded here again
    leases: Mapping[int, Ownership]  # the ownership each loaded partition serves under
    streams: AsyncStreamClient  # its streams' seals, existence, and the one multi-modify

    async def acquire(self, partition_id: int) -> Ownership:
        """A partition's lease under the server's session (the children's, taken early)."""

    async def release(self, own: Ownership) -> None: ...

    async def load(self, partition_id: int, key_range: KeyRange,
                   create_if_missing: bool = False, acquired: Ownership | None = None,
                   parents: Sequence[RangePartition] = ()) -> object:
        """Load the partition here (idempotent); `acquired` its lease if taken already,
        `parents` what it was made of here."""


class SplitMerge:
    """The split and merge procedures of one partition server, one at a time."""

    def __init__(self, server: PartitionHost, clock: Clock | None = None) -> None:
        self.server = server
        self.clock = clock or SystemClock()  # the steps' and the unavailable time's
        self._lock = asyncio.Lock()
        # The parents' ranges while an operation runs: their requests wait (server.py).
        self.hold = RangeHold()

    @contextlib.asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """While held, no split or merge runs here (garbage collection decides what a
        partition's streams still need: their extents must not change hands meanwhile)."""
        async with self._lock:
            yield

    @contextlib.asynccontextmanager
    async def _leases(self, *ids: int) -> AsyncIterator[dict[int, Ownership]]:
        """The made partitions' leases, taken before the parents stop admitting (a lock
        service round trip off the unavailable time); each one its partition did not take
        over by loading is released at the end."""
        taken = await asyncio.gather(*(self.server.acquire(i) for i in ids),
                                     return_exceptions=True)
        leases = {i: t for i, t in zip(ids, taken, strict=True)
                  if not isinstance(t, BaseException)}
        try:
            for outcome in taken:
                if isinstance(outcome, BaseException):
                    raise outcome
            yield leases
        finally:
            for partition_id, own in leases.items():
                if self.server.leases.get(partition_id) is not own:
                    await self.server.release(own)

    # ---- split ------------------------------------------------------------------------------

    async def split(self, parent_id: int, key: bytes, left_id: int, right_id: int
                    ) -> pb.SplitReply:
        started = self.clock.monotonic()
        if len({parent_id, left_id, right_id}) != 3 or not left_id or not right_id:
            raise InvalidArgument(f"split of {parent_id} into {left_id} and {right_id}: "
                                  "three distinct ids needed")
        steps = Steps(self.clock)
        async with self._lock:
            unavailable_from = self.clock.monotonic()
            if not await self._committed(left_id, parent_id):
                parent = await self._served(parent_id)
                check_split_key(parent.range, key)
                await self._check_unused(left_id, right_id)
                steps.done("checks")
                async with self._leases(left_id, right_id) as leases, \
                        self.hold.holding([parent.range]):
                    steps.done("leases")
                    unavailable_from = await self._commit_split(parent, key, left_id,
                                                                right_id, steps)
                    left, right = await self._load_split_children(parent_id, left_id,
                                                                  right_id, leases)
            else:
                left, right = await self._load_split_children(parent_id, left_id, right_id)
            steps.done("load")
        now = self.clock.monotonic()
        log.info("split of partition %d into %d %s and %d %s: %.3f s, unavailable %.3f s "
                 "(%s)", parent_id, left_id, left.range.to_dict(), right_id,
                 right.range.to_dict(), now - started, now - unavailable_from, steps)
        return pb.SplitReply(seconds=now - started, unavailable_s=now - unavailable_from,
                             left=range_pb(left.range), right=range_pb(right.range),
                             left_epoch=left.epoch, right_epoch=right.epoch)

    async def _commit_split(self, parent: RangePartition, key: bytes, left_id: int,
                            right_id: int, steps: Steps) -> float:
        """The split up to its commit; returns when the parent stopped admitting."""
        stopped_at = await self._quiesce([parent], SPLITTING, steps)
        await faults.apoint("ps.split.checkpointed")
        try:
            assert parent.meta is not None
            record = meta_derive.with_intent(parent.meta,
                                             meta_derive.split_intent(key, left_id, right_id))
            await parent.streams["meta"].append([encode_meta(record)])
            steps.done("intent")
        except BaseException:
            await self._resume([parent])
            raise
        try:
            await faults.apoint("ps.split.intent_written")
            extents = await seal_all(self.server.streams, parent.id, parent.epoch)
            steps.done("seal")
            await faults.apoint("ps.split.sealed")
            ops = _fence(parent)
            for child in (left_id, right_id):
                ops += [_create_from(child, kind, extents[kind]) for kind in STREAM_KINDS]
            await self._multi_modify(ops + _retire(parent.id), left_id)
            steps.done("commit")
        except BaseException as exc:
            # Which side survives is the next loader's to find out: B's streams or C's.
            log.warning("partition %d: split failed after its intent was written: %r",
                        parent.id, exc)
            await parent.stop(f"split failed after its intent was written: {exc!r}")
            raise
        await faults.apoint("ps.split.committed")
        await self._retire_here(parent, f"split into {left_id} and {right_id}")
        steps.done("stop")
        return stopped_at

    # ---- merge ------------------------------------------------------------------------------

    async def merge(self, left_id: int, right_id: int, merged_id: int) -> pb.MergeReply:
        started = self.clock.monotonic()
        if len({left_id, right_id, merged_id}) != 3 or not merged_id:
            raise InvalidArgument(f"merge of {left_id} and {right_id} into {merged_id}: "
                                  "three distinct ids needed")
        steps = Steps(self.clock)
        async with self._lock:
            unavailable_from = self.clock.monotonic()
            if not await self._committed(merged_id, left_id, right_id):
                left, right = (self._serving(left_id), self._serving(right_id))
                if left.range.high != right.range.low:
                    raise PreconditionFailed(f"partitions {left_id} and {right_id} are not "
                                             "adjacent")
                await self._check_unused(merged_id)
                steps.done("checks")
                async with self._leases(merged_id) as leases, \
                        self.hold.holding([left.range, right.range]):
                    steps.done("leases")
                    unavailable_from = await self._commit_merge(left, right, merged_id, steps)
                    merged = await self._load_merged(left_id, right_id, merged_id, leases)
            else:
                merged = await self._load_merged(left_id, right_id, merged_id)
            steps.done("load")
        now = self.clock.monotonic()
        log.info("merge of partitions %d and %d into %d %s: %.3f s, unavailable %.3f s (%s)",
                 left_id, right_id, merged_id, merged.range.to_dict(), now - started,
                 now - unavailable_from, steps)
        return pb.MergeReply(seconds=now - started, unavailable_s=now - unavailable_from,
                             range=range_pb(merged.range), epoch=merged.epoch)

    async def _commit_merge(self, left: RangePartition, right: RangePartition,
                            merged_id: int, steps: Steps) -> float:
        """The merge up to its commit; returns when both stopped admitting."""
        stopped_at = await self._quiesce([left, right], MERGING, steps)
        await faults.apoint("ps.merge.checkpointed")
        try:
            assert left.meta is not None and right.meta is not None
            intent = meta_derive.merge_intent(left.meta, right.meta, merged_id)
            await _all(side.streams["meta"].append(
                [encode_meta(meta_derive.with_intent(side.meta, intent))])
                for side in (left, right) if side.meta is not None)
            steps.done("intent")
        except BaseException:
            # One side's intent alone is harmless: its next load rolls it back.
            await self._resume([left, right])
            raise
        try:
            await faults.apoint("ps.merge.intent_written")
            left_extents, right_extents = await asyncio.gather(
                seal_all(self.server.streams, left.id, left.epoch),
                seal_all(self.server.streams, right.id, right.epoch))
            steps.done("seal")
            await faults.apoint("ps.merge.sealed")
            ops = _fence(left) + _fence(right)
            for kind in STREAM_KINDS:
                # Siblings of one split share their parent's extents: each listed once, in
                # the left's place, so the right's own extents (its newest meta) come last.
                shared = set(left_extents[kind])
                ops.append(_create_from(merged_id, kind, left_extents[kind] + [
                    e for e in right_extents[kind] if e not in shared]))
            await self._multi_modify(ops + _retire(left.id) + _retire(right.id), merged_id)
            steps.done("commit")
        except BaseException as exc:
            log.warning("partitions %d and %d: merge failed after its intent was written: "
                        "%r", left.id, right.id, exc)
            for side in (left, right):
                await side.stop(f"merge failed after its intent was written: {exc!r}")
            raise
        await faults.apoint("ps.merge.committed")
        for side in (left, right):
            await self._retire_here(side, f"merged into {merged_id}")
        steps.done("stop")
        return stopped_at

    # ---- steps ------------------------------------------------------------------------------

    def _serving(self, partition_id: int) -> RangePartition:
        partition = self.server.partitions.get(partition_id)
        if partition is None or partition.state != SERVING:
            raise PreconditionFailed(f"partition {partition_id} is not served here")
        return partition

    async def _served(self, partition_id: int) -> RangePartition:
        """The partition, served here: loaded first if need be (its load rolls back an
        intent of an earlier attempt that did not commit)."""
        partition = self.server.partitions.get(partition_id)
        if partition is None or partition.state != SERVING:
            await self.server.load(partition_id, ANYWHERE)
        return self._serving(partition_id)

    async def _check_unused(self, *ids: int) -> None:
        for partition_id in ids:
            if (partition_id in self.server.partitions or partition_id in self.server.retired
                    or await streams_exist(self.server.streams, partition_id)):
                raise PreconditionFailed(f"partition id {partition_id} is in use")

    async def _committed(self, made_id: int, *parent_ids: int) -> bool:
        """Whether the operation making `made_id` out of `parent_ids` committed: its one
        multi-modify made `made_id`'s streams and retired the parents' (ids are never
        reused, but a wrong request must not pass for a retry)."""
        if not await streams_exist(self.server.streams, made_id):
            return False
        for parent_id in parent_ids:
            if await streams_exist(self.server.streams, parent_id):
                return False
        return True

    async def _quiesce(self, partitions: Sequence[RangePartition], state: str, steps: Steps
                       ) -> float:
        """Stop admitting, commit what was taken, checkpoint everything: afterwards nothing
        of these partitions is outside their runs, and nothing writes to their streams.
        Returns when admission stopped: the range is unavailable from there."""
        # A checkpoint while they still serve: the one under `state` then writes only what
        # came in meanwhile, so the range is unavailable for less.
        await _all(partition.checkpointer.checkpoint_now() for partition in partitions)
        steps.done("checkpoint")
        stopped_at = self.clock.monotonic()
        for partition in partitions:
            try:
                partition.quiesce(state)
            except PreconditionFailed:  # stopped meanwhile (lease lost, fenced)
                await self._resume(partitions)
                raise
        try:
            if state == MERGING:
                await _all(self._shipped_all(partition) for partition in partitions)
            await _all(self._checkpoint_fully(partition, state) for partition in partitions)
        except BaseException:
            await self._resume(partitions)
            raise
        steps.done("quiesce")
        return stopped_at

    async def _shipped_all(self, partition: RangePartition) -> None:
        """Inter-stamp replication (issue 30) shipped all this merging partition committed:
        the merged partition reads neither parent's commit log on (meta_derive.py), so what
        was not shipped would never be. Unavailable after GEO_DRAIN_S (the secondary is
        slow or down): the merge is retried later, the partitions serve on meanwhile."""
        shipper = partition.shipper
        if shipper is None:
            return
        try:
            await asyncio.wait_for(shipper.drained(), GEO_DRAIN_S)
        except TimeoutError:
            raise Unavailable(f"partition {partition.id} merges only once its writes are on "
                              f"the secondary stamp; {shipper.lag_ops()} are not yet") from None

    async def _checkpoint_fully(self, partition: RangePartition, state: str) -> None:
        await partition.committer.settle()
        # A checkpoint (and the run merge it may start) under way ends first: its record
        # must not land after the intent. A run merge is abandoned, not waited for: it may
        # have gigabytes left to rewrite.
        await partition.checkpointer.abort_merge()
        await partition.checkpointer.closed()
        await partition.checkpointer.checkpoint_now()
        await partition.checkpointer.abort_merge()  # one that checkpoint started
        await partition.checkpointer.closed()
        if partition.state != state or not partition.lease_valid():
            raise PreconditionFailed(f"partition {partition.id} stopped serving while "
                                     f"{state}")
        assert partition.meta is not None
        assert partition.meta.applied_lsn == partition.applied_lsn, (
            partition.meta.applied_lsn, partition.applied_lsn)
        assert not len(partition.memtable) and partition.frozen is None
        # Settled: every write answered early (CURP) is durable, so once this commits the
        # parent's witness records are all garbage (parent_witnesses.py, curp.py step 8).
        assert partition.committer.speculation.last_lsn <= partition.applied_lsn, (
            partition.committer.speculation.last_lsn, partition.applied_lsn)

    async def _resume(self, partitions: Sequence[RangePartition]) -> None:
        for partition in partitions:
            if partition.resume():
                log.warning("partition %d serves on: its split or merge did not begin",
                            partition.id)

    async def _multi_modify(self, ops: list[StreamOp], child_id: int) -> None:
        """One atomic change on the stream manager; an ambiguous failure (a timeout, a
        resend refused because the first attempt applied) is resolved by whether the
        child's metadata stream exists (sm_client.multi_modify_resolved)."""
        await self.server.streams.sm.multi_modify_resolved(ops, stream_name(child_id, "meta"))

    async def _retire_here(self, partition: RangePartition, why: str) -> None:
        """The parent stops for good here (its lease is released); never loaded here
        again."""
        self.server.retired.add(partition.id)
        await partition.stop(why)

    async def _load_split_children(self, parent_id: int, left_id: int, right_id: int,
                                   leases: Leases = NO_LEASES) -> list[RangePartition]:
        await faults.apoint("ps.split.children_loading")
        return await self._load_children(parent_id, (left_id, right_id), (), leases)

    async def _load_merged(self, left_id: int, right_id: int, merged_id: int,
                           leases: Leases = NO_LEASES) -> RangePartition:
        await faults.apoint("ps.merge.merged_loading")
        (merged,) = await self._load_children(None, (merged_id,), (left_id, right_id), leases)
        return merged

    async def _load_children(self, parent_id: int | None, child_ids: Sequence[int],
                             parent_ids: Sequence[int] = (), leases: Leases = NO_LEASES
                             ) -> list[RangePartition]:
        """Load the committed children here; their parents must not serve here any more."""
        parents = []
        for gone_id in (*((parent_id,) if parent_id is not None else ()), *parent_ids):
            self.server.retired.add(gone_id)
            parent = self.server.partitions.get(gone_id)
            if parent is not None and parent.state != GONE:
                await parent.stop("its split or merge committed")
            if parent is not None:
                parents.append(parent)
        for other in self.server.partitions.values():
            assert other.id not in (parent_id, *parent_ids) or other.state == GONE, (
                f"partition {other.id} serves with its children")
        await asyncio.gather(*(self.server.load(child, ANYWHERE, acquired=leases.get(child),
                                                parents=parents)
                               for child in child_ids))
        return [self.server.partitions[child] for child in child_ids]


async def _all(steps: Iterable[Awaitable[None]]) -> None:
    """Run `steps` together; once all have ended, raise the first failure."""
    results = await asyncio.gather(*steps, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


def _fence(partition: RangePartition) -> list[StreamOp]:
    return [fence_op(stream_name(partition.id, kind), partition.epoch) for kind in STREAM_KINDS]


def _create_from(partition_id: int, kind: str, extents: Sequence[int]) -> StreamOp:
    return create_from_op(stream_name(partition_id, kind), extents)


def _retire(partition_id: int) -> list[StreamOp]:
    return [retire_op(stream_name(partition_id, kind)) for kind in STREAM_KINDS]
