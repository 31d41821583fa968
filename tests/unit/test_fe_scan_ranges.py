"""frontend/scan_ranges.py: an account's range partitions as Scan bounds — adjacent, in key
order, cut to a token's prefix, and ordering every entity key as the map's bounds do."""

from __future__ import annotations

from common.proto import partition_pb2 as pb
from frontend.scan_ranges import account_ranges, entity_bound
from partition_layer import keys
from partition_layer.partition_map import PartitionMap, bootstrap_split_keys


def bounds(ranges: list) -> list[tuple]:
    return [(r.partition_id, (r.start_pname, r.start_row),
             (r.end_pname, r.end_row) if r.has_end else None) for r in ranges]


def test_one_partition_is_one_whole_range() -> None:
    ranges = account_ranges(PartitionMap.bootstrap(), "acct", "")
    assert bounds(ranges) == [(1, ("", b""), None)]


def test_bounds_of_other_accounts_are_left_out() -> None:
    current = PartitionMap.bootstrap(bootstrap_split_keys(
        ["aaa/x01", "acct/g03", "acct/g06", "zzz/a01"]))
    assert bounds(account_ranges(current, "acct", "")) == [
        (2, ("", b""), ("g03", b"")), (3, ("g03", b""), ("g06", b"")), (4, ("g06", b""), None)]


def test_a_token_prefix_keeps_the_ranges_under_it() -> None:
    current = PartitionMap.bootstrap(bootstrap_split_keys(
        ["acct/g03", "acct/h03", "acct/h06", "acct/i01"]))
    assert bounds(account_ranges(current, "acct", "h")) == [
        (2, ("", b""), ("h03", b"")), (3, ("h03", b""), ("h06", b"")), (4, ("h06", b""), None)]


def test_entity_bound_orders_entity_keys_as_the_key_does() -> None:
    for key in (keys.encode_key("acct", "g03", keys.KIND_META, b""),
                keys.encode_key("acct", "g03", keys.KIND_TOKEN, b"tok"),
                keys.encode_key("acct", "g03", keys.KIND_ENTITY, b"r5")):
        bound = entity_bound("acct", key)
        assert bound is not None
        bound_key = (keys.encode_key("acct", bound[0], keys.KIND_ENTITY, bound[1]) if bound[1]
                     else keys.pname_prefix("acct", bound[0]))
        for pname in ("g02", "g03", "g04"):
            for row in (b"a", b"r4", b"r5", b"r6"):
                entity = keys.encode_key("acct", pname, keys.KIND_ENTITY, row)
                assert (entity < key) == (entity < bound_key)
    assert entity_bound("acct", b"\x01garbage") is None
    assert entity_bound("acct", keys.encode_key("other", "g03", keys.KIND_META, b"")) is None


def test_loads_give_sizes_and_a_middle_inside_the_range() -> None:
    current = PartitionMap.bootstrap(bootstrap_split_keys(["acct/g03", "acct/g06"]))
    middle = keys.encode_key("acct", "g04", keys.KIND_META, b"")
    outside = keys.encode_key("acct", "g01", keys.KIND_META, b"")
    loads = {2: pb.PartitionLoad(partition_id=2, size_bytes=5000, size_split_key=middle),
             3: pb.PartitionLoad(partition_id=3, size_bytes=7, size_split_key=outside)}
    ranges = account_ranges(current, "acct", "", loads)
    assert [(r.size_bytes, r.middle_pname) for r in ranges] == [(0, ""), (5000, "g04"),
                                                               (7, "")]
