"""The partition map (§8 invariant 4): lookups against a plain list, refusals of maps whose
ranges overlap or leave holes, and the JSON/proto round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import InvalidArgument
from partition_layer.partition_map import PartitionEntry, PartitionMap, least_loaded


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
