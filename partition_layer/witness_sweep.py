"""An owner's sweep of its CURP witnesses (issue 32, curp.py step 6): the records its drops
missed leave them, and so do the records of writes it never executed.

A record outlives its write's durability when its Drop was lost (drops are not awaited) or
when it landed after the Drop (the front end's record and its request race). A record whose
write never reached the owner (lost on the way, refused, dropped past its deadline) is never
dropped by durability at all. Left there, either would be executed by the next owner's
recovery: the first, after its token row expired, over newer writes (review finding F1).

Contracts:
- `Sweeper(p, calls, lost)`, started once `p` serves with `calls` (witness_repick.py),
  every `limits.curp_sweep_interval_ms` lists at each witness the records of `p`'s epoch held
  at least `limits.curp_sweep_age_ms`, judges each (`judge`) and drops the ones judged gone:
  - its write is durable here (its token row is in the partition, in no block in flight):
    a leftover;
  - its write was never executed here: the owner *condemns* its token first
    (Speculation.condemn), so that the committer never answers that write early from then
    on, only once durable — no acknowledgement can rest on a record about to go. Judging and
    condemning happen with no await between the last look at the rows and the condemnation,
    so a write decided meanwhile is seen in flight instead.
  A record whose write is in flight stays: its drop follows its durability.
  A witness silent (no List answered) for `limits.curp_witness_lost_ms` is reported to
  `lost(silent addresses)`, which replaces the set if it can (witness_repick.repick), and
  so is every round once the set is `abandoned` (a newer set was fenced over it: its List
  sees nothing, so no round of it counts); the sweep ends once `p` serves with another set.
  A round's drops are durable when answered.
- A condemned token is remembered until its record's deadline (the front end's clock, which
  stops waiting for an answer then) has passed on the owner's clock by CLOCK_SKEW_S; after
  that an early answer could be acknowledged by no one.
- `OwnerCalls.swept_at` (wall time, s): the start of the latest round in which every
  witness answered its List and every Drop, or when the set was fenced and cleared at load
  (it held nothing older then). After such a round no witness holds a record accepted more
  than the sweep age before it began whose write was durable when it began. An entity
  write's token row may expire only once written ENTITY_TOKEN_TTL_MS before `swept_at`
  (`tokens_expire_before_ms`, checkpoint.py): a witness that stops answering stops the
  expiry rather than keep a record whose token is gone. (The TTL is already far past any
  client's retry window, so a record of a token that old landed, and was swept, long
  before.) Likewise a trimmed log's token rows stay until as old (`SafeVersions`, by the
  row versions, which rise in commit order): without its token row, a recovery would
  append a leftover record's records again. `token_cutoffs` gives a checkpoint both.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any

from common import rpc
from common.errors import InvalidArgument, StampError
from common.proto import witness_pb2 as wpb
from common.proto import witness_pb2_grpc as wpb_grpc
from partition_layer import keys
from partition_layer.operations import ENTITY_TOKEN_TTL_MS
from partition_layer.witness_set import CALL_TIMEOUT_S, DROP_TOKENS_MAX, OwnerCalls

if TYPE_CHECKING:
    from partition_layer.partition import RangePartition

log = logging.getLogger(__name__)

# How far the front ends' clocks may be from the owner's: a condemned token is kept this long
# past its record's deadline.
CLOCK_SKEW_S = 10.0


def token_key_of(record: wpb.WitnessRecord) -> bytes | None:
    """The key of the token row a record's write leaves when executed, from its footprint
    (curp.footprint_of): an entity write holds its name shared, an append holds it
    exclusively and alone. None for a footprint of another shape (no fast write has one)."""
    if len(record.shared) == 1:
        name = record.shared[0]
    elif len(record.exclusive) == 1 and not record.shared:
        name = record.exclusive[0]
    else:
        return None
    try:
        at = keys.kind_offset(name)
    except InvalidArgument:
        return None
    if name[at] != keys.KIND_META or len(name) != at + 1:
        return None
    return name[:at] + bytes((keys.KIND_TOKEN,)) + record.token


def condemned_until_s(record: wpb.WitnessRecord, now_s: float) -> float:
    """Until when a token swept unexecuted stays condemned (module contract); a record
    without a deadline (front ends send none) for a token row's whole TTL."""
    if not record.deadline_ms:
        return now_s + ENTITY_TOKEN_TTL_MS / 1000
    return record.deadline_ms / 1000 + CLOCK_SKEW_S


def tokens_expire_before_ms(now_s: float, swept_at_s: float | None) -> int:
    """The wall time (ms) before which an entity write's token row may expire: its TTL
    before now, and before the witnesses' last full sweep (module contract; None: the
    partition has no witnesses)."""
    upto_s = now_s if swept_at_s is None else min(now_s, swept_at_s)
    return int(upto_s * 1000) - ENTITY_TOKEN_TTL_MS


class SafeVersions:
    """Up to which row version a trimmed log's token rows may go (module contract): an
    append's token row has no date, but row versions rise in commit order, so the version
    floor sampled at a time dates every row at or below it. A sample taken at least
    ENTITY_TOKEN_TTL_MS before the last full sweep is safe, as an entity token that old
    would be; so is the floor when the set was fenced and cleared (it held nothing then)."""

    SAMPLES_MAX = 4096  # past it the oldest go unused: the bound only stays lower

    def __init__(self, floor: int) -> None:
        self.safe = floor
        self._samples: deque[tuple[float, int]] = deque()

    def sample(self, at_s: float, floor: int) -> None:
        if len(self._samples) >= self.SAMPLES_MAX:
            self._samples.popleft()
        self._samples.append((at_s, floor))

    def safe_upto(self, swept_at_s: float) -> int:
        upto_s = swept_at_s - ENTITY_TOKEN_TTL_MS / 1000
        while self._samples and self._samples[0][0] <= upto_s:
            self.safe = max(self.safe, self._samples.popleft()[1])
        return self.safe


def token_cutoffs(calls: OwnerCalls | None, now_s: float, recovering: bool = False
                  ) -> tuple[int, int | None]:
    """What a checkpoint's merge may drop of token rows: entity tokens written before the
    first (ms), trimmed logs' token rows of a version up to the second (None: any). None
    while the partition recovers: the records it is executing may be leftovers its last
    owner kept those rows for (a witness out of its sweep's reach)."""
    if recovering:
        return 0, -1
    if calls is None or calls.swept_at is None:
        return tokens_expire_before_ms(now_s, None), None
    return (tokens_expire_before_ms(now_s, calls.swept_at),
            calls.safe_versions.safe_upto(calls.swept_at))


class Sweeper:
    """The sweep of one owner's witness set (module contract)."""

    def __init__(self, p: RangePartition, calls: OwnerCalls,
                 lost: Callable[[Collection[str]], Awaitable[bool]]) -> None:
        self.p = p
        self.calls = calls
        self.lost = lost
        self._silent_since: dict[str, float] = {}  # address -> monotonic s
        calls.swept_at = time.time()  # the set was fenced and cleared just now
        calls.safe_versions = SafeVersions(p.version_floor)
        self._failing = False  # the last round missed a witness (logged once)

    def start(self) -> None:
        self.calls.tasks.add(asyncio.get_running_loop().create_task(self._run()))

    async def _run(self) -> None:
        interval_s = self.p.limits.curp_sweep_interval_ms / 1000
        while not self.p.gone() and self.p.witnesses is self.calls:
            await asyncio.sleep(interval_s)
            if self.p.gone() or not self.p.lease_valid() or self.p.witnesses is not self.calls:
                continue  # a deposed owner's List answers nothing anyway
            try:
                await self.sweep()
                silent = self._silent(time.monotonic())
                if silent or self.calls.abandoned:
                    await self.lost(silent)
            except StampError as exc:  # the stream manager unreachable, a checkpoint read
                log.warning("partition %d: the sweep of its witnesses failed: %s", self.p.id,
                            exc)
            except Exception:  # a bug: logged, and the sweep goes on (it guards the expiry)
                log.exception("partition %d: the sweep of its witnesses failed", self.p.id)

    async def sweep(self) -> bool:
        """One round; whether every witness answered every call."""
        started = time.time()
        self.calls.safe_versions.sample(started, self.p.version_floor)
        request = wpb.ListRequest(partition_id=self.p.id, epoch=self.calls.epoch,
                                  older_than_ms=self.p.limits.curp_sweep_age_ms)
        answers = await self._each("List", request)
        full = all(answer is not None for answer in answers)
        now = time.monotonic()
        for address, answer in zip(self.calls.members.addresses, answers, strict=True):
            if answer is None:
                self._silent_since.setdefault(address, now)
            else:
                self._silent_since.pop(address, None)
        records: dict[bytes, wpb.WitnessRecord] = {}
        for answer in answers:
            for record in answer.records if answer is not None else ():
                records.setdefault(record.token, record)
        gone = [token for token, record in records.items() if await self.judge(record)]
        for at in range(0, len(gone), DROP_TOKENS_MAX):
            drop = wpb.DropRequest(partition_id=self.p.id, epoch=self.calls.epoch,
                                   tokens=gone[at:at + DROP_TOKENS_MAX], durable=True)
            full &= all(answer is not None for answer in await self._each("Drop", drop))
        self.p.committer.speculation.forget_condemned(time.time())
        if full and not self.calls.abandoned:  # an abandoned set's List sees nothing
            self.calls.swept_at = started
        if full == self._failing:
            self._failing = not full
            log.log(logging.WARNING if not full else logging.INFO,
                    "partition %d: the sweep of its witnesses %s", self.p.id,
                    "missed a witness: entity tokens stop expiring until it answers again"
                    if not full else "reaches every witness again")
        if gone:
            log.debug("partition %d: swept %d records", self.p.id, len(gone))
        return full

    def _silent(self, now: float) -> list[str]:
        """The members silent for `curp_witness_lost_ms` or more."""
        lost_s = self.p.limits.curp_witness_lost_ms / 1000
        return [a for a, since in self._silent_since.items() if now - since >= lost_s]

    async def judge(self, record: wpb.WitnessRecord) -> bool:
        """Whether `record` goes (module contract); condemns its token if it was never
        executed. A record of an unknown shape stays, for a recovery to execute."""
        key = token_key_of(record)
        if key is None:
            log.warning("partition %d: a witness holds a record of no fast write's shape",
                        self.p.id)
            return False
        committer = self.p.committer
        if committer.row_in_flight(key):
            return False
        known, row = self.p.row_in_memory(key)
        if not known:
            row = await self.p.row_from_checkpoints(key, remember_absent=False)
            # Decided meanwhile? Then in flight, or applied (in memory), now.
            if committer.row_in_flight(key):
                return False
            known, now_row = self.p.row_in_memory(key)
            row = now_row if known else row
        if row is not None and not row.tombstone:
            return True  # executed, and durable: a leftover
        # Never executed here: it is never answered early from now on (no await since the
        # look above), then its records go.
        committer.speculation.condemn(key, condemned_until_s(record, time.time()))
        return True

    async def _each(self, method: str, request: Any) -> list[Any]:
        """`method` at every witness at once: each one's answer, None where it failed."""
        async def one(address: str) -> Any:
            stub = wpb_grpc.WitnessStub(self.calls.channels.get(address))
            try:
                return await rpc.call(getattr(stub, method)(request, timeout=CALL_TIMEOUT_S))
            except StampError as exc:
                log.debug("partition %d: sweep: %s at witness %s: %s", self.p.id, method,
                          address, exc)
                return None
        return list(await asyncio.gather(*(one(a) for a in self.calls.members.addresses)))
