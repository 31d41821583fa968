"""The seal decision (pure): the smallest length among enough replicas that it survives the
loss of any one of them (issue 15 hole 4); an existing seal wins."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import Unavailable
from stream_layer.seal import ReplicaLength, decide_seal_length, seal_quorum

R = ReplicaLength

# (replies of a 3-replica extent, the decided length or None for "wait: Unavailable").
DECISIONS: list[tuple[dict[str, ReplicaLength | None], int | None]] = [
    ({"a": R(100, False), "b": R(80, False), "c": R(90, False)}, 80),
    ({"a": R(100, False), "b": R(80, False), "c": None}, 80),
    ({"a": None, "b": R(80, False), "c": R(120, False)}, 80),
    # One answer: its length may be held by that replica only (a primary that journaled an
    # append its secondaries never got). Not decided.
    ({"a": R(100, False), "b": None, "c": None}, None),
    ({"a": None, "b": None, "c": R(0, False)}, None),
    ({"a": None, "b": None, "c": None}, None),
    # A replica already sealed fixes the length, even alone: its seal met the rule then.
    ({"a": R(100, False), "b": R(70, True), "c": None}, 70),
    ({"a": None, "b": R(70, True), "c": None}, 70),
    ({"a": R(70, True), "b": R(70, True), "c": R(90, False)}, 70),
]


@pytest.mark.parametrize(("replies", "decided"), DECISIONS)
def test_decision_table(replies: dict[str, ReplicaLength | None], decided: int | None) -> None:
    if decided is None:
        with pytest.raises(Unavailable, match="needs 2"):
            decide_seal_length(replies)
    else:
        assert decide_seal_length(replies) == decided


def test_quorum_by_replica_count() -> None:
    assert [seal_quorum(n) for n in (1, 2, 3, 5)] == [1, 2, 2, 2]
    assert decide_seal_length({"only": R(42, False)}) == 42  # a 1-replica extent: all of it


@given(st.lists(st.one_of(st.none(), st.integers(0, 10_000)), min_size=1, max_size=5))
def test_the_sealed_length_survives_the_loss_of_any_one_replica(
        lengths: list[int | None]) -> None:
    replies = {f"r{i}": None if n is None else R(n, False) for i, n in enumerate(lengths)}
    reachable = [n for n in lengths if n is not None]
    if len(reachable) < min(len(lengths), 2):
        with pytest.raises(Unavailable):
            decide_seal_length(replies)
        return
    length = decide_seal_length(replies)
    assert length == min(reachable)
    # Whichever replica is lost, another that answered still holds the whole sealed length.
    if len(lengths) >= 2:
        for lost in range(len(reachable)):
            survivors = reachable[:lost] + reachable[lost + 1:]
            assert any(n >= length for n in survivors), (lengths, lost)


def test_two_seals_at_different_lengths_is_a_broken_invariant() -> None:
    with pytest.raises(AssertionError):
        decide_seal_length({"a": R(1, True), "b": R(2, True)})
