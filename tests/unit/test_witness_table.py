"""The CURP witness table (§11, issue 32): commuting writes held, conflicts refused until gc,
fences, clears, dropped partitions, bounds; and, by hypothesis, against a dumb reference."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import Internal, InvalidArgument
from stream_layer.extent_node.witness_table import (
    Cleared,
    Fenced,
    Held,
    PartitionDropped,
    Record,
    Released,
    Verdict,
    WitnessTable,
)

A, C, F, X = Verdict.ACCEPTED, Verdict.CONFLICT, Verdict.FENCED, Verdict.FULL


def rec(token: str, *keys: str, epoch: int = 1, payload: bytes = b"p") -> Record:
    return Record(token.encode(), epoch, frozenset(k.encode() for k in keys), payload)


def table(records_max: int = 1000, bytes_max: int = 1 << 20) -> WitnessTable:
    return WitnessTable(records_max, bytes_max)


def tokens(t: WitnessTable, partition: int) -> list[bytes]:
    return [r.token for r in t.records(partition)]


def test_commuting_records_on_different_keys_are_all_accepted() -> None:
    t = table()
    verdicts, entries = t.record(1, [rec("a", "k1"), rec("b", "k2"), rec("c", "k3", "k4")])
    assert verdicts == [A, A, A]
    assert [e.record.token for e in entries if isinstance(e, Held)] == [b"a", b"b", b"c"]
    assert t.held_records() == 3 and t.held_records(1) == 3
    assert t.holder(1, b"k4") == b"c"


def test_the_same_key_in_another_partition_commutes() -> None:
    t = table()
    assert t.record(1, [rec("a", "k")])[0] == [A]
    assert t.record(2, [rec("b", "k")])[0] == [A]


def test_a_held_key_conflicts_until_gc_then_is_accepted() -> None:
    t = table()
    t.record(1, [rec("a", "k1", "k2")])
    verdicts, entries = t.record(1, [rec("b", "k2", "k9")])
    assert verdicts == [C] and entries == []
    assert t.holder(1, b"k9") is None, "a refused record must leave no trace in the index"
    assert t.gc(1, [b"a"]) == [Released(1, (b"a",))]
    assert t.record(1, [rec("b", "k2", "k9")])[0] == [A]
    assert t.holder(1, b"k1") is None


def test_a_conflict_within_one_batch() -> None:
    t = table()
    verdicts, entries = t.record(1, [rec("a", "k"), rec("b", "j"), rec("c", "k")])
    assert verdicts == [A, A, C]
    assert len(entries) == 2


def test_a_retry_is_accepted_again_and_persists_nothing() -> None:
    t = table()
    t.record(1, [rec("a", "k", payload=b"xyz")])
    before = (t.held_records(), t.held_bytes())
    verdicts, entries = t.record(1, [rec("a", "k", payload=b"xyz")])
    assert verdicts == [A] and entries == []
    assert (t.held_records(), t.held_bytes()) == before
    # The same batch twice: the second copy is a retry of the first.
    assert t.record(1, [rec("b", "j"), rec("b", "j")]) == ([A, A], [Held(1, rec("b", "j"))])


def test_a_held_token_with_other_keys_conflicts() -> None:
    t = table()
    t.record(1, [rec("a", "k")])
    assert t.record(1, [rec("a", "other")]) == ([C], [])
    assert t.holder(1, b"other") is None


def test_records_with_no_keys_commute_with_everything() -> None:
    t = table()
    assert t.record(1, [rec("a"), rec("b"), rec("c", "k")])[0] == [A, A, A]


def test_fence_refuses_older_epochs_and_returns_everything_held() -> None:
    t = table()
    t.record(1, [rec("a", "k1", epoch=3), rec("b", "k2", epoch=4)])
    held, entries = t.fence(1, 5)
    assert [r.token for r in held] == [b"a", b"b"]
    assert entries == [Fenced(1, 5)]
    assert t.fence_epoch(1) == 5
    assert t.record(1, [rec("c", "k3", epoch=4), rec("d", "k4", epoch=5),
                        rec("e", "k5", epoch=6)])[0] == [F, A, A]
    # A retry of a record held from before the fence is still from a deposed owner.
    assert t.record(1, [rec("a", "k1", epoch=3)])[0] == [F]
    assert t.fence(2, 1)[0] == [], "fencing a partition with nothing held returns nothing"


def test_a_lower_fence_is_a_no_op_but_returns_the_held_records() -> None:
    t = table()
    t.fence(1, 7)
    t.record(1, [rec("a", "k", epoch=7)])
    held, entries = t.fence(1, 3)
    assert [r.token for r in held] == [b"a"] and entries == []
    assert t.fence_epoch(1) == 7
    assert t.fence(1, 7)[1] == [], "an equal fence changes nothing either"


def test_clear_drops_older_epochs_only_and_raises_the_fence() -> None:
    t = table()
    t.record(1, [rec("a", "k1", epoch=3), rec("b", "k2", epoch=5), rec("c", "k3", epoch=4)])
    t.record(2, [rec("z", "k1", epoch=1)])
    assert t.clear(1, 5) == [Cleared(1, 5)]
    assert tokens(t, 1) == [b"b"]
    assert tokens(t, 2) == [b"z"], "another partition's records stay"
    assert t.fence_epoch(1) == 5
    assert t.record(1, [rec("d", "k1", epoch=4)])[0] == [F]
    assert t.record(1, [rec("d", "k1", epoch=5)])[0] == [A], "k1 is free again"
    assert t.clear(1, 5) == [], "nothing left to clear and the fence is there: no entry"


def test_drop_partition_forgets_it_and_refuses_it_for_good() -> None:
    t = table()
    t.record(1, [rec("a", "k", payload=b"12345")])
    t.record(2, [rec("b", "k")])
    t.fence(1, 4)
    assert t.drop_partition(1) == [PartitionDropped(1)]
    assert t.drop_partition(1) == []
    assert t.held_records() == 1 and t.held_bytes() == t.held_bytes(2)
    assert t.partitions() == [2] and t.dropped_partitions() == [1]
    # A late owner of any generation is refused, and a fence does not bring the id back.
    assert t.record(1, [rec("c", "k", epoch=99)])[0] == [F]
    assert t.fence(1, 100) == ([], [])
    assert t.clear(1, 100) == []
    assert t.is_dropped(1) and t.fence_epoch(1) == 0


def test_full_at_each_bound_and_room_again_after_gc() -> None:
    t = table(records_max=2)
    assert t.record(1, [rec("a", "k1"), rec("b", "k2"), rec("c", "k3")])[0] == [A, A, X]
    t.gc(1, [b"a"])
    assert t.record(1, [rec("c", "k3")])[0] == [A]

    t = table(bytes_max=10)  # bytes = payload + keys
    assert t.record(1, [rec("a", "k1", payload=b"123456")])[0] == [A]  # 8 bytes
    assert t.held_bytes() == 8
    assert t.record(1, [rec("b", "k2", payload=b"1")])[0] == [X]  # 8 + 3 > 10
    assert t.record(1, [rec("b", "k", payload=b"1")])[0] == [A]  # 8 + 2 = 10
    assert t.record(1, [rec("c", payload=b"")])[0] == [A], "0 bytes fit (records_max bounds them)"
    t.gc(1, [b"a", b"c", b"unknown"])
    assert t.held_bytes() == 2
    assert t.record(1, [rec("c", "k2", payload=b"1")])[0] == [A]


def test_fenced_and_conflict_come_before_full() -> None:
    t = table(records_max=1)
    t.record(1, [rec("a", "k", epoch=2)])
    t.fence(1, 2)
    assert t.record(1, [rec("b", "k", epoch=2), rec("c", "j", epoch=1),
                        rec("d", "j", epoch=2)])[0] == [C, F, X]


def test_gc_of_unknown_tokens_and_partitions_is_ignored() -> None:
    t = table()
    assert t.gc(9, [b"x"]) == []
    t.record(1, [rec("a", "k")])
    assert t.gc(1, [b"x"]) == []
    assert t.gc(1, [b"a", b"a"]) == [Released(1, (b"a",))], "a token listed twice goes once"


def test_an_idle_partition_keeps_no_memory_but_a_fenced_one_does() -> None:
    t = table()
    t.record(1, [rec("a", "k")])
    t.gc(1, [b"a"])
    assert t.partitions() == []
    t.fence(2, 1)
    t.record(2, [rec("b", "k")])
    t.gc(2, [b"b"])
    assert t.partitions() == [2] and t.fence_epoch(2) == 1


def test_malformed_input_changes_nothing() -> None:
    t = table()
    with pytest.raises(InvalidArgument):
        t.record(1, [rec("a", "k"), Record(b"", 1, frozenset(), b"")])
    with pytest.raises(InvalidArgument):
        t.record(1, [Record(b"t" * 300, 1, frozenset(), b"")])
    with pytest.raises(InvalidArgument):
        t.record(1, [rec("a", "k", epoch=-1)])
    with pytest.raises(InvalidArgument):
        t.fence(-1, 1)
    with pytest.raises(InvalidArgument):
        t.clear(1, 1 << 64)  # past what the store's format holds
    assert t.held_records() == 0 and t.partitions() == []
    with pytest.raises(InvalidArgument):
        WitnessTable(0, 10)


def test_entries_replayed_into_a_fresh_table_rebuild_it_past_its_bounds() -> None:
    t = table()
    log = []
    log += t.record(1, [rec("a", "k1", epoch=1), rec("b", "k2", epoch=2)])[1]
    log += t.fence(1, 2)[1]
    log += t.record(2, [rec("c", "k1")])[1]
    log += t.gc(1, [b"b"])
    log += t.clear(1, 2)
    log += t.record(3, [rec("d", "k")])[1]
    log += t.drop_partition(3)
    small = WitnessTable(records_max=1, bytes_max=1)
    for entry in log:
        small.apply(entry)
    assert small.snapshot() == t.snapshot()
    assert small.held_records() == 1 and small.record(4, [rec("e", "x")])[0] == [X]


def test_a_snapshot_replaces_the_whole_table() -> None:
    t = table()
    t.record(1, [rec("a", "k1"), rec("b", "k2")])
    t.fence(2, 3)
    t.drop_partition(5)
    other = table()
    other.record(7, [rec("z", "k1")])
    other.apply(t.snapshot())
    assert other.snapshot() == t.snapshot()
    assert other.held_bytes() == t.held_bytes() and other.holder(1, b"k2") == b"b"
    assert other.record(7, [rec("y", "k1")])[0] == [A], "what the snapshot lacks is gone"


def test_replaying_an_impossible_history_is_a_bug() -> None:
    t = table()
    t.apply(Held(1, rec("a", "k")))
    with pytest.raises(Internal):
        t.apply(Held(1, rec("b", "k")))
    t.apply(PartitionDropped(2))
    with pytest.raises(Internal):
        t.apply(Held(2, rec("c", "j")))


# ---- property: against a dumb reference ---------------------------------------------------

@dataclass
class Reference:
    """What the table must decide, by scanning lists: no index, no counters."""

    records_max: int
    bytes_max: int
    held: list[tuple[int, Record]] = field(default_factory=list)
    fences: dict[int, int] = field(default_factory=dict)
    dropped: set[int] = field(default_factory=set)

    def record(self, p: int, records: list[Record]) -> list[Verdict]:
        return [self._one(p, r) for r in records]

    def _one(self, p: int, r: Record) -> Verdict:
        if p in self.dropped or r.epoch < self.fences.get(p, 0):
            return F
        mine = [h for q, h in self.held if q == p]
        same = [h for h in mine if h.token == r.token]
        if same:
            return A if same[0].keys == r.keys else C
        if any(h.keys & r.keys for h in mine):
            return C
        if len(self.held) + 1 > self.records_max or \
                sum(h.size for _, h in self.held) + r.size > self.bytes_max:
            return X
        self.held.append((p, r))
        return A

    def gc(self, p: int, tokens: list[bytes]) -> None:
        self.held = [(q, h) for q, h in self.held if not (q == p and h.token in tokens)]

    def fence(self, p: int, epoch: int) -> list[Record]:
        if p in self.dropped:
            return []
        self.fences[p] = max(self.fences.get(p, 0), epoch)
        return [h for q, h in self.held if q == p]

    def clear(self, p: int, epoch: int) -> None:
        if p in self.dropped:
            return
        self.held = [(q, h) for q, h in self.held if not (q == p and h.epoch < epoch)]
        self.fences[p] = max(self.fences.get(p, 0), epoch)

    def drop(self, p: int) -> None:
        self.held = [(q, h) for q, h in self.held if q != p]
        self.dropped.add(p)


partitions = st.integers(0, 2)
small_records = st.builds(
    Record, st.sampled_from([b"t0", b"t1", b"t2", b"t3", b"t4", b"t5"]), st.integers(0, 3),
    st.frozensets(st.sampled_from([b"a", b"b", b"c", b"d", b"ee"]), max_size=3),
    st.sampled_from([b"", b"x", b"xyz"]))
ops = st.one_of(
    st.tuples(st.just("record"), partitions, st.lists(small_records, max_size=4)),
    st.tuples(st.just("gc"), partitions,
              st.lists(st.sampled_from([b"t0", b"t1", b"t2", b"t9"]), max_size=3)),
    st.tuples(st.just("fence"), partitions, st.integers(0, 4)),
    st.tuples(st.just("clear"), partitions, st.integers(0, 4)),
    st.tuples(st.just("drop"), partitions, st.none()),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(ops, max_size=40), st.integers(1, 8), st.integers(1, 30))
def test_random_operations_match_the_reference(sequence: list, records_max: int,
                                               bytes_max: int) -> None:
    t, ref = WitnessTable(records_max, bytes_max), Reference(records_max, bytes_max)
    log = []
    for op, p, arg in sequence:
        if op == "record":
            verdicts, entries = t.record(p, arg)
            assert verdicts == ref.record(p, arg)
        elif op == "gc":
            entries = t.gc(p, arg)
            ref.gc(p, arg)
        elif op == "fence":
            held, entries = t.fence(p, arg)
            assert held == ref.fence(p, arg)
        elif op == "clear":
            entries = t.clear(p, arg)
            ref.clear(p, arg)
        else:
            entries = t.drop_partition(p)
            ref.drop(p)
        log += entries
        for q in range(3):
            mine = [h for r, h in ref.held if r == q]
            assert t.records(q) == mine
            keys = [k for h in mine for k in h.keys]
            assert len(keys) == len(set(keys)), "two held records of a partition share a key"
            assert all(t.holder(q, k) == h.token for h in mine for k in h.keys)
            assert t.held_bytes(q) == sum(h.size for h in mine)
            assert t.fence_epoch(q) == (0 if q in ref.dropped else ref.fences.get(q, 0))
        assert t.held_records() == len(ref.held)
        assert t.held_bytes() == sum(h.size for _, h in ref.held)
    replayed = WitnessTable(records_max, bytes_max)
    for entry in log:
        replayed.apply(entry)
    assert replayed.snapshot() == t.snapshot(), "the entries do not redo the table"
