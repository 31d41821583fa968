"""The seal decision (pure): the smallest reachable commit length, an existing seal wins."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import Unavailable
from stream_layer.seal import ReplicaLength, decide_seal_length


@given(st.lists(st.one_of(st.none(), st.integers(0, 10_000)), min_size=1, max_size=5))
def test_smallest_reachable_length(lengths: list[int | None]) -> None:
    replies = {f"r{i}": None if n is None else ReplicaLength(n, False)
               for i, n in enumerate(lengths)}
    reachable = [n for n in lengths if n is not None]
    if not reachable:
        with pytest.raises(Unavailable):
            decide_seal_length(replies)
    else:
        assert decide_seal_length(replies) == min(reachable)


def test_an_existing_seal_fixes_the_length() -> None:
    replies = {"a": ReplicaLength(100, False), "b": ReplicaLength(70, True), "c": None}
    assert decide_seal_length(replies) == 70


def test_two_seals_at_different_lengths_is_a_broken_invariant() -> None:
    with pytest.raises(AssertionError):
        decide_seal_length({"a": ReplicaLength(1, True), "b": ReplicaLength(2, True)})
