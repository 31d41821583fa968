"""The checker's geo rules (`stamp chaos --geo`, issue 30), as pure functions of what the run
recorded, what the account's primary holds at the end, and what the deposed primaries set
aside: on top of the one-stamp rules (tools/chaos/check.py), which run afterwards on the
history these rules relax.

What may be lost, and nothing else (the issue's words: "writes acknowledged after the last
sync time may be lost", and an old primary's tail "is kept aside, never merged silently"):
- each write is judged against the unplanned failover that may have lost it (`deposing`):
  the first whose new primary was named after the write was sent (the last one, for a write
  sent later: to a deposed primary that came back before it heard);
- an acknowledged write that the final primary does not hold is a violation unless its
  failover's last sync time, as the location reported it before the failover, precedes its
  acknowledgement (by more than SLACK_S: the client saw it after the stamp took it) AND a
  deposed primary set it aside (`stamp location tail`). A planned failover excuses nothing:
  every write acknowledged before it must be at the new primary, and is named so if not;
- a write in doubt that the final primary does not hold and a tail does is excused too (it
  happened, at the old primary, and was set aside): reads that saw it are then explained;
- a log record counts as held when its bytes are anywhere in its log (where is the one-stamp
  rules' business: a record at another sequence number is still "reordered" there); an
  append partly held is left to them too;
- a row's final value tells which acknowledged puts it lost: every one after the put that
  wrote it (all of them, for a row that is gone). But a row is overwritten: a put the
  failover lost may be hidden by later ones, while readers and the writer's ETags saw it go.
  So every put set aside is excused whatever the row holds at the end: one acknowledged
  after its failover's last sync time (or in doubt), sent to the deposed primary (before the
  new primary was named, or found in a tail as such), whose row a tail holds at its value or
  a later one of the same writer (a tail squashes a name's rows over one shipping batch).

How the one-stamp rules are relaxed for what was excused, exactly:
- histories (`relaxed_history`): an excused record is no longer acknowledged but in doubt
  (it may be absent); a row whose lost puts were excused is expected to hold its final value
  (that put's number, acknowledged or in doubt); the writer's own ETag complaints (a put on
  the current ETag refused, one on a stale ETag accepted) are dropped when that "current"
  ETag was returned by an excused put: the failover made an older ETag current again;
- linearizability (`relaxed_oplog`): an excused append is taken out of the history (its
  records are gone), and so are the log reads that returned one of its records, and those
  sent before its failover named the new primary that start past its first record (their
  start is a length only the lost records made: a reader starts near the end it saw). An
  excused put becomes a put in doubt (it may have taken effect, or never: one acknowledged
  after the last sync time may also have been shipped); the old primary's answers that may
  have come from it are left out: gets sent before its failover named the new primary that
  returned its value, and conditional puts on its row refused between its sending and then.
  Every other op stays, the reads and writes on either side of the failover included: the
  history must be linearizable with those writes lost or not. Nothing else is relaxed: a
  stale read of anything not excused, at either stamp, is a violation (though a read at the
  old primary that missed a record it then lost goes unseen: that record is no longer in the
  history);
- subscribers (`followed_views`): a delivery of an excused record is not judged, and stands
  for the record the final primary holds at that sequence number (if any): the failover gave
  that number to another record, which a subscriber already past it is never delivered.
  Those are counted (`subscriber_deliveries`), not hidden.

Convergence (`convergence_violations`): two copies of the account, read at each stamp's front
ends after replication drained, hold the same logs record for record and the same entities
value for value, ETags included (they travel with the data).
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from partition_layer import keys
from partition_layer.geo_tail import request_of
from partition_layer.record_batch import decode_records
from partition_layer.rows import decode_row
from tools.chaos.history import (
    ROWS_PER_WRITER,
    OpLog,
    WriterHistory,
    entity_key,
    log_key,
    row_key,
    value_id,
)
from tools.chaos.linearizability import Op

SLACK_S = 0.05  # the run's clock against the stamps' wall clock, converted: no tighter
CONVERGENCE_SHOWN = 20
# The writer's own ETag complaints (tools/chaos/workload.py `_cas`), as it words them.
_CURRENT_REFUSED = re.compile(r"^(\S+)/(\d+): put with the current ETag (\S+) refused$")
_STALE_ACCEPTED = re.compile(
    r"^(\S+)/(\d+): put with the stale ETag \S+ accepted \(current (\S+)\)$")


@dataclass(frozen=True)
class Failover:
    """A failover the run made, in run time (the OpLog's clock)."""

    kind: str  # "planned" or "unplanned"
    at_s: float  # when it began: a planned one's start, an unplanned one's SIGKILL
    done_s: float  # when the location named the new primary
    old_primary: str
    new_primary: str
    epoch: int
    # unplanned: the account's last sync time the location had before it (None: never
    # reported, so every write was at risk)
    synced_s: float | None = None
    detail: str = ""
    # unplanned: what the new primary held of each row when it took over ((group, row) ->
    # value id, None: no row), read at it between the SIGKILL and the failover; None: unread
    held: Mapping[tuple[str, int], str | None] | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, object]:
        found = {k: v for k, v in dataclasses.asdict(self).items() if k != "held"}
        return {**found, "rows_read": None if self.held is None else len(self.held)}


@dataclass
class TailWrites:
    """What deposed primaries set aside (partition_layer/geo_tail.py), by value id."""

    records: set[str] = field(default_factory=set)  # log records
    rows: dict[tuple[str, bytes], set[str]] = field(default_factory=dict)  # (pname, row)
    lines: int = 0


@dataclass
class FinalState:
    """What the final primary holds: every log read whole, every row of the writers' groups
    (None: no row). A log or row that could not be read is missing: judged by no geo rule
    (the one-stamp rules report it)."""

    logs: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    rows: dict[tuple[str, int], bytes | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Excused:
    """A write a failover lost or may have lost, and the window in which the old primary's
    answers may have come from it."""

    vid: str
    invoke: float  # when it was sent
    done_s: float  # when its failover named the new primary
    lost: bool  # known lost (acknowledged, not at the new primary), else it may have been
    first_seq: int | None = None  # an acknowledged append's first sequence number


@dataclass
class GeoVerdict:
    violations: list[str] = field(default_factory=list)
    excused: dict[Hashable, list[Excused]] = field(default_factory=dict)  # by op key
    excused_etags: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    # (group, row) -> (value number expected there now, whether its put was acknowledged)
    rows_expected: dict[tuple[str, int], tuple[int | None, bool]] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    slack_s: float = SLACK_S

    def excuse(self, key: Hashable, op: Op, failover: Failover, lost: bool) -> None:
        first = op.result if op.call[0] == "append" and op.respond is not None else None
        for vid in op.call[1] if op.call[0] == "append" else (op.call[1],):
            self.excused.setdefault(key, []).append(
                Excused(vid, op.invoke, failover.done_s, lost, first))

    def vids(self, key: Hashable) -> set[str]:
        return {e.vid for e in self.excused.get(key, ())}


@dataclass
class FollowedView:
    """A subscriber as the checker sees it (check.Followed), relaxed."""

    log: str
    seen: list[tuple[int, bytes]]


@dataclass
class StampCopy:
    """One stamp's copy of the account, as its front ends answer."""

    stamp: str
    logs: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # (seq, value id)
    entities: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # what could not be read


# ---- the tail ---------------------------------------------------------------------------

def tail_writes(lines: Iterable[Mapping[str, Any]]) -> TailWrites:
    """The log records and entity values in tail lines (geo_account.tails' `lines`)."""
    found = TailWrites()
    for line in lines:
        found.lines += 1
        request = request_of(dict(line))
        for key, encoded in zip(request.replicate.keys, request.replicate.rows, strict=True):
            _, pname, kind, row = keys.decode_key(key)
            value = decode_row(encoded).value
            if value is None:  # a tombstone (or a blob pointer: shipped rows carry values)
                continue
            if kind == keys.KIND_RECORD:
                found.records.update(value_id(data) for _, data, _ in
                                     decode_records(value, keys.row_seq(row)))
            elif kind == keys.KIND_ENTITY:
                found.rows.setdefault((pname, row), set()).add(value_id(value))
    return found


# ---- what was lost, and whether it may be --------------------------------------------------

def geo_rules(histories: Sequence[WriterHistory], ops: Iterable[Op],
              failovers: Sequence[Failover], tail: TailWrites, final: FinalState,
              slack_s: float = SLACK_S) -> GeoVerdict:
    """Every acknowledged write the final primary lacks, excused or a violation (module
    docstring); `slack_s`: how much earlier than a last sync time a write may have been
    answered and still count as after it (the clocks compared)."""
    verdict = GeoVerdict(slack_s=slack_s)
    if not failovers:
        return verdict
    writes: dict[Hashable, list[Op]] = defaultdict(list)
    for op in sorted(ops, key=lambda o: o.invoke):
        if op.call[0] in ("append", "put") and op.result != ("refused",):
            writes[op.key].append(op)
    for h in histories:
        for log in h.all_logs():
            if log in final.logs:
                _judge_log(verdict, log, writes[log_key(log)], failovers, tail,
                           {value_id(data) for _, data in final.logs[log]})
        for row in range(ROWS_PER_WRITER):
            if (h.group, row) in final.rows:
                _judge_row(verdict, h.group, row, writes[entity_key(h.group, row)],
                           failovers, tail, final.rows[(h.group, row)])
    return verdict


def deposing(op: Op, failovers: Sequence[Failover]) -> Failover | None:
    """The unplanned failover that may have lost `op`'s write (module docstring), if any."""
    unplanned = [f for f in failovers if f.kind == "unplanned"]
    return next((f for f in unplanned if op.invoke < f.done_s),
                unplanned[-1] if unplanned else None)


def _at_risk(op: Op, failover: Failover, slack_s: float) -> bool:
    """Whether `failover` may have lost `op`: in doubt, or acknowledged after the last sync
    time reported before it."""
    return op.respond is None or failover.synced_s is None or \
        op.respond > failover.synced_s - slack_s


def _judge_log(verdict: GeoVerdict, log: str, appends: list[Op],
               failovers: Sequence[Failover], tail: TailWrites, held: set[str]) -> None:
    for op in appends:
        ids = op.call[1]
        if any(i in held for i in ids):
            continue  # held (where, and whether all of it, the one-stamp rules judge)
        set_aside = all(i in tail.records for i in ids)
        failover = deposing(op, failovers)
        if failover is not None and set_aside and _at_risk(op, failover, verdict.slack_s):
            verdict.excuse(log_key(log), op, failover, lost=True)
            verdict.counts["records_excused" if op.respond is not None
                           else "in_doubt_set_aside"] += len(ids)
        elif op.respond is not None:
            verdict.violations.append(
                f"geo: {log}: acknowledged append of {_numbers(ids)} (t={op.respond:.1f}s) "
                f"{unexcused(op, failovers, set_aside, verdict.slack_s)}")


def _judge_row(verdict: GeoVerdict, group: str, row: int, puts: list[Op],
               failovers: Sequence[Failover], tail: TailWrites, value: bytes | None) -> None:
    set_aside = tail.rows.get((group, row_key(row)), set())
    top = max((vid_number(v) for v in set_aside), default=-1)
    at_risk: dict[Op, tuple[Failover, bool]] = {}  # put -> its failover, known lost by it
    for op in puts:
        failover = deposing(op, failovers)
        # Sent to the old primary and, if answered, answered by it (a put answered later
        # was sent again, to the new primary, which took it)
        sent = failover is not None and op.invoke < failover.done_s and (
            op.respond is None or op.respond <= failover.done_s)
        if failover is None or not (sent or op.call[1] in set_aside):
            continue  # its new primary took it
        held = failover.held or {}
        if not sent or (group, row) not in held:
            at_risk[op] = (failover, False)  # it may have been lost
        elif vid_number(op.call[1]) > vid_number(held[(group, row)] or ""):
            at_risk[op] = (failover, True)  # the new primary lacked it when it took over

    def excusable(op: Op) -> bool:
        return op in at_risk and vid_number(op.call[1]) <= top and \
            _at_risk(op, at_risk[op][0], verdict.slack_s)

    problems = [
        f"geo: {group}/{row}: acknowledged put n{vid_number(op.call[1])} (t={op.respond:.1f}s)"
        f" not at {f.new_primary} when it took over at t={f.done_s:.1f}s: "
        + ("in no deposed primary's tail" if _at_risk(op, f, verdict.slack_s) else
           f"acknowledged before the last sync time ({_synced(f)}) reported before it")
        for op, (f, known) in at_risk.items()
        if known and op.respond is not None and not excusable(op)]
    held = value_id(value) if value is not None else None
    at = max((i for i, op in enumerate(puts) if op.call[1] == held), default=None)
    if held is not None and at is None:
        return  # a value no put of the history wrote: the one-stamp rules say so
    lost = [op for op in (puts[at + 1:] if at is not None else puts) if op.respond is not None]
    problems += [f"geo: {group}/{row}: acknowledged put n{vid_number(op.call[1])} "
                 f"(t={op.respond:.1f}s) "
                 f"{unexcused(op, failovers, vid_number(op.call[1]) <= top, verdict.slack_s)}"
                 for op in lost if not excusable(op)]
    verdict.violations += problems
    if problems:
        return
    for op, (failover, known) in at_risk.items():
        if not excusable(op):
            continue
        verdict.excuse(entity_key(group, row), op, failover,
                       lost=known and op.respond is not None)
        if op.respond is not None:
            verdict.excused_etags.setdefault((group, row), set()).add(op.result[1])
            verdict.counts["puts_excused"] += 1
        else:
            verdict.counts["in_doubt_set_aside"] += 1
    if lost:
        verdict.rows_expected[(group, row)] = (
            vid_number(held) if held is not None else None,
            at is not None and puts[at].respond is not None)


def unexcused(op: Op, failovers: Sequence[Failover], set_aside: bool,
              slack_s: float = SLACK_S) -> str:
    """Why an acknowledged write that the final primary lacks may not be lost (module
    docstring)."""
    respond = op.respond if op.respond is not None else float("inf")
    planned = next((f for f in failovers if f.kind == "planned" and f.at_s >= respond), None)
    before_planned = (f", acknowledged before the planned failover at t={planned.at_s:.1f}s"
                      if planned is not None else "")
    failover = deposing(op, failovers)
    if failover is None or (respond > failover.done_s and not set_aside):
        return f"lost{before_planned}"  # taken by a primary no failover deposed since
    if _at_risk(op, failover, slack_s):
        return (f"lost: acknowledged after the last sync time ({_synced(failover)}) reported "
                f"before the unplanned failover at t={failover.at_s:.1f}s, but in no deposed "
                f"primary's tail{before_planned}")
    return (f"lost: acknowledged before the last sync time ({_synced(failover)}) reported "
            f"before the unplanned failover at t={failover.at_s:.1f}s{before_planned}")


def _synced(failover: Failover) -> str:
    return "never reported" if failover.synced_s is None else f"t={failover.synced_s:.1f}s"


def vid_number(vid: str) -> int:
    """The write number in a value id ("w3-n120#..."), -1 if it holds none."""
    match = re.match(r"w\d+-n(\d+)", vid)
    return int(match.group(1)) if match else -1


def _numbers(ids: Sequence[str]) -> str:
    numbers = [vid_number(i) for i in ids]
    return f"n{numbers[0]}" if len(numbers) == 1 else f"n{numbers[0]}-n{numbers[-1]}"


# ---- the one-stamp rules, relaxed for what was excused --------------------------------------

def relaxed_history(h: WriterHistory, verdict: GeoVerdict) -> WriterHistory:
    """`h` as the one-stamp rules judge it once `verdict`'s excused writes may be gone
    (module docstring)."""
    relaxed = dataclasses.replace(
        h, acked_records=dict(h.acked_records), doubtful_records=dict(h.doubtful_records),
        record_logs=dict(h.record_logs), acked_values=dict(h.acked_values),
        doubtful_values={row: set(numbers) for row, numbers in h.doubtful_values.items()},
        violations=[v for v in h.violations if not _complaint_excused(v, verdict)])
    for log in h.all_logs():
        for vid in verdict.vids(log_key(log)):
            number = vid_number(vid)
            if number in relaxed.acked_records:
                _, size = relaxed.acked_records.pop(number)
                relaxed.record_logs.pop(number, None)
                relaxed.doubtful_records[number] = size
    for row in range(ROWS_PER_WRITER):
        expected = verdict.rows_expected.get((h.group, row))
        if expected is None:
            continue
        number, acked = expected
        relaxed.acked_values.pop(row, None)
        relaxed.doubtful_values.pop(row, None)
        if number is not None and acked:
            relaxed.acked_values[row] = number
        elif number is not None:
            relaxed.doubtful_values[row] = {number}
    return relaxed


def _complaint_excused(complaint: str, verdict: GeoVerdict) -> bool:
    match = _CURRENT_REFUSED.match(complaint) or _STALE_ACCEPTED.match(complaint)
    if match is None:
        return False
    group, row, etag = match.group(1), int(match.group(2)), match.groups()[-1]
    if etag in verdict.excused_etags.get((group, row), set()):
        verdict.counts["etag_complaints_excused"] += 1
        return True
    return False


def relaxed_oplog(oplog: OpLog, verdict: GeoVerdict) -> OpLog:
    """`oplog` with the excused writes relaxed and the answers that may have come from them
    left out (module docstring), on the same clock."""
    relaxed = OpLog(oplog.started)
    for op in oplog.ops:
        excused = verdict.excused.get(op.key)
        if not excused:
            relaxed.ops.append(op)
        elif op.call[0] == "put" and op.call[1] in {e.vid for e in excused}:
            if any(e.lost for e in excused if e.vid == op.call[1]):
                verdict.counts["puts_left_out"] += 1
            else:
                relaxed.ops.append(dataclasses.replace(op, respond=None, result=None))
                verdict.counts["puts_made_in_doubt"] += op.respond is not None
        elif _from_excused(op, excused):
            verdict.counts["ops_left_out"] += 1
        else:
            relaxed.ops.append(op)
    relaxed.batches = {name: (batch_keys, value, invoke)
                       for name, (batch_keys, value, invoke) in oplog.batches.items()
                       if not any(value in verdict.vids(k) for k in batch_keys)}
    return relaxed


def _from_excused(op: Op, excused: list[Excused]) -> bool:
    """Whether `op` (no excused put itself) is an excused append, or an answer that may have
    come from an excused write (module docstring)."""
    kind = op.call[0]
    if kind == "append":
        return any(e.vid in op.call[1] for e in excused)
    if kind == "read":  # ids, or "at seq N: id" for a record read out of place
        ids = {str(i).rpartition(": ")[2] for i in op.call[2]}
        start = op.call[1]
        return any(e.vid in ids or (e.first_seq is not None and start > e.first_seq
                                    and op.respond is not None and op.respond >= e.invoke
                                    and op.invoke < e.done_s)
                   for e in excused)
    if op.invoke >= max(e.done_s for e in excused) or op.result is None:
        return False
    if kind == "get":
        return op.result[0] == "value" and any(
            e.vid == op.result[1] and op.invoke < e.done_s for e in excused)
    return kind == "put" and op.result == ("refused",) and any(
        e.invoke < op.invoke < e.done_s for e in excused)


def followed_views(subscribers: Iterable[Any], verdict: GeoVerdict,
                   final_logs: Mapping[str, list[tuple[int, bytes]]]) -> list[FollowedView]:
    """Each subscriber (`.log`, `.seen`) with its deliveries of excused records standing for
    what the final primary holds at their sequence numbers (module docstring)."""
    views = []
    for sub in subscribers:
        gone = verdict.vids(log_key(sub.log))
        there = dict(final_logs.get(sub.log, []))
        seen = []
        for seq, data in sub.seen:
            if gone and value_id(data) in gone:
                verdict.counts["subscriber_deliveries"] += 1
                if seq in there:
                    seen.append((seq, there[seq]))
            else:
                seen.append((seq, data))
        views.append(FollowedView(sub.log, seen))
    return views


# ---- convergence ---------------------------------------------------------------------------

def convergence_violations(primary: StampCopy, secondary: StampCopy) -> list[str]:
    """Where two copies of the account differ (module docstring)."""
    found = [f"geo: convergence: {c.stamp}: {e}" for c in (primary, secondary) for e in c.errors]
    for log in sorted(set(primary.logs) | set(secondary.logs)):
        a, b = primary.logs.get(log, []), secondary.logs.get(log, [])
        if a != b:
            at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                      min(len(a), len(b)))
            there = [(c.stamp, records[at] if at < len(records) else "nothing")
                     for c, records in ((primary, a), (secondary, b))]
            found.append(f"geo: convergence: {log}: {primary.stamp} holds {len(a)} records, "
                         f"{secondary.stamp} {len(b)}, the first difference at record {at} "
                         f"({', '.join(f'{stamp}: {what}' for stamp, what in there)})")
    differ = sorted(k for k in set(primary.entities) | set(secondary.entities)
                    if primary.entities.get(k) != secondary.entities.get(k))
    for pname, row in differ[:CONVERGENCE_SHOWN]:
        found.append(f"geo: convergence: {pname}/{row}: {primary.stamp} holds "
                     f"{primary.entities.get((pname, row), 'nothing')}, {secondary.stamp} "
                     f"{secondary.entities.get((pname, row), 'nothing')}")
    if len(differ) > CONVERGENCE_SHOWN:
        found.append(f"geo: convergence: and {len(differ) - CONVERGENCE_SHOWN} more entities "
                     "differ")
    return found
