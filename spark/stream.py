"""`spark.readStream.format("stamp")`: Structured Streaming over Stamp logs (issue 18,
DESIGN §7).

Options: the credentials of spark/datasource_access.py; `log` (comma-separated) or
`logPrefix` (the logs under it, listed again at every micro-batch, so new logs join);
`startingOffsets` `earliest` (default: each log from its first record) or `latest` (from
its end when the query first starts); `maxRecordsPerTrigger` (default: no cap);
`recordsPerPartition` as for a batch read.

Offsets are `{log: next_seq}`: the first record of each log a micro-batch has not taken.
They name logs and sequence numbers, never range partitions, so they stay valid across
splits, merges, moves and partition-server failovers (a record keeps its sequence number:
invariant 5). A micro-batch (start, end] reads [start[log], end[log]) of each log; a log
missing from `start` (it joined later) is read from its first record. With a checkpoint,
Spark replays a planned batch after a restart from the same offsets, so an idempotent sink
(the file sink, foreachBatch keyed by batch id) gets each record once. Records trimmed
before the query read them are skipped; nothing else is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from common.errors import InvalidArgument
from spark.datasource_access import read_only_access
from spark.datasource_options import LogPartition, log_names, records_per_partition
from spark.datasource_plan import LogSpan, cut_spans
from spark.datasource_read import read_spans

if TYPE_CHECKING:
    import pyarrow as pa

STARTING = ("earliest", "latest")


def capped(start: dict[str, int], latest: dict[str, int], records_max: int
           ) -> dict[str, int]:
    """`latest` cut so that at most `records_max` records lie between `start` and it, shared
    fairly: each log with records waiting gets an equal share, what a log does not need
    going to the others (so one busy log cannot hold the others back). Pure."""
    begin = {log: start.get(log, 0) for log in latest}
    wanted = {log: max(0, latest[log] - begin[log]) for log in latest}
    granted = dict.fromkeys(latest, 0)
    room = records_max
    waiting = sorted(log for log in latest if wanted[log])
    while waiting and room > 0:
        share = max(1, room // len(waiting))
        for log in waiting:
            take = min(wanted[log] - granted[log], share, room)
            granted[log] += take
            room -= take
        waiting = [log for log in waiting if granted[log] < wanted[log]]
    return {**start, **{log: begin[log] + granted[log] for log in latest}}


class StampStreamReader(DataSourceStreamReader):
    """Offsets {log: next_seq} (module docstring). Plans on the driver; `read` runs in
    Spark's tasks with the read-only Access alone."""

    def __init__(self, options: Any) -> None:
        if not (options.get("log") or options.get("logPrefix") is not None):
            raise InvalidArgument("a stamp stream reads logs: give option log or logPrefix")
        self.options = {k: options[k] for k in ("log", "logPrefix") if options.get(k)
                        is not None}
        starting = (options.get("startingOffsets") or "earliest").lower()
        if starting not in STARTING:
            raise InvalidArgument(f"option startingOffsets is earliest or latest, not "
                                  f"{starting!r}")
        self.starting = starting
        self.per_partition = records_per_partition(options)
        cap = options.get("maxRecordsPerTrigger")
        if cap is not None and (not cap.isdigit() or int(cap) <= 0):
            raise InvalidArgument(f"option maxRecordsPerTrigger is a positive integer, not "
                                  f"{cap!r}")
        self.records_max = int(cap) if cap else None
        self.access = read_only_access(options)

    def _ends(self, first: bool) -> dict[str, int]:
        """{log: first_seq} (first) or {log: next_seq} of every log read now."""
        client = self.access.shared_client()
        ends = {}
        for log in log_names(self.options, self.access):
            first_seq, next_seq = client.peek(log)
            ends[log] = first_seq if first else next_seq
        return ends

    def initialOffset(self) -> dict[str, int]:
        return self._ends(first=self.starting == "earliest")

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.records_max is None else ReadMaxRows(
            self.records_max)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        latest = {**start, **self._ends(first=False)}
        if isinstance(limit, ReadMaxRows):
            return capped(start, latest, limit.max_rows)
        return latest

    def partitions(self, start: dict[str, int], end: dict[str, int]
                   ) -> list[InputPartition]:
        spans = [LogSpan(log, start.get(log, 0), end[log]) for log in sorted(end)]
        return [LogPartition(group) for group in cut_spans(spans, self.per_partition)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LogPartition)
        yield from read_spans(self.access, partition.spans, skip_trimmed=True)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: offsets live in Spark's checkpoint, records in the stamp."""
