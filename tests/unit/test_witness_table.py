"""The CURP witness table (§11, issue 32): commuting writes held (shared keys commute, an
exclusive one conflicts with either mode), conflicts refused until gc, retries, deadlines,
the sweep's list, fences, clears, dropped partitions, bounds, drops and lists by the
caller's epoch; and, by hypothesis, against a
dumb reference that decides conflicts by partition_layer/curp.py's Footprint."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import Internal, InvalidArgument
from common.proto import witness_pb2
from partition_layer.curp import Footprint
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

A, C, F, X, E = (Verdict.ACCEPTED, Verdict.CONFLICT, Verdict.FENCED, Verdict.FULL,
                 Verdict.EXPIRED)
NOW = 1_700_000_000_000  # ms since the epoch


def rec(token: str, *keys: str, shared: tuple[str, ...] = (), epoch: int = 1,
        payload: bytes = b"p", deadline_ms: int = 0) -> Record:
    """A record holding `keys` exclusively and `shared` shared."""
    return Record(token.encode(), epoch, frozenset(k.encode() for k in keys),
                  frozenset(k.encode() for k in shared), payload, deadline_ms)


def table(records_max: int = 1000, bytes_max: int = 1 << 20) -> WitnessTable:
    return WitnessTable(records_max, bytes_max)


def tokens(t: WitnessTable, partition: int) -> list[bytes]:
    return [r.token for r in t.records(partition)]


def test_commuting_records_on_different_keys_are_all_accepted() -> None:
    t = table()
    verdicts, entries = t.record(1, [rec("a", "k1"), rec("b", "k2"), rec("c", "k3", "k4")], NOW)
    assert verdicts == [A, A, A]
    assert [e.record.token for e in entries if isinstance(e, Held)] == [b"a", b"b", b"c"]
    assert t.held_records() == 3 and t.held_records(1) == 3
    assert t.holder(1, b"k4") == b"c"


def test_the_same_key_in_another_partition_commutes() -> None:
    t = table()
    assert t.record(1, [rec("a", "k")], NOW)[0] == [A]
    assert t.record(2, [rec("b", "k")], NOW)[0] == [A]


def test_a_held_key_conflicts_until_gc_then_is_accepted() -> None:
    t = table()
    t.record(1, [rec("a", "k1", "k2")], NOW)
    verdicts, entries = t.record(1, [rec("b", "k2", "k9")], NOW)
    assert verdicts == [C] and entries == []
    assert t.holder(1, b"k9") is None, "a refused record must leave no trace in the index"
    assert t.gc(1, [b"a"], epoch=1) == [Released(1, (b"a",))]
    assert t.record(1, [rec("b", "k2", "k9")], NOW)[0] == [A]
    assert t.holder(1, b"k1") is None


def test_a_conflict_within_one_batch() -> None:
    t = table()
    verdicts, entries = t.record(1, [rec("a", "k"), rec("b", "j"), rec("c", "k")], NOW)
    assert verdicts == [A, A, C]
    assert len(entries) == 2


def test_a_retry_is_accepted_again_and_persists_nothing() -> None:
    t = table()
    t.record(1, [rec("a", "k", payload=b"xyz")], NOW)
    before = (t.held_records(), t.held_bytes())
    verdicts, entries = t.record(1, [rec("a", "k", payload=b"xyz")], NOW)
    assert verdicts == [A] and entries == []
    assert (t.held_records(), t.held_bytes()) == before
    # The same batch twice: the second copy is a retry of the first.
    assert t.record(1, [rec("b", "j"), rec("b", "j")], NOW) == ([A, A], [Held(1, rec("b", "j"))])


def test_a_held_token_with_other_keys_conflicts() -> None:
    t = table()
    t.record(1, [rec("a", "k")], NOW)
    assert t.record(1, [rec("a", "other")], NOW) == ([C], [])
    assert t.holder(1, b"other") is None


def test_records_with_no_keys_commute_with_everything() -> None:
    t = table()
    assert t.record(1, [rec("a"), rec("b"), rec("c", "k")], NOW)[0] == [A, A, A]


def test_fence_refuses_older_epochs_and_returns_everything_held() -> None:
    t = table()
    t.record(1, [rec("a", "k1", epoch=3), rec("b", "k2", epoch=4)], NOW)
    held, entries = t.fence(1, 5)
    assert [r.token for r in held] == [b"a", b"b"]
    assert entries == [Fenced(1, 5)]
    assert t.fence_epoch(1) == 5
    assert t.record(1, [rec("c", "k3", epoch=4), rec("d", "k4", epoch=5),
                        rec("e", "k5", epoch=6)], NOW)[0] == [F, A, A]
    # A retry of a record held from before the fence is still from a deposed owner.
    assert t.record(1, [rec("a", "k1", epoch=3)], NOW)[0] == [F]
    assert t.fence(2, 1)[0] == [], "fencing a partition with nothing held returns nothing"


def test_a_lower_fence_is_a_no_op_but_returns_the_held_records() -> None:
    t = table()
    t.fence(1, 7)
    t.record(1, [rec("a", "k", epoch=7)], NOW)
    held, entries = t.fence(1, 3)
    assert [r.token for r in held] == [b"a"] and entries == []
    assert t.fence_epoch(1) == 7
    assert t.fence(1, 7)[1] == [], "an equal fence changes nothing either"


def test_clear_drops_older_epochs_only_and_raises_the_fence() -> None:
    t = table()
    t.record(1, [rec("a", "k1", epoch=3), rec("b", "k2", epoch=5), rec("c", "k3", epoch=4)], NOW)
    t.record(2, [rec("z", "k1", epoch=1)], NOW)
    assert t.clear(1, 5) == [Cleared(1, 5)]
    assert tokens(t, 1) == [b"b"]
    assert tokens(t, 2) == [b"z"], "another partition's records stay"
    assert t.fence_epoch(1) == 5
    assert t.record(1, [rec("d", "k1", epoch=4)], NOW)[0] == [F]
    assert t.record(1, [rec("d", "k1", epoch=5)], NOW)[0] == [A], "k1 is free again"
    assert t.clear(1, 5) == [], "nothing left to clear and the fence is there: no entry"


def test_drop_partition_forgets_it_and_refuses_it_for_good() -> None:
    t = table()
    t.record(1, [rec("a", "k", payload=b"12345")], NOW)
    t.record(2, [rec("b", "k")], NOW)
    t.fence(1, 4)
    assert t.drop_partition(1) == [PartitionDropped(1)]
    assert t.drop_partition(1) == []
    assert t.held_records() == 1 and t.held_bytes() == t.held_bytes(2)
    assert t.partitions() == [2] and t.dropped_partitions() == [1]
    # A late owner of any generation is refused, and a fence does not bring the id back.
    assert t.record(1, [rec("c", "k", epoch=99)], NOW)[0] == [F]
    assert t.fence(1, 100) == ([], [])
    assert t.clear(1, 100) == []
    assert t.is_dropped(1) and t.fence_epoch(1) == 0


def test_full_at_each_bound_and_room_again_after_gc() -> None:
    t = table(records_max=2)
    assert t.record(1, [rec("a", "k1"), rec("b", "k2"), rec("c", "k3")], NOW)[0] == [A, A, X]
    t.gc(1, [b"a"], epoch=1)
    assert t.record(1, [rec("c", "k3")], NOW)[0] == [A]

    t = table(bytes_max=10)  # bytes = payload + keys
    assert t.record(1, [rec("a", "k1", payload=b"123456")], NOW)[0] == [A]  # 8 bytes
    assert t.held_bytes() == 8
    assert t.record(1, [rec("b", "k2", payload=b"1")], NOW)[0] == [X]  # 8 + 3 > 10
    assert t.record(1, [rec("b", "k", payload=b"1")], NOW)[0] == [A]  # 8 + 2 = 10
    assert t.record(1, [rec("c", payload=b"")], NOW)[0] == [A], \
        "0 bytes fit (records_max bounds them)"
    t.gc(1, [b"a", b"c", b"unknown"], epoch=1)
    assert t.held_bytes() == 2
    assert t.record(1, [rec("c", "k2", payload=b"1")], NOW)[0] == [A]


def test_fenced_and_conflict_come_before_full() -> None:
    t = table(records_max=1)
    t.record(1, [rec("a", "k", epoch=2)], NOW)
    t.fence(1, 2)
    assert t.record(1, [rec("b", "k", epoch=2), rec("c", "j", epoch=1),
                        rec("d", "j", epoch=2)], NOW)[0] == [C, F, X]


def test_gc_of_unknown_tokens_and_partitions_is_ignored() -> None:
    t = table()
    assert t.gc(9, [b"x"], epoch=1) == []
    t.record(1, [rec("a", "k")], NOW)
    assert t.gc(1, [b"x"], epoch=1) == []
    assert t.gc(1, [b"a", b"a"], epoch=1) == [Released(1, (b"a",))], \
        "a token listed twice goes once"


def test_an_idle_partition_keeps_no_memory_but_a_fenced_one_does() -> None:
    t = table()
    t.record(1, [rec("a", "k")], NOW)
    t.gc(1, [b"a"], epoch=1)
    assert t.partitions() == []
    t.fence(2, 1)
    t.record(2, [rec("b", "k")], NOW)
    t.gc(2, [b"b"], epoch=1)
    assert t.partitions() == [2] and t.fence_epoch(2) == 1


def test_malformed_input_changes_nothing() -> None:
    t = table()
    with pytest.raises(InvalidArgument):
        t.record(1, [rec("a", "k"), Record(b"", 1, frozenset(), frozenset(), b"")], NOW)
    with pytest.raises(InvalidArgument):
        t.record(1, [Record(b"t" * 300, 1, frozenset(), frozenset(), b"")], NOW)
    with pytest.raises(InvalidArgument):
        t.record(1, [rec("a", "k", epoch=-1)], NOW)
    with pytest.raises(InvalidArgument):
        t.record(1, [rec("a", "k", deadline_ms=-1)], NOW)
    with pytest.raises(InvalidArgument):
        t.record(1, [rec("a", "k", shared=("k",))], NOW)  # one key in both modes
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
    log += t.record(1, [rec("a", "k1", epoch=1), rec("b", "k2", epoch=2)], NOW)[1]
    log += t.fence(1, 2)[1]
    log += t.record(2, [rec("c", "k1")], NOW)[1]
    log += t.gc(1, [b"b"], epoch=2)
    log += t.clear(1, 2)
    log += t.record(3, [rec("d", "k")], NOW)[1]
    log += t.drop_partition(3)
    small = WitnessTable(records_max=1, bytes_max=1)
    for entry in log:
        small.apply(entry, NOW)
    assert small.snapshot() == t.snapshot()
    assert small.held_records() == 1 and small.record(4, [rec("e", "x")], NOW)[0] == [X]


def test_a_snapshot_replaces_the_whole_table() -> None:
    t = table()
    t.record(1, [rec("a", "k1"), rec("b", "k2")], NOW)
    t.fence(2, 3)
    t.drop_partition(5)
    other = table()
    other.record(7, [rec("z", "k1")], NOW)
    other.apply(t.snapshot(), NOW)
    assert other.snapshot() == t.snapshot()
    assert other.held_bytes() == t.held_bytes() and other.holder(1, b"k2") == b"b"
    assert other.record(7, [rec("y", "k1")], NOW)[0] == [A], "what the snapshot lacks is gone"


def test_replaying_an_impossible_history_is_a_bug() -> None:
    t = table()
    t.apply(Held(1, rec("a", "k")), NOW)
    with pytest.raises(Internal):
        t.apply(Held(1, rec("b", "k")), NOW)
    t.apply(PartitionDropped(2), NOW)
    with pytest.raises(Internal):
        t.apply(Held(2, rec("c", "j")), NOW)


# ---- drop and list by the caller's epoch ---------------------------------------------------

def test_a_deposed_owners_drop_leaves_the_new_owners_record_held() -> None:
    """The old owner (epoch 1) records T1; the new owner fences at 2 and records T2; the old
    owner, still running, drops T2 (and its own T1): both stay — T2 may be a write the new
    owner acknowledged and has not synced, and T1 is the new owner's to replay and clear."""
    t = table()
    assert t.record(1, [rec("T1", "k1", epoch=1)], NOW)[0] == [A]
    assert [r.token for r in t.fence(1, 2)[0]] == [b"T1"]
    assert t.record(1, [rec("T2", "k2", epoch=2)], NOW)[0] == [A]
    assert t.gc(1, [b"T2"], epoch=1) == []
    assert t.gc(1, [b"T1", b"T2"], epoch=1) == [], "below the fence nothing is dropped"
    assert tokens(t, 1) == [b"T1", b"T2"]
    assert t.gc(1, [b"T1", b"T2"], epoch=2) == [Released(1, (b"T1", b"T2"))], \
        "the owner at the fence drops its own records and the older ones it replayed"


def test_a_drop_keeps_records_newer_than_the_caller_even_before_a_fence() -> None:
    """Front ends may record for the new owner at a witness it has not fenced (one fenced
    witness is enough): the old owner, not fenced out there, still must not drop them."""
    t = table()
    t.record(1, [rec("old", "k1", epoch=1), rec("new", "k2", epoch=2)], NOW)
    assert t.gc(1, [b"old", b"new"], epoch=1) == [Released(1, (b"old",))]
    assert tokens(t, 1) == [b"new"]
    assert t.gc(1, [b"new"], epoch=3) == [Released(1, (b"new",))], \
        "a caller above the fence (it fenced other witnesses) drops what is older"


def test_list_answers_only_the_callers_epoch_or_older_and_nothing_below_the_fence() -> None:
    t = table()
    t.record(1, [rec("a", "k1", epoch=1), rec("b", "k2", epoch=2), rec("c", "k3", epoch=3)],
             NOW)
    assert [r.token for r in t.list(1, 0, NOW, epoch=2)] == [b"a", b"b"]
    assert [r.token for r in t.list(1, 0, NOW, epoch=3)] == [b"a", b"b", b"c"]
    t.fence(1, 2)
    assert t.list(1, 0, NOW, epoch=1) == [], "a deposed owner's sweep finds nothing"
    assert [r.token for r in t.list(1, 0, NOW, epoch=2)] == [b"a", b"b"]
    t.drop_partition(1)
    assert t.list(1, 0, NOW, epoch=9) == [] and t.gc(1, [b"a"], epoch=9) == []


def test_a_drop_or_list_with_a_malformed_epoch_is_invalid() -> None:
    t = table()
    t.record(1, [rec("a", "k")], NOW)
    with pytest.raises(InvalidArgument):
        t.gc(1, [b"a"], epoch=-1)
    with pytest.raises(InvalidArgument):
        t.list(1, 0, NOW, epoch=1 << 64)
    assert tokens(t, 1) == [b"a"]


def test_clear_keeps_the_new_owners_records() -> None:
    """Clear(e) drops what is below e: the new owner's fast writes since it loaded (epoch e)
    stay, whether it cleared before or after they came."""
    t = table()
    t.record(1, [rec("old", "k1", epoch=1)], NOW)
    t.fence(1, 2)
    t.record(1, [rec("mine", "k2", epoch=2)], NOW)
    assert t.clear(1, 2) == [Cleared(1, 2)]
    assert tokens(t, 1) == [b"mine"]
    assert t.clear(1, 2) == [], "a repeated clear changes nothing"
    assert tokens(t, 1) == [b"mine"]


# ---- footprints: exclusive and shared keys (curp.Footprint) -------------------------------

def test_shared_keys_commute_with_each_other() -> None:
    t = table()
    verdicts, entries = t.record(1, [rec("a", "row1", shared=("group",)),
                                     rec("b", "row2", shared=("group",)),
                                     rec("c", shared=("group", "other"))], NOW)
    assert verdicts == [A, A, A] and len(entries) == 3
    assert t.shared_holders(1, b"group") == 3 and t.holder(1, b"group") is None
    assert t.held_bytes() == sum(r.size for r in t.records(1))


def test_an_exclusive_key_conflicts_with_a_shared_holder_and_the_other_way() -> None:
    t = table()
    t.record(1, [rec("a", "row1", shared=("group",))], NOW)
    # An exclusive holder of a key held shared (a log operation on an entity group's name).
    assert t.record(1, [rec("log", "group")], NOW) == ([C], [])
    t.record(2, [rec("log", "name")], NOW)
    # A shared holder of a key held exclusively.
    assert t.record(2, [rec("b", "row", shared=("name",))], NOW) == ([C], [])
    assert t.shared_holders(2, b"name") == 0, "a refused record leaves no count"


def test_a_shared_key_is_free_once_its_last_holder_is_released() -> None:
    t = table()
    t.record(1, [rec("a", "r1", shared=("g",)), rec("b", "r2", shared=("g",))], NOW)
    t.gc(1, [b"a"], epoch=1)
    assert t.shared_holders(1, b"g") == 1
    assert t.record(1, [rec("x", "g")], NOW)[0] == [C], "b still holds it shared"
    t.gc(1, [b"b"], epoch=1)
    assert t.shared_holders(1, b"g") == 0
    assert t.record(1, [rec("x", "g")], NOW)[0] == [A]


# ---- retries: the same attempt only -------------------------------------------------------

def test_a_retry_with_the_same_footprint_is_accepted_another_is_a_conflict() -> None:
    t = table()
    t.record(1, [rec("a", "r", shared=("g",))], NOW)
    assert t.record(1, [rec("a", "r", shared=("g",))], NOW) == ([A], [])
    assert t.record(1, [rec("a", "r")], NOW) == ([C], []), "the same keys in another mode"
    assert t.record(1, [rec("a", "r", "s", shared=("g",))], NOW) == ([C], [])


def test_a_retry_of_a_later_attempt_is_a_conflict() -> None:
    """An acceptance answers for the record held: a later attempt (a higher epoch, a later
    deadline) must not be answered by an older record that a clear or the owner's sweep
    may drop while the later attempt counts as recorded (witness_table.py)."""
    t = table()
    t.record(1, [rec("a", "k", epoch=1, deadline_ms=NOW + 100)], NOW)
    assert t.record(1, [rec("a", "k", epoch=1, deadline_ms=NOW + 100)], NOW)[0] == [A]
    assert t.record(1, [rec("a", "k", epoch=1, deadline_ms=NOW + 50)], NOW)[0] == [A]
    assert t.record(1, [rec("a", "k", epoch=1, deadline_ms=NOW + 101)], NOW)[0] == [C]
    assert t.record(1, [rec("a", "k", epoch=1)], NOW)[0] == [C], "no deadline is later"
    assert t.record(1, [rec("a", "k", epoch=2, deadline_ms=NOW + 100)], NOW)[0] == [C]
    t.record(1, [rec("b", "j")], NOW)  # no deadline: every deadline is no later
    assert t.record(1, [rec("b", "j", deadline_ms=NOW + 5)], NOW)[0] == [A]


# ---- deadlines and the sweep --------------------------------------------------------------

def test_a_record_past_its_deadline_is_expired() -> None:
    t = table()
    verdicts, entries = t.record(1, [rec("a", "k", deadline_ms=NOW), rec("b", "j",
                                     deadline_ms=NOW - 1), rec("c", "i", deadline_ms=NOW + 1),
                                     rec("d", "h", deadline_ms=0)], NOW)
    assert verdicts == [E, E, A, A]
    assert [e.record.token for e in entries if isinstance(e, Held)] == [b"c", b"d"]
    # A held record's retry past its deadline: the owner will not execute it any more.
    assert t.record(1, [rec("c", "i", deadline_ms=NOW + 1)], NOW + 1)[0] == [E]
    # A fenced owner's record is FENCED first, whatever its deadline.
    t.fence(1, 5)
    assert t.record(1, [rec("e", "g", deadline_ms=NOW - 1)], NOW)[0] == [F]


def test_list_answers_records_held_at_least_that_long_in_acceptance_order() -> None:
    t = table()
    t.record(1, [rec("a", "k1")], NOW)
    t.record(1, [rec("b", "k2")], NOW + 100)
    t.record(1, [rec("c", "k3")], NOW + 200)
    t.record(2, [rec("z", "k1")], NOW)
    t.record(1, [rec("a", "k1")], NOW + 300)  # a retry does not restart the count
    assert [r.token for r in t.list(1, 151, NOW + 250, epoch=1)] == [b"a"]
    assert [r.token for r in t.list(1, 150, NOW + 250, epoch=1)] == [b"a", b"b"], \
        "at least: held 150"
    assert [r.token for r in t.list(1, 0, NOW + 200, epoch=1)] == [b"a", b"b", b"c"]
    assert t.list(1, 1000, NOW + 300, epoch=1) == [] and t.list(7, 0, NOW, epoch=1) == []


def test_a_replay_counts_its_records_as_accepted_at_the_replay() -> None:
    t = table()
    _, entries = t.record(1, [rec("a", "k", deadline_ms=NOW + 10)], NOW)
    replayed = table()
    for entry in entries:
        replayed.apply(entry, NOW + 5000)
    assert replayed.list(1, 1, NOW + 5000, epoch=1) == []
    assert replayed.list(1, 1, NOW + 5001, epoch=1) == [rec("a", "k", deadline_ms=NOW + 10)]
    snapshot = table()
    snapshot.apply(t.snapshot(), NOW + 7000)
    assert snapshot.list(1, 0, NOW + 7000, epoch=1) == t.records(1)
    assert snapshot.list(1, 1, NOW + 7000, epoch=1) == []


def test_verdicts_are_the_wire_enum() -> None:
    assert {v.name: v.value for v in Verdict} == dict(witness_pb2.Verdict.items())


# ---- property: against a dumb reference ---------------------------------------------------

@dataclass
class Reference:
    """What the table must decide, by scanning lists: no index, no counters."""

    records_max: int
    bytes_max: int
    held: list[tuple[int, Record]] = field(default_factory=list)
    fences: dict[int, int] = field(default_factory=dict)
    dropped: set[int] = field(default_factory=set)

    def record(self, p: int, records: list[Record], now_ms: int) -> list[Verdict]:
        return [self._one(p, r, now_ms) for r in records]

    def _one(self, p: int, r: Record, now_ms: int) -> Verdict:
        if p in self.dropped or r.epoch < self.fences.get(p, 0):
            return F
        if r.deadline_ms and r.deadline_ms <= now_ms:
            return E
        mine = [h for q, h in self.held if q == p]
        same = [h for h in mine if h.token == r.token]
        if same:
            h = same[0]
            retry = (h.epoch == r.epoch and h.exclusive == r.exclusive and h.shared == r.shared
                     and (h.deadline_ms == 0 or 0 < r.deadline_ms <= h.deadline_ms))
            return A if retry else C
        if any(footprint(h).conflicts(footprint(r)) for h in mine):
            return C
        if len(self.held) + 1 > self.records_max or \
                sum(h.size for _, h in self.held) + r.size > self.bytes_max:
            return X
        self.held.append((p, r))
        return A

    def gc(self, p: int, tokens: list[bytes], epoch: int) -> None:
        if epoch < self.fences.get(p, 0):
            return
        self.held = [(q, h) for q, h in self.held
                     if not (q == p and h.token in tokens and h.epoch <= epoch)]

    def listed(self, p: int, epoch: int) -> list[Record]:
        """What list(p, epoch=epoch) may answer, before the age filter."""
        if epoch < self.fences.get(p, 0):
            return []
        return [h for q, h in self.held if q == p and h.epoch <= epoch]

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


def footprint(record: Record) -> Footprint:
    return Footprint(record.exclusive, record.shared)


KEYS = [b"a", b"b", b"c", b"d", b"ee"]


@st.composite
def small_records(draw: st.DrawFn) -> Record:
    """Records on a few keys, each key in one mode, with deadlines around the test's clock
    (T0 + 0..3 ms, one op per ms)."""
    keys = draw(st.lists(st.sampled_from(KEYS), max_size=3, unique=True))
    shared = draw(st.integers(0, len(keys)))
    return Record(draw(st.sampled_from([b"t0", b"t1", b"t2", b"t3", b"t4", b"t5"])),
                  draw(st.integers(0, 3)), frozenset(keys[shared:]), frozenset(keys[:shared]),
                  draw(st.sampled_from([b"", b"x", b"xyz"])),
                  draw(st.sampled_from([0, 0, NOW + 5, NOW + 20, NOW + 40])))


partitions = st.integers(0, 2)
ops = st.one_of(
    st.tuples(st.just("record"), partitions, st.lists(small_records(), max_size=4)),
    st.tuples(st.just("gc"), partitions,
              st.tuples(st.lists(st.sampled_from([b"t0", b"t1", b"t2", b"t9"]), max_size=3),
                        st.integers(0, 4))),
    st.tuples(st.just("fence"), partitions, st.integers(0, 4)),
    st.tuples(st.just("clear"), partitions, st.integers(0, 4)),
    st.tuples(st.just("drop"), partitions, st.none()),
    st.tuples(st.just("list"), partitions, st.tuples(st.integers(0, 30), st.integers(0, 4))),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(ops, max_size=40), st.integers(1, 8), st.integers(1, 30))
def test_random_operations_match_the_reference(sequence: list, records_max: int,
                                               bytes_max: int) -> None:
    t, ref = WitnessTable(records_max, bytes_max), Reference(records_max, bytes_max)
    log = []
    accepted: dict[tuple[int, bytes], int] = {}  # the reference's acceptance times
    for now, (op, p, arg) in enumerate(sequence, NOW):
        entries: list = []
        if op == "record":
            verdicts, entries = t.record(p, arg, now)
            assert verdicts == ref.record(p, arg, now)
            for r, v in zip(arg, verdicts, strict=True):
                if v == A:
                    accepted.setdefault((p, r.token), now)
        elif op == "list":
            older_than_ms, epoch = arg
            listed = [r.token for r in t.list(p, older_than_ms, now, epoch=epoch)]
            assert listed == [h.token for h in ref.listed(p, epoch)
                              if now - accepted[(p, h.token)] >= older_than_ms]
        elif op == "gc":
            entries = t.gc(p, arg[0], epoch=arg[1])
            ref.gc(p, *arg)
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
        held = {(q, h.token) for q, h in ref.held}
        accepted = {k: v for k, v in accepted.items() if k in held}
        for q in range(3):
            mine = [h for r, h in ref.held if r == q]
            assert t.records(q) == mine
            assert not any(footprint(h).conflicts(footprint(g))
                           for i, h in enumerate(mine) for g in mine[i + 1:]), \
                "two held records of a partition conflict"
            assert all(t.holder(q, k) == h.token for h in mine for k in h.exclusive)
            assert all(t.shared_holders(q, k) == sum(k in g.shared for g in mine)
                       for h in mine for k in h.shared)
            assert t.held_bytes(q) == sum(h.size for h in mine)
            assert t.fence_epoch(q) == (0 if q in ref.dropped else ref.fences.get(q, 0))
        assert t.held_records() == len(ref.held)
        assert t.held_bytes() == sum(h.size for _, h in ref.held)
    replayed = WitnessTable(records_max, bytes_max)
    for entry in log:
        replayed.apply(entry, NOW)
    assert replayed.snapshot() == t.snapshot(), "the entries do not redo the table"
