"""What a primary partition ships to its account's secondary stamp (issue 30, DESIGN §10):
each committed operation of its commit log, as ReplicateOp requests.

The plan of inter-stamp replication, of which this module makes the requests:
- **Unit and order.** A partition name (a log or an entity group) lives in one range
  partition at a time (requests.route_key), and its rows' versions grow with every write
  across splits and merges (a child starts at its parent's LSN, a merge at the larger of
  its parents'). The primary ships each name's operations in commit order, one at a time
  per name: the next only once the secondary made the previous one durable. So the
  secondary passes through the primary's states of each name, in order, and applying an
  operation again (a retry after a lost answer, a new owner re-shipping what was not
  acknowledged) writes rows the name already has (operations.Replicated: idempotent).
- **What travels.** The rows themselves (operations.Replicated): versions, hence ETags,
  and the append and entity tokens among them, so exactly-once appends and conditional
  writes keep their meaning after a failover. Values travel inline: a row pointing into
  the primary's blob data is read and sent with its value (`replicate_requests`); the
  secondary writes large ones to its own blob data.
- **Where it goes.** To the secondary stamp's front ends (the location service names
  them), signed with the location's replication secret (location/geo_auth.py), which route
  each request to the partition that holds its name there: the two stamps partition the
  key space independently (frontend/geo_door.py).
- **Built on it:** the shipper of each partition (geo_shipper.py, geo_shipping.py: from the
  committer's hand-off or the commit log, paced batches, a position each checkpoint records
  so a new owner resumes there, last sync times and lag), the location's view of last sync
  times (geo_report.py), failovers planned and unplanned, and the tail a deposed primary
  sets aside (geo_tail.py).
- **The bootstrap** (geo_copy.py, driven by tools/geo_bootstrap.py): an `unavailable`
  secondary made live again after an unplanned failover. Its names are cleared there first
  (replicated deletes), then each partition of the primary holding the account's keys, its
  shipper between two batches, copies a consistent snapshot of the account's rows in its
  range (at LSN L, while its shipped position S <= L) and goes on shipping from S: shipping
  waits while it copies, so no operation past L lands before the copy of a row it changed,
  and the operations in (S, L] shipped again end at the snapshot's rows. The location marks
  the secondary `bootstrapping`, then `live` once every partition copied and the last sync
  time passed the copies' end.
- **Migration** (tools/geo_migrate.py): that bootstrap to the stamp moved to, as the
  secondary, then a planned failover to it; a stamp left in neither role drops its copy.
  The location moves the largest accounts off a stamp past its capacity watermark so
  (location/watermark.py, tools/geo_balance.py). Not built: shipping to two stamps at once,
  which would keep a second live copy while a stamp is bootstrapped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from common.proto import partition_pb2 as pb
from partition_layer import keys
from partition_layer.commit_log import CommitOp
from partition_layer.keys import KeyRange
from partition_layer.rows import TAG_BLOB, TAG_BLOB_CRC, Row, decode_row, encode_row
from stream_layer.framing import Location


class ShipSite(Protocol):
    """What the shipper needs of its partition (RangePartition is one)."""

    id: int
    applied_lsn: int
    range: KeyRange  # its keys: a split child's log begins with its parent's, both halves
    streams: Mapping[str, Any]  # "log": the commit log, read with `blocks(start)`

    async def read_blob(self, row: Row) -> bytes: ...

    def lease_valid(self) -> bool:
        """Whether this server still owns the partition: a deposed owner ships nothing
        (its successor ships the same operations, in order, from the same log)."""


@dataclass(frozen=True)
class Position:
    """Shipped up to `lsn`; reading the commit log from block `resume_from` (inclusive;
    None: its start) finds every operation past it."""

    lsn: int
    resume_from: Location | None


BlobReader = Callable[[Row], Awaitable[bytes]]
# The most rows one ReplicateOp carries: a shipper squashes a name's operations into one
# (geo_shipper.py) up to this, and a partition server takes up to this (requests.py).
REPLICATE_ROWS_MAX = 4096
ROW_OVERHEAD_BYTES = 16  # a row's header and CRC, inline
_BLOB_TAGS = (bytes((TAG_BLOB,)), bytes((TAG_BLOB_CRC,)))


async def replicate_request(account: str, pname: str, rows: Iterable[tuple[bytes, bytes]],
                            read_blob: BlobReader) -> pb.Request:
    """The ReplicateOp request that writes `rows` (key, encoded row) of one partition name at
    the secondary: each row as committed, but a blob pointer replaced by its value
    (`read_blob` reads it from this stamp)."""
    request = pb.Request(account=account, pname=pname, replicate=pb.ReplicateOp())
    for key, encoded in rows:
        row = decode_row(encoded)
        if row.blob is not None:
            encoded = encode_row(Row(row.version, value=await read_blob(row),
                                     value_crc=row.value_crc))
        request.replicate.keys.append(key)
        request.replicate.rows.append(encoded)
    return request


async def replicate_requests(op: CommitOp, read_blob: BlobReader) -> list[pb.Request]:
    """The ReplicateOp requests that apply `op` at the secondary: one per partition name it
    wrote (an operation writes one name's rows today)."""
    by_name: dict[tuple[str, str], list[tuple[bytes, bytes]]] = {}
    for key, encoded in op.mutations:
        account, pname, _kind, _row = keys.decode_key(key)
        by_name.setdefault((account, pname), []).append((key, encoded))
    return [await replicate_request(account, pname, rows, read_blob)
            for (account, pname), rows in by_name.items()]


def shipped_bytes(key: bytes, encoded: bytes) -> int:
    """What a row weighs when shipped: a pointer into blob data travels as its value."""
    if encoded[:1] in _BLOB_TAGS:
        blob = decode_row(encoded).blob
        assert blob is not None
        return len(key) + blob.value_bytes + ROW_OVERHEAD_BYTES
    return len(key) + len(encoded)
