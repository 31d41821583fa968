"""meta_derive (issue 17): what a loader makes of the newest record of its metadata stream
when it carries a split or merge intent — a split child's meta, a merged partition's meta,
or its own meta rolled back — on tables of small metas."""

from __future__ import annotations

import dataclasses
import random

import pytest

from common.errors import Internal
from partition_layer import keys, meta_derive
from partition_layer.commit_log import CommitOp, within
from partition_layer.keys import KeyRange
from partition_layer.partition_meta import PartitionMeta, decode_meta, encode_meta
from partition_layer.runs import RunInfo
from stream_layer.framing import Location


def k(name: str) -> bytes:
    return keys.encode_key("acct", name, keys.KIND_META, b"")


def run(run_id: int, first: str, last: str, view_low: bytes = b"",
        view_high: bytes | None = None) -> RunInfo:
    return RunInfo(run_id=run_id, index_blocks=(Location(run_id, 0, 10),),
                   bloom_blocks=(Location(run_id, 10, 10),), key_count=3, data_blocks=1,
                   data_bytes=100, first_key=k(first), last_key=k(last),
                   view_low=view_low, view_high=view_high)


PARENT = PartitionMeta(partition_id=1, key_range=KeyRange(b"", None),
                       runs=[run(5, "b", "y"), run(4, "a", "c"), run(2, "p", "z")],
                       replay_from=Location(9, 128, 64), applied_lsn=42, next_run_id=6)


def test_split_children_cut_the_parent_at_the_key() -> None:
    record = meta_derive.with_intent(PARENT, meta_derive.split_intent(k("m"), 7, 8))
    left, append_left = meta_derive.resolve(record, 7)
    right, append_right = meta_derive.resolve(record, 8)
    assert append_left and append_right
    assert left is not None and right is not None
    assert (left.partition_id, left.key_range) == (7, KeyRange(b"", k("m")))
    assert (right.partition_id, right.key_range) == (8, KeyRange(k("m"), None))
    # Views narrowed to each side; a run with no key on a side is not listed there.
    assert [(r.run_id, r.view_low, r.view_high) for r in left.runs] == [
        (5, b"", k("m")), (4, b"", k("m"))]
    assert [(r.run_id, r.view_low, r.view_high) for r in right.runs] == [
        (5, k("m"), None), (2, k("m"), None)]
    for child in (left, right):
        assert child.replay_from == PARENT.replay_from
        assert child.applied_lsn == 42 and child.next_run_id == 6 and child.intents == []
        # The same physical runs: only the views differ.
        assert {r.index_blocks for r in child.runs} <= {r.index_blocks for r in PARENT.runs}
        assert decode_meta(encode_meta(child)) == child


def test_a_second_split_narrows_views_again() -> None:
    first = meta_derive.with_intent(PARENT, meta_derive.split_intent(k("m"), 7, 8))
    right, _ = meta_derive.resolve(first, 8)
    assert right is not None
    again = meta_derive.with_intent(right, meta_derive.split_intent(k("q"), 9, 10))
    middle, _ = meta_derive.resolve(again, 9)
    assert middle is not None and middle.key_range == KeyRange(k("m"), k("q"))
    assert [(r.run_id, r.view_low, r.view_high) for r in middle.runs] == [
        (5, k("m"), k("q")), (2, k("m"), k("q"))]


def test_merge_lists_both_sides_runs_renumbered() -> None:
    split = meta_derive.with_intent(PARENT, meta_derive.split_intent(k("m"), 7, 8))
    left, _ = meta_derive.resolve(split, 7)
    right, _ = meta_derive.resolve(split, 8)
    assert left is not None and right is not None
    right = PartitionMeta(partition_id=8, key_range=right.key_range,
                          runs=[run(6, "n", "o", k("m"), None), *right.runs],
                          replay_from=Location(11, 0, 50), applied_lsn=60, next_run_id=7)
    intent = meta_derive.merge_intent(left, right, 12)
    merged, append = meta_derive.resolve(meta_derive.with_intent(right, intent), 12)
    assert append and merged is not None
    assert merged.partition_id == 12 and merged.key_range == KeyRange(b"", None)
    # The right side's new run first; run 5, which the split cut in two, once again with its
    # whole view; then each side's other runs, in their order.
    assert [r.run_id for r in merged.runs] == [1, 2, 3, 4]
    assert [(r.index_blocks, r.view_low, r.view_high) for r in merged.runs] == [
        (right.runs[0].index_blocks, k("m"), None), (PARENT.runs[0].index_blocks, b"", None),
        (PARENT.runs[1].index_blocks, b"", k("m")), (PARENT.runs[2].index_blocks, k("m"), None)]
    assert merged.next_run_id == 5 and merged.applied_lsn == 60
    assert merged.replay_from == Location(11, 0, 50)
    # Either side's intent record derives the same meta.
    assert meta_derive.resolve(meta_derive.with_intent(left, intent), 12)[0] == merged


def test_merge_replays_from_the_left_when_the_right_never_checkpointed() -> None:
    left = PartitionMeta(partition_id=3, key_range=KeyRange(b"", k("m")),
                         replay_from=Location(4, 0, 9), applied_lsn=10)
    right = PartitionMeta(partition_id=4, key_range=KeyRange(k("m"), None), applied_lsn=3)
    merged = meta_derive.derive_merged(
        meta_derive.with_intent(left, meta_derive.merge_intent(left, right, 5)), 5)
    assert merged.replay_from == Location(4, 0, 9) and merged.applied_lsn == 10
    assert merged.runs == [] and merged.next_run_id == 1


def test_own_record_with_an_intent_rolls_back() -> None:
    for intent in (meta_derive.split_intent(k("m"), 7, 8),
                   meta_derive.merge_intent(PARENT, PARENT, 9)):
        meta, append = meta_derive.resolve(meta_derive.with_intent(PARENT, intent), 1)
        assert append and meta == PARENT


def test_own_record_without_intent_is_used_as_is() -> None:
    assert meta_derive.resolve(PARENT, 1) == (PARENT, False)
    assert meta_derive.resolve(None, 1) == (None, False)


@pytest.mark.parametrize("record, own_id", [
    (meta_derive.with_intent(PARENT, meta_derive.split_intent(k("m"), 7, 8)), 9),
    (PARENT, 7),  # another partition's record with no intent at all
    (meta_derive.with_intent(PARENT, meta_derive.merge_intent(PARENT, PARENT, 9)), 7),
])
def test_a_record_that_names_no_operation_making_us_is_refused(
        record: PartitionMeta, own_id: int) -> None:
    with pytest.raises(Internal):
        meta_derive.resolve(record, own_id)


def test_split_key_must_be_strictly_inside() -> None:
    bounded = PartitionMeta(partition_id=1, key_range=KeyRange(k("c"), k("p")))
    for key in (k("c"), k("p"), k("a")):
        with pytest.raises(Internal):
            meta_derive.derive_split_child(
                meta_derive.with_intent(bounded, meta_derive.split_intent(key, 2, 3)), 2)


def test_narrow_view_drops_runs_outside() -> None:
    r = run(1, "d", "f", view_low=k("c"), view_high=k("g"))
    assert meta_derive.narrow_view(r, KeyRange(k("g"), None)) is None
    assert meta_derive.narrow_view(r, KeyRange(k("a"), k("d"))) is None  # no key below "d"
    narrowed = meta_derive.narrow_view(r, KeyRange(k("e"), k("z")))
    assert narrowed is not None and (narrowed.view_low, narrowed.view_high) == (k("e"), k("g"))


def test_replay_keeps_only_mutations_in_range() -> None:
    op = CommitOp(7, [(k("a"), b"1"), (k("n"), b"2"), (k("z"), b"3")])
    assert within(op, KeyRange(b"", None)) is op
    assert within(op, KeyRange(k("m"), k("y"))) == CommitOp(7, [(k("n"), b"2")])
    assert within(op, KeyRange(k("b"), k("c"))) == CommitOp(7, [])


def _runs_reading(runs: list[RunInfo], key: bytes) -> list[tuple[object, ...]]:
    """The physical runs a read of `key` consults, in order (newest first)."""
    return [r.index_blocks for r in runs if r.view_low <= key
            and (r.view_high is None or key < r.view_high) and r.first_key <= key <= r.last_key]


def test_split_then_merged_back_lists_the_parents_runs_once() -> None:
    split = meta_derive.with_intent(PARENT, meta_derive.split_intent(k("m"), 7, 8))
    left, _ = meta_derive.resolve(split, 7)
    right, _ = meta_derive.resolve(split, 8)
    assert left is not None and right is not None
    merged = meta_derive.derive_merged(
        meta_derive.with_intent(left, meta_derive.merge_intent(left, right, 9)), 9)
    # The parent's runs in its order, once each; the one the split cut, whole again.
    assert [(r.index_blocks, r.view_low, r.view_high) for r in merged.runs] == [
        (PARENT.runs[0].index_blocks, b"", None), (PARENT.runs[1].index_blocks, b"", k("m")),
        (PARENT.runs[2].index_blocks, k("m"), None)]


def test_merged_runs_read_every_key_as_its_side_did() -> None:
    """Random ancestors split at random keys, new runs on each side, merged back: a read of
    any key consults the same runs in the same order as on its side, and no run is listed
    more often than the sides list it (fails if the interleaving broke a side's order)."""
    rng = random.Random(1717)
    names = [f"{c}{d}" for c in "abcdefgh" for d in "0123456789"]
    for case in range(300):
        def make(run_id: int) -> RunInfo:
            first, last = sorted(rng.sample(names, 2))
            return run(run_id, first, last)
        ancestor = PartitionMeta(partition_id=1, key_range=KeyRange(b"", None),
                                 runs=[make(100 + i) for i in range(rng.randint(0, 6))],
                                 next_run_id=400)
        cut = k(rng.choice(names[1:]))
        split = meta_derive.with_intent(ancestor, meta_derive.split_intent(cut, 2, 3))
        sides = []
        for child_id in (2, 3):
            child, _ = meta_derive.resolve(split, child_id)
            assert child is not None
            fresh = [meta_derive.narrow_view(make(300 + 10 * child_id + i), child.key_range)
                     for i in range(rng.randint(0, 3))]
            if case % 7 == 0:
                rng.shuffle(child.runs)  # an order the other side does not share is kept too
            sides.append(dataclasses.replace(
                child, runs=[r for r in fresh if r is not None] + child.runs))
        left, right = sides
        merged = meta_derive.derive_merged(meta_derive.with_intent(
            left, meta_derive.merge_intent(left, right, 4)), 4)
        assert len(merged.runs) <= len(left.runs) + len(right.runs)
        for name in names:
            side = left if k(name) < cut else right
            assert _runs_reading(merged.runs, k(name)) == _runs_reading(side.runs, k(name)), (
                case, name)
