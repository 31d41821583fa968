"""An owner's speculative answers (CURP, issue 32: partition_layer/curp.py steps 3-5): which
writes the group committer may answer before their block is durable, the rows those answers
wrote until it is, and waits for the commit log to hold an LSN.

Contracts:
- `early_version(...)` decides, before an op is applied, whether it may be answered early
  and at which version: only an op its front end asked for (a `version_hint`), that read no
  row a block in flight wrote (its answer then depends only on what is durable, so a
  recovery executing it again answers the same), and — for an entity write, whose version
  is its ETag — whose hint lies above every version the partition holds; that op's version
  is then the hint (curp.py step 4). Others keep the committer's version and are answered
  when durable, as ever.
- `replay_version(...)`: the version of a write a recovering owner executes from a witness's
  record (`replaying` is set while it does): max(the hint, each of its rows' version + 1).
  For a write the old owner answered early that is the hint, as it answered (its hint was
  above every version then, and no write after it changed its rows, or it would be durable
  and not executed again); for one it never answered, a version above its rows' (in doubt,
  any is right that repeats no ETag of the row).
- `wrote(keys, lsn)` notes the rows an early answer wrote; `durable(lsn, pendings)` (a block
  applied, `lsn` its last write's, None if it wrote nothing) forgets those the commit log now
  holds, wakes every wait for them, and tells the owner's witnesses (`drop`, once it has
  some) to drop the records of the block's hinted appends and entity writes (those whose
  front end recorded them at this owner's set). Not the others: a write on the plain path
  has no record, and dropping every write's token cost three Drop calls a block that made
  a stamp with CURP on slower on its plain path too; a front end's retry of a fast write,
  which goes without its hint, leaves its records to the owner's sweep (witness_sweep.py,
  curp.py step 6).
- `condemn(token_key, until_s)`: the owner's sweep took that write's records from the
  witnesses (witness_sweep.py): until wall time `until_s` it may not be answered early
  (`may_answer_early`), only once durable; `forget_condemned(now_s)` forgets those past.
- `until_durable(lsn)` returns once the partition applied every write through `lsn` (in LSN
  order, after it was durable); `until_rows_durable(keys)` once no row among `keys` holds an
  early answer's write still in flight; `until_all_durable()` once no row does. Each
  raises Unavailable when the partition stops first (`fail`): whether the write survives is
  then the next owner's to tell.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from common.errors import StampError
from partition_layer.operations import EntityWrite, LogAppend, Operation, RowView
from partition_layer.queued_op import Pending

# Set while a loading owner executes the records its witnesses held (witness_replay.py): its
# operations are queued as `recovered` (committer.py), and the partition, still not serving
# anyone else, lets them in (RangePartition.check_serving).
replaying: ContextVar[bool] = ContextVar("replaying", default=False)


@dataclass(frozen=True, slots=True)
class Speculative:
    """An answer given before its write was durable: the operation's result, and the epoch
    of the owner's witness set (witness_set.set_epoch) and the write's LSN, which a front
    end's SyncOp names to wait for it."""

    result: Any
    epoch: int
    lsn: int


def early_version(op: Operation, hint: int, floor: int, version: int,
                  in_flight: Callable[[bytes], bool]) -> int | None:
    """The version `op` is given if it may be answered early, else None (module contract).
    `version` is the committer's; `in_flight(key)`: a block in flight wrote that row."""
    if not hint or any(in_flight(key) for key in op.reads()):
        return None
    if not isinstance(op, EntityWrite):
        return version  # a log's rows answer no version: they keep the committer's
    return hint if hint > floor else None


def replay_version(op: Operation, hint: int, view: RowView, version: int) -> int:
    """The version of a write executed again from a witness's record (module contract);
    `version` is the committer's, which a log's rows keep."""
    if not isinstance(op, EntityWrite) or not hint:
        return version
    rows = (view.row(op.key(write)) for write in op.writes)
    return max(hint, max((row.version + 1 for row in rows if row is not None), default=0))


class Speculation:
    def __init__(self) -> None:
        self._rows: dict[bytes, int] = {}  # row -> LSN of the latest early answer's write
        self._by_lsn: dict[int, tuple[bytes, ...]] = {}  # in LSN order
        self.last_lsn = 0  # of the latest early answer's write
        self._applied = 0
        self._waits: list[tuple[int, int, asyncio.Future[None]]] = []  # a heap by LSN
        self._order = itertools.count()  # ties broken by arrival: futures do not compare
        self._failed: StampError | None = None
        # The owner's witnesses' Drop (witness_set.OwnerCalls.drop), once it has some, and
        # their set's epoch, which early answers name; 0: none are given (no set, or one
        # being replaced: witness_repick.py).
        self.drop: Callable[[list[bytes]], None] | None = None
        self.epoch = 0
        self._condemned: dict[bytes, float] = {}  # token key -> until (wall s)

    def condemn(self, token_key: bytes, until_s: float) -> None:
        self._condemned[token_key] = max(until_s, self._condemned.get(token_key, 0.0))

    def forget_condemned(self, now_s: float) -> None:
        for key in [k for k, until_s in self._condemned.items() if until_s < now_s]:
            del self._condemned[key]

    def may_answer_early(self, op: Operation) -> bool:
        """Not without a set (`epoch` 0), nor if its records were swept (`condemn`): an
        acknowledgement needs them."""
        if not self.epoch:
            return False
        return not (self._condemned and isinstance(op, LogAppend | EntityWrite) and op.token
                    and op.token_key in self._condemned)

    def answer(self, pending: Pending, result: Any, written: list[bytes], lsn: int) -> None:
        """Answer a decided op before its block is durable: `Speculative`, naming the LSN
        of its write (`wrote` notes its rows), or, if it wrote nothing, its result as it is
        (final: it rests on durable rows only)."""
        if not written:
            pending.answer(result, None)
            return
        self.wrote(written, lsn)
        pending.answer(Speculative(result, self.epoch, lsn), None)

    def wrote(self, keys: Iterable[bytes], lsn: int) -> None:
        written = tuple(keys)
        for key in written:
            self._rows[key] = lsn
        self._by_lsn[lsn] = written
        self.last_lsn = lsn

    def durable(self, lsn: int | None, pendings: Iterable[Pending]) -> None:
        if lsn is not None:
            self.applied_through(lsn)
        if self.drop is not None:
            tokens = [p.op.token.encode() for p in pendings if p.hint and not p.recovered
                      and isinstance(p.op, LogAppend | EntityWrite) and p.op.token]
            if tokens:
                self.drop(tokens)

    def applied_through(self, lsn: int) -> None:
        self._applied = max(self._applied, lsn)
        while self._by_lsn:
            first = next(iter(self._by_lsn))
            if first > lsn:
                break
            for key in self._by_lsn.pop(first):
                if self._rows.get(key) == first:
                    del self._rows[key]
        while self._waits and self._waits[0][0] <= lsn:
            future = heapq.heappop(self._waits)[2]
            if not future.done():
                future.set_result(None)

    def fail(self, error: StampError) -> None:
        """The partition stopped: every wait, now and later, raises `error`."""
        self._failed = error
        waits, self._waits = self._waits, []
        for _, _, future in waits:
            if not future.done():
                future.set_exception(error)

    async def until_durable(self, lsn: int) -> None:
        if lsn <= self._applied:
            return
        if self._failed is not None:
            raise self._failed
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waits, (lsn, next(self._order), future))
        await future

    async def until_all_durable(self) -> None:
        """Until every write answered early so far is durable (a scan reads many rows)."""
        await self.until_durable(self.last_lsn)

    async def until_rows_durable(self, keys: Iterable[bytes]) -> None:
        lsn = max((self._rows.get(key, 0) for key in keys), default=0)
        if lsn:
            await self.until_durable(lsn)
