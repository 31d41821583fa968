"""Split and merge on the partition map (issue 17): ids never reused, pending operations
recorded and resolved, invariant 4 (§8) at every version, and maps stored before issue 17
still load."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import InvalidArgument, NotFound
from partition_layer import keys
from partition_layer.partition_map import (
    BORN_BOOTSTRAP,
    BORN_MERGE,
    BORN_SPLIT,
    PartitionMap,
    PendingOp,
)


def name_key(pname: str, account: str = "acct") -> bytes:
    return keys.encode_key(account, pname, keys.KIND_META, b"")


def served(current: PartitionMap, server: str = "ps-1") -> PartitionMap:
    return current.assigned({p.id: server for p in current.partitions})


def test_bootstrap_allocates_ids_after_its_partitions() -> None:
    fresh = PartitionMap.bootstrap([name_key("m")])
    assert fresh.next_id == 3 and fresh.pending == ()
    assert {p.born for p in fresh.partitions} == {BORN_BOOTSTRAP}


def test_split_then_merge_never_reuses_ids() -> None:
    current = served(PartitionMap.bootstrap())
    pending, op = current.with_pending_split(1, name_key("m"), "operator", 100.0)
    assert (op.parent, op.left, op.right, op.server) == (1, 2, 3, "ps-1")
    assert pending.version == current.version + 1 and pending.next_id == 4
    assert pending.pending == (op,) and [p.id for p in pending.partitions] == [1]
    split = pending.with_split(1, name_key("m"), op.left, op.right)
    assert [(p.id, p.low, p.high, p.server, p.born) for p in split.partitions] == [
        (2, b"", name_key("m"), "ps-1", BORN_SPLIT), (3, name_key("m"), None, "ps-1", BORN_SPLIT)]
    assert split.pending == () and split.version == pending.version + 1
    pending, op = split.with_pending_merge(2, 3, "count", 200.0)
    assert op.merged == 4 and pending.next_id == 5
    merged = pending.with_merge(2, 3, op.merged)
    assert [(p.id, p.low, p.high, p.born) for p in merged.partitions] == [
        (4, b"", None, BORN_MERGE)]
    assert merged.next_id == 5 and merged.pending == ()
    # The same range split again gets fresh ids: 5 and 6, never 2 and 3.
    _, again = merged.with_pending_split(4, name_key("m"), "operator", 300.0)
    assert (again.left, again.right) == (5, 6)


@pytest.mark.parametrize(("key", "why"), [
    (b"", "not strictly inside"),                       # the partition's own low
    (name_key("a") + b"\x05", "not the first key"),       # a key inside a name
    (keys.encode_key("acct", "a", keys.KIND_ENTITY, b"row"), "not the first key"),
    (b"\x00\x07", "not an encoded key"),
])
def test_split_keys_that_are_refused(key: bytes, why: str) -> None:
    current = served(PartitionMap.bootstrap())
    with pytest.raises(InvalidArgument, match=why):
        current.with_pending_split(1, key, "operator", 0.0)


def test_split_key_outside_the_range_and_unknown_ids() -> None:
    current = served(PartitionMap.bootstrap([name_key("m")]))
    with pytest.raises(InvalidArgument, match="not strictly inside"):
        current.with_pending_split(1, name_key("z"), "operator", 0.0)
    with pytest.raises(InvalidArgument, match="not strictly inside"):
        current.with_pending_split(2, name_key("m"), "operator", 0.0)  # its own low
    with pytest.raises(NotFound):
        current.with_pending_split(9, name_key("a"), "operator", 0.0)
    with pytest.raises(NotFound):
        current.with_merge(1, 9, 3)


def test_merge_refuses_non_adjacent_and_split_servers() -> None:
    current = served(PartitionMap.bootstrap([name_key("f"), name_key("m")]))
    with pytest.raises(InvalidArgument, match="not adjacent"):
        current.with_pending_merge(1, 3, "operator", 0.0)
    with pytest.raises(InvalidArgument, match="not adjacent"):
        current.with_pending_merge(2, 1, "operator", 0.0)  # right then left
    apart = current.assigned({2: "ps-2"})
    with pytest.raises(InvalidArgument, match="different servers"):
        apart.with_pending_merge(1, 2, "operator", 0.0)
    with pytest.raises(InvalidArgument, match="no right neighbour"):
        current.right_neighbour(3)
    assert current.right_neighbour(1).id == 2


def test_one_pending_operation_per_partition() -> None:
    current = served(PartitionMap.bootstrap([name_key("m")]))
    pending, op = current.with_pending_split(1, name_key("c"), "operator", 0.0)
    with pytest.raises(InvalidArgument, match="under way"):
        pending.with_pending_split(1, name_key("d"), "operator", 0.0)
    with pytest.raises(InvalidArgument, match="under way"):
        pending.with_pending_merge(1, 2, "operator", 0.0)
    assert pending.pending_for(1) == op and pending.pending_for(op.right) == op
    assert pending.pending_for(2) is None
    # Roll back: the op is gone, the parent stays, its ids stay spent.
    rolled = pending.without_pending(op)
    assert rolled.pending == () and [p.id for p in rolled.partitions] == [1, 2]
    assert rolled.next_id == pending.next_id == 5


def test_attempts_and_reassignment_follow_the_pending_op() -> None:
    current = served(PartitionMap.bootstrap())
    pending, op = current.with_pending_split(1, name_key("m"), "load", 5.0)
    counted, op2 = pending.with_attempt(op)
    assert op2.attempts == 1 and counted.pending == (op2,)
    moved = counted.assigned({1: "ps-2"})
    assert moved.pending[0].server == "ps-2" and moved.pending[0].attempts == 1
    again = PartitionMap.from_json(moved.to_json())
    assert again == moved


def test_json_round_trip_keeps_pending_born_and_next_id() -> None:
    current = served(PartitionMap.bootstrap())
    split = current.with_pending_split(1, name_key("m"), "operator", 1.5)[0]
    split = split.with_split(1, name_key("m"), 2, 3)
    merging = split.with_pending_merge(2, 3, "count", 2.5)[0]
    raw = json.loads(merging.to_json())
    assert raw["next_id"] == 5 and raw["pending"] == [{
        "op": "merge", "left": 2, "right": 3, "merged": 4, "server": "ps-1",
        "trigger": "count", "started_at": 2.5, "attempts": 0}]
    assert PartitionMap.from_json(merging.to_json()) == merging


def test_maps_stored_before_issue_17_still_load() -> None:
    old = json.dumps({"version": 7, "partitions": [
        {"id": 1, "low": "", "high": name_key("m").hex(), "server": "ps-1"},
        {"id": 4, "low": name_key("m").hex(), "high": None, "server": "ps-2"}]}).encode()
    current = PartitionMap.from_json(old)
    assert current.next_id == 5 and current.pending == ()
    assert {p.born for p in current.partitions} == {BORN_BOOTSTRAP}


@pytest.mark.parametrize("raw", [
    # overlapping ranges
    {"version": 1, "next_id": 3, "partitions": [
        {"id": 1, "low": "", "high": "10", "server": ""},
        {"id": 2, "low": "05", "high": None, "server": ""}]},
    # next_id not above an id
    {"version": 1, "next_id": 2, "partitions": [
        {"id": 1, "low": "", "high": "10", "server": ""},
        {"id": 2, "low": "10", "high": None, "server": ""}]},
    # a pending op on a partition that is not there
    {"version": 1, "next_id": 9, "partitions": [{"id": 1, "low": "", "high": None}],
     "pending": [{"op": "merge", "left": 1, "right": 5, "merged": 8}]},
    # a pending op whose new id is already a partition
    {"version": 1, "next_id": 9, "partitions": [
        {"id": 1, "low": "", "high": name_key("m").hex(), "server": ""},
        {"id": 2, "low": name_key("m").hex(), "high": None, "server": ""}],
     "pending": [{"op": "merge", "left": 1, "right": 2, "merged": 2}]},
    # an unknown origin
    {"version": 1, "partitions": [{"id": 1, "low": "", "high": None, "server": "",
                                   "born": "magic"}]},
])
def test_loading_refuses_broken_maps(raw: dict[str, object]) -> None:
    for p in raw["partitions"]:  # type: ignore[attr-defined]
        p.setdefault("server", "")
    with pytest.raises((InvalidArgument, NotFound)):
        PartitionMap.from_json(json.dumps(raw).encode())


def test_pending_op_shape_is_checked() -> None:
    with pytest.raises(InvalidArgument):
        PendingOp("split", "ps-1", 2, 3)  # no parent, no key
    with pytest.raises(InvalidArgument):
        PendingOp("merge", "ps-1", 2, 2, merged=4)
    with pytest.raises(InvalidArgument):
        PendingOp("swap", "ps-1", 2, 3)


# ---- property: any sequence of valid splits and merges ---------------------------------------

NAMES = [f"n{i:02d}" for i in range(40)]
PROBES = [name_key(n) + suffix for n in NAMES for suffix in (b"", b"\x02x")] + [b"", b"\xff"]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 39), st.sampled_from(["ps-1", "ps-2"])),
                max_size=40))
def test_any_sequence_of_splits_and_merges_keeps_the_map_whole(
        steps: list[tuple[bool, int, str]]) -> None:
    current = PartitionMap.bootstrap().assigned({1: "ps-1"})
    seen_ids = {1}
    for is_split, n, server in steps:
        before = current
        if is_split:
            key = name_key(NAMES[n])
            entry = current.lookup(key)
            if entry.low == key:
                continue  # already a boundary: not strictly inside
            current, op = current.with_pending_split(entry.id, key, "load", 0.0)
            current = PartitionMap.from_json(current.to_json())
            current = current.with_split(op.parent, key, op.left, op.right)
            made = {op.left, op.right}
        else:
            if len(current.partitions) < 2:
                continue
            i = n % (len(current.partitions) - 1)
            left, right = current.partitions[i], current.partitions[i + 1]
            current = current.assigned({left.id: server, right.id: server})
            current, op = current.with_pending_merge(left.id, right.id, "count", 0.0)
            current = current.with_merge(left.id, right.id, op.merged)
            made = {op.merged}
        assert current.version > before.version
        assert not made & seen_ids, "a partition id was reused"
        seen_ids |= made
        current = PartitionMap.from_json(current.to_json())  # validates again
        for probe in PROBES:
            holders = [p for p in current.partitions if p.contains(probe)]
            assert len(holders) == 1 and current.lookup(probe) == holders[0]
        assert len({p.id for p in current.partitions}) == len(current.partitions)
        assert current.pending == ()
