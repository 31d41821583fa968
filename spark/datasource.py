"""`spark.read.format("stamp")` and `spark.readStream.format("stamp")`: Stamp's logs and
entities as DataFrames (issue 18, DESIGN §7), through PySpark's Python data source API.

    from spark.datasource import register
    register(session)
    session.read.format("stamp").option("connectionString", cs).option("log", "orders").load()
    session.read.format("stamp").option("connectionString", cs) \\
        .option("start", "users").option("end", "users-z").load()

Options (besides the credentials of spark/datasource_access.py):
- `log`: log names, comma-separated, or `logPrefix`: every log whose name starts with it
  (listed when the read is planned; "" for all). Rows (log string, seq long, data binary).
- otherwise entities, from partition name `start` (default: the account's first) up to, not
  including, `end` (default: the account's end). Rows (partition string, row binary,
  value binary, etag string), in key order within each Spark partition.
- `readFrom`: `secondary` to read at the account's secondary stamp (read access to the
  secondary, issue 30), with a connectionString naming a `Location`; by default the
  connection string's `ReadFrom`, else `primary` (spark/datasource_access.py).
- `recordsPerPartition`: the most log records one Spark partition reads
  (RECORDS_PER_PARTITION by default); `bytesPerPartition`: a range partition bigger than
  this is read by two Spark partitions, cut at the name that halves it (BYTES_PER_PARTITION
  by default).

A batch read plans one Spark partition per range partition the read meets (the front end's
ScanRanges; a big one cut at its middle name; a log lies in one range partition, a big one
cut further by sequence number) and
reads each through a front end with the SDK, as a read-only token (datasource_access.py).
What a log read returns is its records as of planning. Filters on `partition`, `log` and
`seq` are pushed down (datasource_plan.Narrowing): they narrow what is read. The streaming
reader is spark/stream.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from spark.datasource_access import read_only_access
from spark.datasource_options import (
    EntityPartition,
    LogPartition,
    is_log_read,
    log_names,
    name_option,
    positive_option,
    records_per_partition,
)
from spark.datasource_plan import (
    EntityPiece,
    Narrowing,
    entity_pieces,
    log_partitions,
)
from spark.datasource_read import ENTITY_DDL, LOG_DDL, read_entities, read_spans

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

FORMAT = "stamp"
# A range partition bigger than this (its server's report) is read by two tasks, cut at the
# name that halves it: a few seconds of reading for each.
BYTES_PER_PARTITION = 256 * 1024 * 1024
# PySpark 4 calls pushFilters only with this on; register() sets it.
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(session: SparkSession) -> None:
    """Make `format("stamp")` known to `session` (batch and streaming), filters pushed."""
    session.conf.set(PUSHDOWN_CONF, "true")
    session.dataSource.register(StampDataSource)


class StampDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return LOG_DDL if is_log_read(self.options) else ENTITY_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return StampReader(self.options)

    def streamReader(self, schema: StructType) -> Any:
        from spark.stream import StampStreamReader  # the streaming half, kept apart

        return StampStreamReader(self.options)


class StampReader(DataSourceReader):
    """Plans on the driver (pushFilters, partitions); `read` runs in Spark's tasks and holds
    no more than the read-only Access (picklable, no account key)."""

    def __init__(self, options: Any) -> None:
        self.logs_mode = is_log_read(options)
        self.per_partition = records_per_partition(options)
        self.bytes_per_partition = positive_option(options, "bytesPerPartition",
                                                   BYTES_PER_PARTITION)
        self.access = read_only_access(options)
        self.narrowing = Narrowing(name_option(options, "start"), name_option(options, "end"),
                                   logs_mode=self.logs_mode)
        self.logs = log_names(options, self.access) if self.logs_mode else []

    def pushFilters(self, filters: list[Any]) -> list[Any]:
        """Narrow the read by the filters on the key columns (`partition`, or `log` and
        `seq`); return those Spark must still check (datasource_plan.Narrowing)."""
        name_column = "log" if self.logs_mode else "partition"
        for f in filters:
            self.narrowing.push(f, name_column, "seq" if self.logs_mode else None)
        return list(self.narrowing.unhandled)

    def partitions(self) -> list[InputPartition]:
        client = self.access.shared_client()
        ranges = [EntityPiece((r.start_pname, r.start_row) if r.start_pname else None,
                              (r.end_pname, r.end_row) if r.has_end else None,
                              r.partition_id, r.size_bytes, r.middle_pname)
                  for r in client.scan_ranges()]
        if not self.logs_mode:
            pieces = entity_pieces(ranges, self.narrowing.start, self.narrowing.end,
                                   self.bytes_per_partition)
            return ([EntityPartition(piece) for piece in pieces]
                    or [LogPartition([])])  # an empty range: one task that reads nothing
        spans = []
        for log in self.narrowing.logs_kept(self.logs):
            first, next_seq = client.peek(log)
            spans.append(self.narrowing.span(log, first, next_seq))
        starts = [r.start for r in ranges[1:] if r.start is not None]
        planned: list[InputPartition] = [
            LogPartition(group) for group in log_partitions(spans, starts, self.per_partition)]
        return planned or [LogPartition([])]  # nothing to read: one task that reads nothing

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, EntityPartition):
            yield from read_entities(self.access, partition.piece)
        else:
            assert isinstance(partition, LogPartition)
            yield from read_spans(self.access, partition.spans)
