"""Where inter-stamp replication stands, kept in a partition's metadata (issue 30: the geo
mark, partition_meta.GeoMark): written by each checkpoint from the shipper's position, read
back by the next owner, inherited by split children, set by a merge (which waits for shipping
first), and what keeps the commit log from being dropped before it is shipped."""

from __future__ import annotations

import asyncio
import json

from common.config import PartitionLimits
from partition_layer import meta_derive
from partition_layer.checkpoint import Checkpointer
from partition_layer.extent_needs import Listed, log_unneeded
from partition_layer.geo_shipper import Position
from partition_layer.keys import KeyRange
from partition_layer.operations import record_key
from partition_layer.partition_meta import GeoMark, PartitionMeta, decode_meta, encode_meta
from partition_layer.rows import Row, encode_row
from stream_layer.framing import Location
from tests.support.checkpoint_site import MemorySite

EVERYTHING = KeyRange(b"", None)


def test_a_mark_round_trips_and_a_record_without_one_is_as_before() -> None:
    marked = PartitionMeta(3, EVERYTHING, replay_from=Location(2, 0, 9), applied_lsn=40,
                           geo=GeoMark(37, Location(1, 512, 64), 1_700_000_000.5))
    assert decode_meta(encode_meta(marked)) == marked
    plain = PartitionMeta(3, EVERYTHING, applied_lsn=40)
    assert decode_meta(encode_meta(plain)).geo is None
    assert "geo" not in json.loads(encode_meta(plain)[7:])  # byte for byte the old record


def listed(*ids: int) -> list[Listed]:
    return [Listed(e, True, 100) for e in ids]


def test_the_commit_log_is_kept_from_where_shipping_reads_on() -> None:
    extents = listed(1, 2, 3, 4, 5)
    replay = Location(4, 0, 10)
    assert log_unneeded(extents, replay) == [1, 2, 3]
    assert log_unneeded(extents, replay, GeoMark(9, Location(2, 40, 10))) == [1]
    assert log_unneeded(extents, replay, GeoMark(0, None)) == []  # from the start
    # Shipping ahead of the replay point keeps nothing more.
    assert log_unneeded(extents, Location(2, 0, 10), GeoMark(9, Location(4, 0, 1))) == [1]
    # A mark in an extent the stream does not hold (never expected): keep everything.
    assert log_unneeded(extents, replay, GeoMark(9, Location(77, 0, 1))) == []


class Shipper:
    """A GeoShipper as the checkpointer sees it."""

    def __init__(self, lsn: int) -> None:
        self.lsn = lsn
        self.safe: list[tuple[Location | None, int]] = [(None, 0)]

    def checkpointed(self, replay_from: Location | None, applied_lsn: int) -> None:
        self.safe.append((replay_from, applied_lsn))

    @property
    def position(self) -> Position:
        return Position(self.lsn, [loc for loc, lsn in self.safe if lsn <= self.lsn][-1])

    def last_sync_s(self) -> float:
        return 1234.5


def checkpoint(site: MemorySite, lsn: int) -> PartitionMeta:
    site.memtable.put(record_key("acct", "log", lsn), encode_row(Row(lsn, value=b"v")))
    site.applied_lsn, site.last_commit = lsn, Location(1, 100 * lsn, 100)
    asyncio.run(Checkpointer(site).checkpoint_now())  # type: ignore[arg-type]
    assert site.meta is not None
    return site.meta


def test_each_checkpoint_records_the_shippers_position_and_tells_it_the_replay_point() -> None:
    site = MemorySite(PartitionLimits())
    shipper = Shipper(lsn=0)
    site.shipper = shipper  # type: ignore[assignment]
    first = checkpoint(site, 5)
    assert first.geo == GeoMark(0, None, 1234.5)  # nothing shipped: read from the start
    assert shipper.safe[-1] == (Location(1, 500, 100), 5)
    shipper.lsn = 5  # shipped all: the next record reads on from that replay point
    second = checkpoint(site, 8)
    assert second.geo == GeoMark(5, Location(1, 500, 100), 1234.5)
    # The record in force keeps its mark when nothing ships here (geo off).
    site.shipper = None
    assert checkpoint(site, 9).geo == second.geo


def test_split_children_inherit_the_mark_and_a_merge_starts_one_shipped_through() -> None:
    mark = GeoMark(30, Location(1, 0, 10), 100.0)
    parent = PartitionMeta(1, EVERYTHING, replay_from=Location(1, 90, 10), applied_lsn=40,
                           next_run_id=1, geo=mark,
                           intents=[meta_derive.split_intent(b"m", 2, 3)])
    for child in (2, 3):
        assert meta_derive.derive_split_child(parent, child).geo == mark
    left = PartitionMeta(2, KeyRange(b"", b"m"), applied_lsn=50, replay_from=Location(4, 0, 5),
                         geo=GeoMark(50, Location(4, 0, 5), 90.0))
    right = PartitionMeta(3, KeyRange(b"m", None), applied_lsn=70,
                          replay_from=Location(6, 0, 5), geo=GeoMark(70, None, 95.0))
    merge = {"op": meta_derive.MERGE, "left": left.to_dict(), "right": right.to_dict(),
             "merged": 4}
    merged = meta_derive.derive_merged(PartitionMeta(3, right.key_range, applied_lsn=70,
                                                     intents=[merge]), 4)
    assert merged.geo == GeoMark(70, Location(6, 0, 5), 90.0)
    plain = {**merge, "left": PartitionMeta(2, left.key_range).to_dict(),
             "right": PartitionMeta(3, right.key_range).to_dict()}
    assert meta_derive.derive_merged(PartitionMeta(3, right.key_range, intents=[plain]),
                                     4).geo is None
