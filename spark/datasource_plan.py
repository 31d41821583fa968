"""How the Stamp data source cuts a read into Spark partitions (issue 18, DESIGN §7): pure
planning, no I/O, so it is tested without a stamp or Spark (tests/unit/test_spark_plan.py).

Entities. A read covers the key range [start, end) of one account, in the bounds a Scan
takes: a Bound is (partition name, row), row b"" meaning the name's first row; None is the
account's first key (as a start) or its end (as an end). `entity_pieces` intersects that
range with the account's range partitions (the front end's ScanRanges) and gives one piece
per partition it meets: the pieces are disjoint, in key order, and together cover exactly
the range, so their scans together are one scan of the range.

Logs. A read covers [from_seq, to_seq) of each of its logs. A log is one partition name and
a split never cuts a name, so it lies in exactly one range partition. `log_partitions` packs
the logs of each range partition into Spark partitions of at most `records_per_partition`
records, cutting a bigger log by sequence number (never mixing two range partitions).

Filters (`Narrowing`): Spark's filters on the key columns narrow what is read. A filter is
*exact* when the narrowed read returns exactly the rows that pass it (Spark need not check
it again); otherwise the read is only narrowed where that is safe, never below what passes.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from common.errors import InvalidArgument
from frontend import names

Bound = tuple[str, bytes]
# Hyphen then zero: no valid name lies between a name and itself followed by these
# (names.py: a-z, 0-9 and single hyphens, never a hyphen last, '-' sorting below '0').
_NAME_SUCCESSOR_SUFFIX = "-0"


def valid_name(text: Any) -> bool:
    try:
        names.check_partition(text)
    except InvalidArgument:
        return False
    return True


def name_after(name: str) -> str | None:
    """The smallest valid name above `name` and all its rows (a scan end that includes
    `name`), or None when there is none within the length limit."""
    after = name + _NAME_SUCCESSOR_SUFFIX
    return after if valid_name(name) and valid_name(after) else None


def name_end(name: str) -> Bound | None:
    """A scan end just past `name` (None when no valid name follows it in the limit)."""
    after = name_after(name)
    return None if after is None else (after, b"")


def _start_key(bound: Bound | None) -> tuple[int, Bound]:
    return (0, ("", b"")) if bound is None else (1, bound)


def _end_key(bound: Bound | None) -> tuple[int, Bound]:
    return (2, ("", b"")) if bound is None else (1, bound)


def later_start(a: Bound | None, b: Bound | None) -> Bound | None:
    return a if _start_key(a) >= _start_key(b) else b


def earlier_end(a: Bound | None, b: Bound | None) -> Bound | None:
    return a if _end_key(a) <= _end_key(b) else b


def is_empty(start: Bound | None, end: Bound | None) -> bool:
    return start is not None and end is not None and start >= end


@dataclass(frozen=True)
class EntityPiece:
    """One scan: [start, end) as Scan bounds; `partition_id` the range partition it lies in
    when planned (informative: ids change on split and merge); for a whole range partition
    from the front end, its size and the name that about halves it ("" unknown)."""

    start: Bound | None
    end: Bound | None
    partition_id: int = 0
    size_bytes: int = 0
    middle: str = ""


def entity_pieces(ranges: Sequence[EntityPiece], start: Bound | None, end: Bound | None,
                  bytes_per_partition: int = 0) -> list[EntityPiece]:
    """The parts of [start, end) in each of the account's `ranges` (adjacent, in key order,
    covering the account), the empty ones left out; a part of a range bigger than
    `bytes_per_partition` (0: no cap) cut in two at its middle name when that lies inside
    the part (a range partition is cut once: the partition manager splits bigger ones)."""
    pieces = []
    for r in ranges:
        s, e = later_start(r.start, start), earlier_end(r.end, end)
        if is_empty(s, e):
            continue
        middle: Bound = (r.middle, b"")
        if (bytes_per_partition and r.size_bytes > bytes_per_partition and r.middle
                and not is_empty(s, middle) and not is_empty(middle, e)):
            pieces += [EntityPiece(s, middle, r.partition_id),
                       EntityPiece(middle, e, r.partition_id)]
        else:
            pieces.append(EntityPiece(s, e, r.partition_id))
    return pieces


@dataclass(frozen=True)
class LogSpan:
    """Records [from_seq, to_seq) of one log."""

    log: str
    from_seq: int
    to_seq: int

    @property
    def records(self) -> int:
        return max(0, self.to_seq - self.from_seq)


def cut_spans(spans: Sequence[LogSpan], records_per_partition: int) -> list[list[LogSpan]]:
    """`spans` (empty ones dropped) packed in order into groups of at most
    `records_per_partition` records, a bigger span cut by sequence number."""
    if records_per_partition <= 0:
        raise InvalidArgument(f"records per partition must be positive, not "
                              f"{records_per_partition}")
    groups: list[list[LogSpan]] = []
    current: list[LogSpan] = []
    room = records_per_partition
    for span in spans:
        seq = span.from_seq
        while seq < span.to_seq:
            take = min(room, span.to_seq - seq)
            current.append(LogSpan(span.log, seq, seq + take))
            seq += take
            room -= take
            if room == 0:
                groups.append(current)
                current, room = [], records_per_partition
    if current:
        groups.append(current)
    return groups


def log_partitions(spans: Sequence[LogSpan], range_starts: Sequence[Bound],
                   records_per_partition: int) -> list[list[LogSpan]]:
    """Spark partitions of `spans`: those of one range partition together (`range_starts`:
    the start bounds of the account's ranges after its first, ascending), at most
    `records_per_partition` records each."""
    by_range: dict[int, list[LogSpan]] = {}
    for span in sorted(spans, key=lambda s: (s.log, s.from_seq)):
        index = bisect.bisect_right(range_starts, (span.log, b""))
        by_range.setdefault(index, []).append(span)
    return [group for index in sorted(by_range)
            for group in cut_spans(by_range[index], records_per_partition)]


# ---- filters --------------------------------------------------------------------------------

@dataclass
class Narrowing:
    """What pushed filters leave of a read: [start, end) of names; for logs (`logs_mode`)
    also the set of logs (None: no filter on it) and [seq_from, seq_to) (seq_to None: no
    bound)."""

    start: Bound | None = None
    end: Bound | None = None
    logs: set[str] | None = None
    seq_from: int = 0
    seq_to: int | None = None
    logs_mode: bool = False
    unhandled: list[Any] = field(default_factory=list)

    def push(self, f: Any, name_column: str, seq_column: str | None) -> None:
        """Narrow by filter `f` (a pyspark.sql.datasource Filter), or keep it in `unhandled`
        for Spark to check when it is not exact."""
        column = getattr(f, "attribute", None)
        kind = type(f).__name__
        exact = False
        if column == (name_column,):
            exact = self._push_name(kind, getattr(f, "value", None))
        elif seq_column is not None and column == (seq_column,):
            exact = self._push_seq(kind, getattr(f, "value", None))
        if not exact:
            self.unhandled.append(f)

    def _push_name(self, kind: str, value: Any) -> bool:
        if kind == "In":
            values = [v for v in value if isinstance(v, str)] if value is not None else []
            if len(values) != len(value or ()) or not values:
                return False
            self.logs = set(values) if self.logs is None else self.logs & set(values)
            if all(valid_name(v) for v in values):
                self.start = later_start(self.start, (min(values), b""))
                after = name_after(max(values))
                if after is not None:
                    self.end = earlier_end(self.end, (after, b""))
            # Exact for logs (the read takes just those logs); an entity read covers every
            # name between the smallest and the largest, so Spark checks those.
            return self.logs_mode
        if not isinstance(value, str):
            return False
        if kind in ("EqualTo", "EqualNullSafe"):
            self.logs = {value} if self.logs is None else self.logs & {value}
            if not valid_name(value):
                self.start, self.end = ("~", b""), ("~", b"")  # no name matches: read none
                return True
            self.start = later_start(self.start, (value, b""))
            after = name_after(value)
            if after is None:
                return False
            self.end = earlier_end(self.end, (after, b""))
            return True
        if not valid_name(value):
            return False
        if kind == "GreaterThanOrEqual":
            self.start = later_start(self.start, (value, b""))
            return True
        if kind == "LessThan":
            self.end = earlier_end(self.end, (value, b""))
            return True
        after = name_after(value)
        if after is None:
            return False
        if kind == "GreaterThan":
            self.start = later_start(self.start, (after, b""))
            return True
        if kind == "LessThanOrEqual":
            self.end = earlier_end(self.end, (after, b""))
            return True
        return False

    def _push_seq(self, kind: str, value: Any) -> bool:
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        low, high = {"EqualTo": (value, value + 1), "EqualNullSafe": (value, value + 1),
                     "GreaterThan": (value + 1, None), "GreaterThanOrEqual": (value, None),
                     "LessThan": (None, value), "LessThanOrEqual": (None, value + 1)
                     }.get(kind, (None, None))
        if low is None and high is None:
            return False
        if low is not None:
            self.seq_from = max(self.seq_from, low)
        if high is not None:
            self.seq_to = high if self.seq_to is None else min(self.seq_to, high)
        return True

    def logs_kept(self, logs: Sequence[str]) -> list[str]:
        """The logs of `logs` that pass the filters on the log's name."""
        return [log for log in logs if (self.logs is None or log in self.logs)
                and not is_empty(later_start(self.start, (log, b"")),
                                 earlier_end(self.end, name_end(log)))]

    def span(self, log: str, first_seq: int, next_seq: int) -> LogSpan:
        """The records of `log` (now [first_seq, next_seq)) the read covers."""
        to_seq = next_seq if self.seq_to is None else min(next_seq, self.seq_to)
        return LogSpan(log, max(first_seq, self.seq_from), to_seq)
