"""The history checker (STYLE.md: "a checker, not hope"): after the faults, with the stamp
whole again, prove from what each writer was acknowledged (tools/chaos/history.py) that

- lost:       every acknowledged record reads back at its acknowledged sequence number, and
              every acknowledged put's value (or one of a put in doubt after it) is there;
- changed:    every record and value is byte for byte what its writer wrote;
- reordered:  a log reads as consecutive sequence numbers from its first, with no gap, and an
              acknowledged record found at another number than the one acknowledged is named
              as reordered;
- twice:      no record appears twice, in one log or across a writer's logs (retries carry
              tokens: a stamp that applied one twice shows here);
- ETags:      every condition the writers saw broken (a stale ETag accepted, the current one
              refused), and no row went back to an older value;
- batches:    a batch left in doubt is all or nothing: when one of its rows shows its value,
              none of its other rows holds an older acknowledged value or nothing;
- linearizable: every write and every read the readers were answered, with their real-time
              bounds (the workload's OpLog), and the final read of every log and row, form
              a linearizable history per log and per row (tools/chaos/linearizability.py):
              no stale read, no lost-then-overwritten write, an op in doubt seen at most as
              having happened once; a batch in doubt seen on one row counts as done on all
              its rows by then (`bind_batches`);
- followers:  each subscriber was delivered its log exactly once, in order, with no gap, from
              the log's first record to its last (it caught up), and every record it was
              delivered is still there.

`find_violations` returns every violation found (a list of one-line descriptions, empty when
the history holds); `check` raises AssertionError with the first, for tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from stampsdk.errors import NotFound, StampError

from tools.chaos.history import (
    ROWS_PER_WRITER,
    LogEntityClient,
    OpLog,
    WriterHistory,
    entity_key,
    log_key,
    parse_record,
    record_bytes,
    row_key,
    value_id,
)
from tools.chaos.linearizability import Op, Violations, check_history, entity_model, log_model

READ_PAGE = 10_000
READ_TRIES = 3  # a read the SDK gave up on, tried again before it counts as a violation


class Followed(Protocol):
    """What the checker reads of a subscriber (followers.Subscriber, or a view of one that
    tools/chaos/geo_check.py relaxed): its log, and every (seq, record) it was delivered."""

    log: str
    seen: list[tuple[int, bytes]]


@dataclass
class Verdict:
    checked: dict[str, int] = field(default_factory=lambda: {"records": 0, "entities": 0,
                                                             "followed": 0})
    violations: list[str] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)  # keys the search gave up on

    def add_linearizability(self, found: Violations) -> None:
        self.checked["linearizable_keys"] = found.checked["keys"]
        self.checked["linearizable_ops"] = found.checked["ops"]
        self.violations += found.violations
        self.undecided += found.undecided


def check(client: LogEntityClient, histories: list[WriterHistory],
          subscribers: Sequence[Followed] = ()) -> dict[str, int]:
    """Raise AssertionError naming the first violation; return what was checked."""
    verdict = find_violations(client, histories, subscribers)
    assert not verdict.violations, verdict.violations[0]
    return verdict.checked


def find_violations(client: LogEntityClient, histories: list[WriterHistory],
                    subscribers: Sequence[Followed] = (), oplog: OpLog | None = None
                    ) -> Verdict:
    """Every violation (module docstring); with `oplog`, the whole-log reads and the gets
    made here are recorded in it too (record_final_state), so they are made once."""
    verdict = Verdict()
    logs: dict[str, list[tuple[int, bytes]]] = {}
    for h in histories:
        verdict.violations += h.violations
        seen: set[int] = set()
        for log in h.all_logs():
            invoke = oplog.begin() if oplog else 0.0
            problems = len(verdict.violations)
            records = _read_log(client, log, verdict)
            if oplog is not None and len(verdict.violations) == problems:
                _record_whole_log(oplog, log, records, invoke)
            logs[log] = records
            verdict.checked["records"] += len(records)
            verdict.violations += log_violations(h, log, records, seen)
        verdict.checked["entities"] += _check_entities(client, h, verdict)
        if oplog is not None:
            _record_rows(client, h, oplog)
    for sub in subscribers:
        records = logs[sub.log] if sub.log in logs else _read_log(client, sub.log, verdict)
        verdict.checked["followed"] += len(sub.seen)
        verdict.violations += follower_violations(sub.log, sub.seen, records)
    return verdict


def read_log(client: LogEntityClient, log: str) -> tuple[list[tuple[int, bytes]], list[str]]:
    """Every record of `log` from its first to its next sequence number (a log never written
    is empty), and a violation if what was read is not exactly those numbers in order."""
    try:
        first, next_seq = client.peek(log)
    except NotFound:
        return [], []
    records: list[tuple[int, bytes]] = []
    while first + len(records) < next_seq:
        page = client.read(log, first + len(records), READ_PAGE)
        if not page:
            return records, [f"{log}: nothing read at {first + len(records)}, below next "
                             f"{next_seq}"]
        records += page
    if [seq for seq, _ in records] != list(range(first, next_seq)):
        return records, [f"{log}: a gap or reordering below next {next_seq}"]
    return records, []


def _read_log(client: LogEntityClient, log: str, verdict: Verdict
              ) -> list[tuple[int, bytes]]:
    for attempt in range(READ_TRIES):
        try:
            records, violations = read_log(client, log)
        except StampError as exc:
            if attempt + 1 < READ_TRIES:
                continue
            verdict.violations.append(f"{log}: cannot be read back ({_error(exc)})")
            return []
        verdict.violations += violations
        return records
    return []


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def log_violations(h: WriterHistory, log: str, records: list[tuple[int, bytes]],
                   seen: set[int]) -> list[str]:
    """What is wrong with `log` as read back (`records`), given writer `h`'s history; `seen`
    collects the record numbers found in the writer's logs checked so far."""
    found = []
    at_seq = dict(records)
    where: dict[int, int] = {}
    for seq, data in records:
        try:
            writer, number = parse_record(data)
        except (ValueError, UnicodeDecodeError):
            found.append(f"{log}@{seq}: bytes no writer wrote ({data[:24]!r})")
            continue
        if writer != h.writer:
            found.append(f"{log}@{seq}: a record of writer {writer}")
            continue
        if number in seen:
            found.append(f"{log}@{seq}: record n{number} appears twice (applied twice)")
        seen.add(number)
        where[number] = seq
        size = h.acked_records.get(number, (0, h.doubtful_records.get(number, -1)))[1]
        if size < 0:
            found.append(f"{log}@{seq}: record n{number} was never written")
        elif data != record_bytes(h.writer, number, size):
            found.append(f"{log}@{seq}: record n{number} changed")
        acked_log = h.record_logs.get(number)
        if acked_log not in (None, log):
            found.append(f"{log}@{seq}: record n{number} was acknowledged in {acked_log}")
    for number, (seq, size) in sorted(h.acked_records.items()):
        if h.record_logs.get(number, h.log) != log:
            continue
        if at_seq.get(seq) == record_bytes(h.writer, number, size):
            continue
        if number in where:
            found.append(f"{log}: acknowledged record n{number} reordered: acknowledged at "
                         f"seq {seq}, found at {where[number]}")
        else:
            found.append(f"{log}: acknowledged record n{number} at seq {seq} lost (found "
                         f"{at_seq.get(seq, b'nothing')[:24]!r})")
    return found


def _check_entities(client: LogEntityClient, h: WriterHistory, verdict: Verdict) -> int:
    values: dict[int, bytes | None] = {}
    for row in range(ROWS_PER_WRITER):
        acked = h.acked_values.get(row)
        doubtful = h.doubtful_values.get(row, set())
        if acked is None and not doubtful:
            continue
        value: bytes | None = None
        for attempt in range(READ_TRIES):
            try:
                value, _ = client.get(h.group, row_key(row))
                break
            except NotFound:
                break
            except StampError as exc:
                if attempt + 1 == READ_TRIES:
                    verdict.violations.append(f"{h.group}/{row}: cannot be read "
                                              f"({_error(exc)})")
                    return len(values)
        verdict.violations += entity_violations(h, row, value)
        values[row] = value
    verdict.violations += batch_violations(h, values)
    return len(values)


def batch_violations(h: WriterHistory, values: dict[int, bytes | None]) -> list[str]:
    """Batches of `h` left in doubt that rows `values` (row -> value, None: no row) show
    half applied: one row holds the batch's value while another of its rows holds nothing
    or a value acknowledged before the batch was sent (the writer is sequential, so that
    value went in first and the batch did not overwrite it). A value in doubt older than
    the batch proves nothing: it may have landed late."""
    found = []
    numbers = {row: _number(h, value) for row, value in values.items()}
    for batch, rows in sorted(h.doubtful_batches.items()):
        applied = [row for row in rows if numbers.get(row) == batch]
        missed = [row for row in rows if row in values and (
            values[row] is None or (numbers[row] == h.acked_values.get(row)
                                    and (numbers[row] or 0) < batch))]
        if applied and missed:
            found.append(f"{h.group}: batch n{batch} in doubt half applied: rows {applied} "
                         f"hold it, rows {missed} do not")
    return found


def _number(h: WriterHistory, value: bytes | None) -> int | None:
    """The value number of `h` that `value` is, or None (no row, or not h's)."""
    if value is None:
        return None
    try:
        writer, number = parse_record(value)
    except (ValueError, UnicodeDecodeError):
        return None
    return number if writer == h.writer else None


def entity_violations(h: WriterHistory, row: int, value: bytes | None) -> list[str]:
    """What is wrong with row `row` of writer `h`'s group holding `value` (None: no row)."""
    acked = h.acked_values.get(row)
    doubtful = h.doubtful_values.get(row, set())
    if value is None:
        return [] if acked is None else [f"{h.group}/{row}: acknowledged put n{acked} lost"]
    try:
        writer, number = parse_record(value)
    except (ValueError, UnicodeDecodeError):
        return [f"{h.group}/{row}: holds bytes no writer wrote"]
    if value != record_bytes(writer, number, len(value)):
        return [f"{h.group}/{row}: changed"]
    allowed = doubtful | ({acked} if acked is not None else set())
    if writer != h.writer or number not in allowed:
        older = acked is not None and writer == h.writer and number < acked
        what = "went back to" if older else "holds"
        return [f"{h.group}/{row}: {what} n{number}, expected n{acked} or one of "
                f"{sorted(doubtful)}"]
    return []


def record_final_state(client: LogEntityClient, histories: list[WriterHistory],
                       oplog: OpLog) -> None:
    """Read every log whole and every row once more, after the run (nothing writes any
    more), and record those reads in `oplog`: the final state is then part of the history
    the linearizability checker explains. A read that fails is left out (the other checks
    report it)."""
    for h in histories:
        for log in h.all_logs():
            invoke = oplog.begin()
            try:
                records, problems = read_log(client, log)
            except StampError:
                continue
            if not problems:
                _record_whole_log(oplog, log, records, invoke)
        _record_rows(client, h, oplog)


def _record_whole_log(oplog: OpLog, log: str, records: list[tuple[int, bytes]],
                      invoke: float) -> None:
    """A read of all of `log` (from seq 0: the workload never trims), begun at `invoke`."""
    oplog.done(log_key(log), ("read", 0, tuple(value_id(d) for _, d in records), True),
               invoke, None, "final")


def _record_rows(client: LogEntityClient, h: WriterHistory, oplog: OpLog) -> None:
    """A get of every row of `h`'s group, recorded (one that fails is left out)."""
    for row in range(ROWS_PER_WRITER):
        invoke = oplog.begin()
        try:
            value, etag = client.get(h.group, row_key(row))
            result: tuple[str, ...] = ("value", value_id(value), etag)
        except NotFound:
            result = ("absent",)
        except StampError:
            continue
        oplog.done(entity_key(h.group, row), ("get",), invoke, result, "final")


def bind_batches(ops: list[Op], batches: dict[str, tuple[list[Hashable], str, float]]
                 ) -> list[Op]:
    """`ops` with each batch in doubt that a get saw on one of its rows made an op that took
    effect, on every one of its rows, by the end of the first such get: a batch is atomic,
    so seen anywhere it was done everywhere (its parts' answers stay unknown)."""
    seen_by: dict[tuple[Hashable, str], float] = {}
    for op in ops:
        if op.call[0] == "get" and op.respond is not None and op.result[0] == "value":
            at = (op.key, op.result[1])
            seen_by[at] = min(seen_by.get(at, op.respond), op.respond)
    bound: dict[tuple[Hashable, str, float], float] = {}
    for keys, value, invoke in batches.values():
        times = [seen_by[(key, value)] for key in keys if (key, value) in seen_by]
        if times:
            bound.update({(key, value, invoke): min(times) for key in keys})
    return [dataclasses.replace(op, respond=bound[(op.key, op.call[1], op.invoke)])
            if op.respond is None and op.call[0] == "put"
            and (op.key, op.call[1], op.invoke) in bound else op for op in ops]


def linearizability_violations(oplog: OpLog) -> Violations:
    """Every log's and every row's history checked for linearizability (module
    docstring); entity keys are (group, row), log keys ("log", name)."""
    ops = bind_batches(list(oplog.ops), dict(oplog.batches))
    found = Violations()
    found.add(check_history([op for op in ops if _is_log(op.key)], log_model()))
    found.add(check_history([op for op in ops if not _is_log(op.key)], entity_model()))
    return found


def _is_log(key: Hashable) -> bool:
    return isinstance(key, tuple) and len(key) == 2 and key[0] == "log" and \
        isinstance(key[1], str)


def follower_violations(log: str, seen: list[tuple[int, bytes]],
                        records: list[tuple[int, bytes]]) -> list[str]:
    """A subscriber's deliveries against the log as it reads back (`records`, from its first
    record to its end): it started at the first record and caught up to the end."""
    if not seen:
        return [f"subscriber of {log}: delivered nothing, the log ends at seq "
                f"{records[-1][0]} (it never caught up to the end)"] if records else []
    found = []
    lowest, highest = min(seq for seq, _ in seen), max(seq for seq, _ in seen)
    if records and lowest != records[0][0]:
        found.append(f"subscriber of {log}: started at seq {lowest}, not at the log's first "
                     f"record {records[0][0]}")
    if records and highest < records[-1][0]:
        found.append(f"subscriber of {log}: delivered up to seq {highest}, the log ends at "
                     f"{records[-1][0]} (it never caught up to the end)")
    seqs = [seq for seq, _ in seen]
    if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
        found.append(f"subscriber of {log}: deliveries not consecutive, once each "
                     f"(a gap, a repeat or a reordering)")
    at_seq = dict(records)
    vanished = [seq for seq, data in seen if at_seq.get(seq) != data]
    if vanished:
        found.append(f"subscriber of {log}: {len(vanished)} delivered record(s) not in the "
                     f"log as read back (first at seq {vanished[0]})")
    return found
