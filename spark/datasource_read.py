"""What one Spark task of the Stamp data source does (issue 18): read its piece through a
front end with the SDK and hand it to Spark as Arrow record batches (one per scan page or
log read, so a task never holds more than a page).

Contracts:
- `read_entities(access, piece)`: every entity in [piece.start, piece.end), in key order,
  as rows (partition, row, value, etag); values checked end to end by the SDK (CRC32C).
- `read_spans(access, spans)`: every record of each span, in order, as (log, seq, data);
  a span whose records were trimmed meanwhile raises Trimmed, unless `skip_trimmed` (a
  stream: records gone before they were read are skipped, nothing else is).
Failovers are the SDK's: its retries outlast a partition server's SIGKILL.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from stampsdk.errors import Trimmed

from common.config import PartitionLimits
from common.errors import Internal
from spark.datasource_access import Access
from spark.datasource_plan import Bound, EntityPiece, LogSpan

ENTITY_SCHEMA = pa.schema([("partition", pa.string()), ("row", pa.binary()),
                           ("value", pa.binary()), ("etag", pa.string())])
LOG_SCHEMA = pa.schema([("log", pa.string()), ("seq", pa.int64()), ("data", pa.binary())])
ENTITY_DDL = "partition string, row binary, value binary, etag string"
LOG_DDL = "log string, seq long, data binary"
# Records asked for per read call: the partition layer's cap (it also stops at ~4 MiB).
READ_RECORDS_MAX = PartitionLimits().read_records_max


def _scan_bound(bound: Bound | None) -> str | tuple[str, bytes] | None:
    if bound is None:
        return None
    pname, row = bound
    return (pname, row) if row else pname  # a name alone: its first row


def read_entities(access: Access, piece: EntityPiece) -> Iterator[pa.RecordBatch]:
    client = access.shared_client()
    for page in client.scan(_scan_bound(piece.start), _scan_bound(piece.end)).pages():
        if not page.items:
            continue
        pnames, rows, values, etags = zip(*page.items, strict=True)
        yield pa.RecordBatch.from_arrays(
            [pa.array(pnames, pa.string()), pa.array(rows, pa.binary()),
             pa.array(values, pa.binary()), pa.array(etags, pa.string())],
            schema=ENTITY_SCHEMA)


def read_spans(access: Access, spans: Sequence[LogSpan], skip_trimmed: bool = False
               ) -> Iterator[pa.RecordBatch]:
    client = access.shared_client()
    for span in spans:
        seq = span.from_seq
        while seq < span.to_seq:
            try:
                records = client.read(span.log, seq, min(READ_RECORDS_MAX,
                                                         span.to_seq - seq))
            except Trimmed:
                if not skip_trimmed:
                    raise
                first, _ = client.peek(span.log)
                if first <= seq:
                    raise
                seq = first
                continue
            if not records:
                # Invariant 5: no record below a next_seq once seen vanishes.
                raise Internal(f"log {span.log!r} ends at {seq}, below {span.to_seq} "
                               f"that the plan saw")
            records = [r for r in records if r[0] < span.to_seq]
            seqs, datas = zip(*records, strict=True)
            yield pa.RecordBatch.from_arrays(
                [pa.array([span.log] * len(seqs), pa.string()),
                 pa.array(seqs, pa.int64()), pa.array(datas, pa.binary())],
                schema=LOG_SCHEMA)
            seq = seqs[-1] + 1
