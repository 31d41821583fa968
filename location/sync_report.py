"""Last sync times as the location knows them (issue 30): each stamp's partition manager
reports, every few seconds, every partition of its map with the last sync time its shipper
gave (common/proto/location_internal.proto `SyncReport`); the location keeps each stamp's
latest report and derives an account's last sync time from it.

Contracts:
- A partition's `synced_ms` is a lower bound: every write it acknowledged before then is on
  its secondary stamp. Such a statement stays true (sync times only grow, and a new owner of
  the partition resumes from an older mark, never a newer one), so a report may be stale, and
  a partition reported by two servers (one dead, one that took it over) is true either way.
- A partition that does not ship (yet) is reported with 0: unknown.
- An account's last sync time is the least among the partitions whose ranges hold its keys;
  0 (unknown) if any of those is unknown, or if the report holds none of them.
- Pure: no I/O (the manager's side is partition_layer/geo_report.py, the location's
  location/service.py, signing location/geo_auth.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from common.proto import location_internal_pb2 as internal_pb
from common.proto import partition_pb2 as pb
from partition_layer import keys
from partition_layer.partition_map import PartitionMap

# A report is one value of the location's store (lock_service.limits.VALUE_BYTES_MAX, 256 KiB):
# about 2,000 partitions. A larger one is refused, and its stamp's accounts stay unknown.
REPORT_BYTES_MAX = 240 * 1024


def report_ranges(current: PartitionMap, loads: Mapping[int, pb.PartitionLoad]
                  ) -> list[internal_pb.SyncedRange]:
    """Every partition of `current` with its last sync time from `loads` (the latest heartbeat
    load by partition id), 0 where its load says it does not ship or there is none."""
    ranges = []
    for entry in current.partitions:
        load = loads.get(entry.id)
        shipping = load is not None and load.geo
        ranges.append(internal_pb.SyncedRange(
            low=entry.low, high=entry.high or b"", has_high=entry.high is not None,
            synced_ms=round(load.geo_synced_s * 1000) if shipping else 0,
            lag_ops=load.geo_lag_ops if shipping else 0))
    return ranges


def account_synced_ms(ranges: Iterable[internal_pb.SyncedRange], account: str) -> int:
    """`account`'s last sync time by these ranges (module contract), ms; 0: unknown."""
    low = keys.account_prefix(account)
    high = keys.prefix_end(low)
    found = [r.synced_ms for r in ranges if _overlaps(r, low, high)]
    return 0 if not found or 0 in found else min(found)


def account_lag_ops(ranges: Iterable[internal_pb.SyncedRange], account: str) -> int:
    """The operations not yet shipped in the partitions holding `account`'s keys (other
    accounts' operations in those partitions count too: a partition's lag is one number)."""
    low = keys.account_prefix(account)
    high = keys.prefix_end(low)
    return sum(r.lag_ops for r in ranges if _overlaps(r, low, high))


def _overlaps(synced: internal_pb.SyncedRange, low: bytes, high: bytes | None) -> bool:
    below_high = high is None or synced.low < high
    above_low = not synced.has_high or synced.high > low
    return below_high and above_low
