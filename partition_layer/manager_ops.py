"""Split and merge, orchestrated by the leading partition manager (split17 design, "PM flow").

Split B at K into C, D:
1. validate (B served, K strictly inside B and a partition name's first key), allocate C, D
   and write the map with the pending op — BEFORE the PS is asked, so a new leader finds it;
   [pm.split.pending_written]
2. S.Split(B, K, C, D) (idempotent on the PS);
3. publish: with CURP on, B's records leave the witnesses for good (DropPartition, best
   effort: parent_witnesses.py), then `with_split` (pending op removed), confirmed[C] =
   confirmed[D] = S, history.
   [pm.split.before_publish: between 2 and 3]
Merge C, D -> E: the right partition is first moved to the left's server (the ordinary
move) if they differ; then the same three steps with S.Merge and `with_merge`.
[pm.merge.pending_written, pm.merge.before_publish]

A call that fails leaves the op pending; every pass `resolve_pending` looks at the stream
manager (has `partition/<first new id>/meta`: committed) and publishes, calls the PS again,
reassigns, or — after `PS_ATTEMPTS_MAX` failed calls without a commit — rolls back
(pending_resolution.py); the operator's call waits for that outcome (OUTCOME_WAIT_S) and
answers it. While an op's first call is pending the pass sends no plain Load of its
sources: a PS's Split loads its parent itself when needed, and the op's own call loads a
merge's two halves on its server just before Merge (the PS's Merge wants both served). A
pending op blocks their loads for at most one try (`may_load`): once a call has failed and
the stream manager says the op did not commit, the pass loads them between tries (a load
drops the uncommitted intent; the next try starts afresh) — the range serves meanwhile,
rather than for as long as the tries and their backoff last.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from common import faults, rpc
from common.clock import Clock
from common.config import PartitionLimits
from common.errors import InvalidArgument, NotFound, StampError, Unavailable
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from partition_layer import pending_resolution
from partition_layer.history import RESULT_OK, HistoryEntry, HistoryStore
from partition_layer.map_store import LeaderMap
from partition_layer.parent_witnesses import ParentWitnesses
from partition_layer.partition_map import (
    BORN_BOOTSTRAP,
    OP_SPLIT,
    PartitionMap,
    PendingOp,
    least_loaded,
)
from partition_layer.partition_streams import stream_name
from stream_layer.sm_client import AsyncStreamManagerClient

log = logging.getLogger(__name__)

OP_TIMEOUT_S = 120.0  # one PS Split / Merge: checkpoint, seal, one multi-modify, two loads
PS_ATTEMPTS_MAX = 5   # failed PS calls without a commit before a pending op is rolled back
# An operator's split or merge whose first call failed waits this long for the pass to
# finish it (or roll it back) before answering that it is still pending.
OUTCOME_WAIT_S = 60.0
OUTCOME_POLL_S = 0.2


@dataclass(frozen=True)
class OpDone:
    """What a finished split or merge did: its history entry and the map that published
    it."""
    entry: HistoryEntry
    published: PartitionMap


class ManagerSite(Protocol):
    """What the coordinator needs of its partition manager, and all it touches besides the
    map (`LeaderMap`, passed on its own) — manager.PartitionManager is one — as the
    committer reaches its partition through CommitSite: this module does not import the
    manager, which imports it."""

    name: str
    limits: PartitionLimits
    sm: AsyncStreamManagerClient | None  # None: a pending op's commit is not known
    confirmed: dict[int, str]  # partition -> the server that confirmed loading it
    history: HistoryStore

    async def require_leader(self) -> None: ...

    async def live(self) -> dict[str, str]:
        """{server: address} of the registered servers, listed now."""

    async def split_key(self, partition_id: int, current: PartitionMap) -> bytes:
        """The balance policy's split key for the partition."""

    async def move(self, partition_id: int, server: str, trigger: str) -> object: ...

    async def settle_load(self, partition_id: int) -> None:
        """Until a Load of the partition the manager has in flight has ended."""

    async def record(self, entry: HistoryEntry) -> None: ...

    def spawn(self, work: Coroutine[Any, Any, None]) -> None: ...

    def stub(self, address: str) -> pb_grpc.PartitionServerStub: ...


class SplitMergeCoordinator:
    """The manager's side of split and merge (the partition server's, which does them, is
    split_merge.SplitMerge): ask the server, publish the result in the map, and resolve
    pending ones. `busy` holds the sources of every op with a PS call in flight from this
    process: the pass leaves those alone."""

    def __init__(self, manager: ManagerSite, maps: LeaderMap, clock: Clock) -> None:
        self.manager = manager
        self.maps = maps
        self.clock = clock
        self.busy: set[int] = set()
        self._not_before: dict[tuple[int, ...], float] = {}  # op sources -> monotonic time
        # (sources, results) of pending ops the stream manager said did not commit, after a
        # failed call: their sources may be loaded between tries (`may_load`).
        self._uncommitted: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
        # CURP step 8: a committed op's parents leave the witnesses (parent_witnesses.py).
        self.parents = ParentWitnesses()

    def may_load(self, partition_id: int, current: PartitionMap) -> bool:
        """Whether the pass may send a plain Load of the partition: always, unless a pending
        op names it; then only a source of an op that failed a call, did not commit (the
        stream manager said so) and has no call in flight (module docstring)."""
        op = current.pending_for(partition_id)
        if op is None:
            return partition_id not in self.busy
        return (partition_id in op.sources and op.attempts >= 1
                and (op.sources, op.results) in self._uncommitted
                and not set(op.sources) & self.busy)

    # ---- split ------------------------------------------------------------------------------

    async def split(self, partition_id: int, key: bytes | None, trigger: str) -> OpDone:
        m = self.manager
        await m.require_leader()
        async with self.maps.lock:
            live = await m.live()
            current, version = await self.maps.current()
            entry = current.get(partition_id)
            self._require_served(entry.id, entry.server, live)
            if not key:
                key = await m.split_key(partition_id, current)
            if partition_id in self.busy:
                raise InvalidArgument(f"partition {partition_id} has an operation under way")
            pending, op = current.with_pending_split(partition_id, key, trigger,
                                                     self.clock.wall())
            await self.maps.write(pending, version)
            self.busy.add(partition_id)
        try:
            await faults.apoint("pm.split.pending_written")
            await m.settle_load(partition_id)
            return await self._call_and_publish(op, live[op.server])
        except Unavailable as exc:
            failed = exc
        finally:
            self.busy.discard(partition_id)
        return await self._outcome(op, failed)

    # ---- merge ------------------------------------------------------------------------------

    async def merge(self, left_id: int, right_id: int, trigger: str) -> OpDone:
        m = self.manager
        await m.require_leader()
        live = await m.live()
        current, _ = await self.maps.current()
        left = current.get(left_id)
        right = current.right_neighbour(left_id) if right_id == 0 else current.get(right_id)
        if left.high is None or left.high != right.low:
            raise InvalidArgument(f"partitions {left.id} and {right.id} are not adjacent "
                                  f"(merge ID [ID2]: ID2 is ID's right neighbour)")
        for source in (left.id, right.id):
            if source in self.busy or current.pending_for(source) is not None:
                raise InvalidArgument(f"partition {source} has an operation under way")
        self._require_served(left.id, left.server, live)
        if right.server != left.server:
            await m.move(right.id, left.server, trigger=trigger)
        async with self.maps.lock:
            current, version = await self.maps.current()
            if current.get(right.id).server != left.server:
                raise Unavailable(f"partition {right.id} moved away from {left.server} meanwhile")
            pending, op = current.with_pending_merge(left.id, right.id, trigger,
                                                     self.clock.wall())
            await self.maps.write(pending, version)
            self.busy.update(op.sources)
        try:
            await faults.apoint("pm.merge.pending_written")
            await m.settle_load(left.id)
            await m.settle_load(right.id)
            return await self._call_and_publish(op, live[op.server])
        except Unavailable as exc:
            failed = exc
        finally:
            self.busy.difference_update(op.sources)
        return await self._outcome(op, failed)

    async def _outcome(self, op: PendingOp, failed: Unavailable) -> OpDone:
        """An operator's op whose call failed stays pending and the pass resolves it (calls
        again, publishes, or rolls back): wait for that, up to OUTCOME_WAIT_S, and answer
        what happened rather than "it failed" when it then completes."""
        m = self.manager
        deadline = self.clock.monotonic() + OUTCOME_WAIT_S
        while self.clock.monotonic() < deadline:
            await asyncio.sleep(OUTCOME_POLL_S)
            current, _ = await self.maps.current()
            if any(p.sources == op.sources and p.results == op.results
                   for p in current.pending):
                continue
            for entry in reversed(await asyncio.to_thread(m.history.read)):
                if entry.op == op.op and entry.to_ids == op.results:
                    if entry.result == RESULT_OK:
                        return OpDone(entry, current)
                    raise Unavailable(f"{op.op} of {_sources(op)}: {entry.result}")
        raise failed

    # ---- the PS call and the publication ----------------------------------------------------

    async def _call_and_publish(self, op: PendingOp, address: str) -> OpDone:
        """Ask the op's server to do it, then publish. A failed call counts an attempt and
        leaves the op pending for `resolve_pending`."""
        try:
            unavailable_s = await self._call_ps(op, address)
        except StampError as exc:
            await self._count_attempt(op)
            raise Unavailable(f"{op.op} of {_sources(op)} on {op.server} did not finish: {exc}; "
                              f"it stays pending and the manager resolves it") from exc
        if op.op == OP_SPLIT:
            await faults.apoint("pm.split.before_publish")
        else:
            await faults.apoint("pm.merge.before_publish")
        return await self._publish(op, op.server, unavailable_s, op.trigger, served=True)

    async def _call_ps(self, op: PendingOp, address: str) -> float:
        stub = self.manager.stub(address)
        version = self.maps.version
        if op.op == OP_SPLIT:
            reply = await rpc.call(stub.Split(pb.SplitRequest(
                partition_id=op.parent, key=op.key, left_id=op.left, right_id=op.right,
                map_version=version), timeout=OP_TIMEOUT_S))
        else:
            await self._load_merge_sources(op, stub)
            reply = await rpc.call(stub.Merge(pb.MergeRequest(
                left_id=op.left, right_id=op.right, merged_id=op.merged, map_version=version),
                timeout=OP_TIMEOUT_S))
        return float(reply.unavailable_s)

    async def _load_merge_sources(self, op: PendingOp, stub: pb_grpc.PartitionServerStub
                                  ) -> None:
        """A merge needs both halves served on its server (a PS's Merge, unlike its Split,
        loads nothing): after a failed try they may have stopped there (the intent was
        written), or have just been reassigned to it. Load is idempotent and a loader drops
        an intent that did not commit."""
        m = self.manager
        current, _ = await self.maps.current()
        for source in op.sources:
            if op.attempts == 0 and m.confirmed.get(source) == op.server:
                continue  # the first try: it serves them already
            entry = current.get(source)
            await rpc.call(stub.Load(pb.LoadRequest(
                partition_id=source, range=entry.range_pb(), map_version=current.version,
                create_if_missing=entry.born == BORN_BOOTSTRAP),
                timeout=m.limits.load_timeout_ms / 1000))

    async def _publish(self, op: PendingOp, server: str, unavailable_s: float, trigger: str,
                       served: bool = False) -> OpDone:
        """Publish the op's results on `server`. `served`: that server just answered that it
        serves them (they are confirmed there); else the pass sends them a Load. The op has
        committed: its parents' witness records go first, while the map still holds the op,
        so a successor redoes it after a crash (parent_witnesses.py)."""
        m = self.manager
        await self.parents.drop(m.sm, op.sources, curp=m.limits.curp)
        async with self.maps.lock:
            current, version = await self.maps.current()
            if not any(p.sources == op.sources and p.results == op.results
                       for p in current.pending):
                raise Unavailable(f"the pending {op.op} of {_sources(op)} was resolved "
                                  f"by someone else")
            if op.op == OP_SPLIT:
                new = current.with_split(op.parent, op.key, op.left, op.right)
            else:
                new = current.with_merge(op.left, op.right, op.merged)
            if server != new.get(op.results[0]).server:
                new = new.assigned({result: server for result in op.results})
            await self.maps.write(new, version)
            for result in op.results:
                if served:
                    m.confirmed[result] = server
                else:
                    m.confirmed.pop(result, None)
            for source in op.sources:
                m.confirmed.pop(source, None)
        entry = HistoryEntry(op.op, trigger, op.sources, op.results, op.started_at,
                             seconds=self.clock.wall() - op.started_at,
                             unavailable_s=unavailable_s, result=RESULT_OK,
                             map_version=new.version, key=op.key, server=server)
        await m.record(entry)
        log.info("%s: %s %s -> %s on %s (map version %d, unavailable %.3f s)", m.name, op.op,
                 _sources(op), _ids(op.results), server, new.version, unavailable_s)
        return OpDone(entry, new)

    async def _count_attempt(self, op: PendingOp) -> PendingOp:
        async with self.maps.lock:
            current, version = await self.maps.current()
            now = next((p for p in current.pending if p.sources == op.sources), None)
            if now is None:
                return op
            counted, after = current.with_attempt(now)
            await self.maps.write(counted, version)
            return after

    # ---- pending resolution (every pass) ----------------------------------------------------

    def resolve_pending(self, current: PartitionMap, live: dict[str, str]) -> None:
        """Start resolving every pending op with no PS call in flight (tasks: a Split may
        take a while, the pass goes on)."""
        now = self.clock.monotonic()
        for op in current.pending:
            if not set(op.sources) & self.busy and self._not_before.get(op.sources, 0) <= now:
                self.busy.update(op.sources)
                self.manager.spawn(self._resolve_one(op, live))

    async def _resolve_one(self, op: PendingOp, live: dict[str, str]) -> None:
        m = self.manager
        try:
            committed = await self.committed(op)
            if committed is False:
                self._uncommitted.add((op.sources, op.results))
            else:  # committed, or nobody knows: its sources must not be loaded as they were
                self._uncommitted.discard((op.sources, op.results))
            current, _ = await self.maps.current()
            fresh = next((p for p in current.pending
                          if p.sources == op.sources and p.results == op.results), None)
            if fresh is None:
                return  # resolved meanwhile (by the operator's call, or another leader)
            op = fresh
            spare = least_loaded(live, current)
            decision = pending_resolution.resolve(
                op, committed, live, spare, PS_ATTEMPTS_MAX if m.sm is not None else 1 << 30)
            if decision.action == pending_resolution.WAIT:
                # Nothing to do until the stream manager or a server answers: look again in
                # a while, not every pass.
                log.debug("%s: pending %s of %s: %s", m.name, op.op, _sources(op), decision.why)
                self._not_before[op.sources] = self.clock.monotonic() + self._backoff_s()
                return
            log.info("%s: pending %s of %s: %s (%s)", m.name, op.op, _sources(op),
                     decision.action, decision.why)
            if decision.action == pending_resolution.PUBLISH:
                await self._publish(op, decision.server, 0.0, op.trigger)
            elif decision.action == pending_resolution.ROLL_BACK:
                await self._roll_back(op, decision.why)
            elif decision.action in (pending_resolution.RETRY, pending_resolution.REASSIGN):
                if decision.action == pending_resolution.REASSIGN:
                    op = await self._reassign(op, decision.server)
                for source in op.sources:  # a load between tries must not race the call
                    await m.settle_load(source)
                await self._call_and_publish(op, live[decision.server])
        except StampError as exc:
            log.warning("%s: resolving the pending %s of %s: %s", m.name, op.op,
                        _sources(op), exc)
            self._not_before[op.sources] = (self.clock.monotonic()
                                            + self._backoff_s() * (op.attempts + 1))
        finally:
            self.busy.difference_update(op.sources)

    def _backoff_s(self) -> float:
        """Seconds before a pending op is looked at again, per failed attempt
        (`partition.split_retry_backoff_ms`: common/config.py says why)."""
        return self.manager.limits.split_retry_backoff_ms / 1000

    async def committed(self, op: PendingOp) -> bool | None:
        """Whether the op's multi-modify committed (its first new meta stream exists); None
        when the stream manager does not say. Without a stream manager: False — the PS,
        whose Split / Merge is idempotent, is asked again and decides (and nothing is rolled
        back: the caller lifts the bound)."""
        sm = self.manager.sm
        if sm is None:
            return False
        try:
            await sm.open_stream(stream_name(op.results[0], "meta"))
            return True
        except NotFound:
            return False
        except StampError as exc:
            log.info("%s: the stream manager did not say whether %s committed: %s",
                     self.manager.name, op, exc)
            return None

    async def _reassign(self, op: PendingOp, server: str) -> PendingOp:
        m = self.manager
        async with self.maps.lock:
            current, version = await self.maps.current()
            new = current.assigned({source: server for source in op.sources})
            await self.maps.write(new, version)
        for source in op.sources:
            m.confirmed.pop(source, None)
        return next(p for p in new.pending if p.sources == op.sources)

    async def _roll_back(self, op: PendingOp, why: str) -> None:
        m = self.manager
        async with self.maps.lock:
            current, version = await self.maps.current()
            now = next((p for p in current.pending if p.sources == op.sources), None)
            if now is None:
                return
            new = current.without_pending(now)
            await self.maps.write(new, version)
        await m.record(HistoryEntry(op.op, op.trigger, op.sources, op.results,
                                    op.started_at, seconds=self.clock.wall() - op.started_at,
                                    result=f"rolled back: {why}", map_version=new.version,
                                    key=op.key, server=op.server))
        log.warning("%s: rolled back the %s of %s: %s", m.name, op.op, _sources(op), why)

    async def close(self) -> None:
        await self.parents.close()

    @staticmethod
    def _require_served(partition_id: int, server: str, live: dict[str, str]) -> None:
        if server not in live:
            raise Unavailable(f"partition {partition_id} is not served now "
                              f"({server or 'unassigned'} is not live); try again later")


def _ids(ids: tuple[int, ...]) -> str:
    return "+".join(str(i) for i in ids)


def _sources(op: PendingOp) -> str:
    return f"partition {_ids(op.sources)}"
