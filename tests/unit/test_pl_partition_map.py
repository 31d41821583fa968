"""The partition map (§8 invariant 4): lookups against a plain list, refusals of maps whose
ranges overlap or leave holes, and the JSON/proto round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.config import PartitionLimits
from common.errors import InvalidArgument
from partition_layer import keys
from partition_layer.partition_map import (
    PartitionEntry,
    PartitionMap,
    bootstrap_split_keys,
    least_loaded,
)


def map_with(bounds: list[bytes]) -> PartitionMap:
    lows = [b"", *bounds]
    highs: list[bytes | None] = [*bounds, None]
    return PartitionMap(1, tuple(PartitionEntry(i + 1, lo, hi, f"ps-{i % 2 + 1}")
                                 for i, (lo, hi) in enumerate(zip(lows, highs, strict=True))))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.binary(min_size=1, max_size=4), max_size=8, unique=True),
       st.lists(st.binary(max_size=5), min_size=1, max_size=20))
def test_lookup_matches_a_linear_search(bounds: list[bytes], probes: list[bytes]) -> None:
    current = map_with(sorted(bounds)).validate()
    for key in probes:
        expected = [p for p in current.partitions if p.contains(key)]
        assert len(expected) == 1, "ranges must cover every key exactly once"
        assert current.lookup(key) == expected[0]


def test_refuses_holes_overlaps_and_open_ends() -> None:
    with pytest.raises(InvalidArgument):
        PartitionMap(1, (PartitionEntry(1, b"a", None),)).validate()  # misses [b"", a)
    with pytest.raises(InvalidArgument):
        PartitionMap(1, (PartitionEntry(1, b"", b"m"), PartitionEntry(2, b"k", None))
                     ).validate()
    with pytest.raises(InvalidArgument):
        PartitionMap(1, (PartitionEntry(1, b"", b"m"),)).validate()
    with pytest.raises(InvalidArgument):
        PartitionMap(1, (PartitionEntry(1, b"", b"m"), PartitionEntry(1, b"m", None))
                     ).validate()


def test_assign_round_trips_and_least_loaded() -> None:
    current = map_with([b"g", b"p"])
    moved = current.assigned({2: "ps-9"})
    assert moved.version == current.version + 1 and moved.get(2).server == "ps-9"
    assert PartitionMap.from_json(moved.to_json()) == moved
    again, addresses = PartitionMap.from_pb(moved.to_pb({"ps-9": "127.0.0.1:1"}))
    assert again == moved and addresses == {"ps-9": "127.0.0.1:1"}
    assert least_loaded(["ps-1", "ps-2", "ps-3"], current) == "ps-3"
    assert least_loaded([], current) is None
    assert PartitionMap.bootstrap().lookup(b"anything").id == 1


def test_bootstrap_cut_at_split_keys_is_disjoint_and_covering() -> None:
    split = bootstrap_split_keys(["acct/m", "acct/d", "other/a"])
    fresh = PartitionMap.bootstrap(split)
    assert [p.id for p in fresh.partitions] == [1, 2, 3, 4]
    assert [p.low for p in fresh.partitions] == [b"", *split]
    assert fresh.partitions[-1].high is None
    # Every key of a name lands in the partition that name starts, or the one before it.
    assert fresh.lookup(keys.encode_key("acct", "d", keys.KIND_META, b"")).id == 2
    assert fresh.lookup(keys.encode_key("acct", "c", keys.KIND_ENTITY, b"\xff" * 8)).id == 1
    assert fresh.lookup(keys.encode_key("acct", "m", keys.KIND_ENTITY, b"x")).id == 3
    assert fresh.lookup(keys.encode_key("zzz", "a", keys.KIND_META, b"")).id == 4
    assert PartitionMap.from_json(fresh.to_json()) == fresh


@pytest.mark.parametrize("names", [["nodelimiter"], ["/pname"], ["a/x", "a/x"]])
def test_bad_split_keys(names: list[str]) -> None:
    with pytest.raises(InvalidArgument):
        bootstrap_split_keys(names)
    with pytest.raises(InvalidArgument):
        PartitionLimits(bootstrap_split_keys=tuple(names))


def test_bootstrap_refuses_unsorted_or_empty_keys() -> None:
    with pytest.raises(InvalidArgument):
        PartitionMap.bootstrap([b"b", b"a"])
    with pytest.raises(InvalidArgument):
        PartitionMap.bootstrap([b""])
