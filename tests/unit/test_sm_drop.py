"""DropExtents in the stream manager's pure state machine (issue 18, gc): a stream's writer
drops sealed extents it no longer needs; stale requests are safe; the last and open extents
are never dropped; an extent a split's children share stays until the last one lets go; a
snapshot round-trips the result; the DeleteExtent of garbage collection follows only then."""

from __future__ import annotations

import pytest

from common.errors import Fenced, InvalidArgument, NotFound, PreconditionFailed
from stream_layer.stream_manager import state as s
from tests.support.stream_manager import add, fresh, sealed_stream


def test_drop_takes_the_named_sealed_extents_out_of_the_stream() -> None:
    state = fresh()
    sealed_stream(state, "log", 1, count=4, epoch=5)
    done = state.apply(s.DropExtents("log", (1, 3), epoch=5))
    assert done.dropped == (1, 3) and done.unreferenced == (1, 3)
    assert state.stream("log").extents == (2, 4)
    assert state.stream("log").writer_epoch == 5
    assert state.references() == {2: 1, 4: 1}
    # Garbage collection may now delete them (nothing holds them), not the others.
    state.apply(s.DeleteExtent(1))
    with pytest.raises(PreconditionFailed, match="still referenced"):
        state.apply(s.DeleteExtent(2))


def test_a_stale_drop_skips_what_is_gone_and_drops_nothing_more() -> None:
    state = fresh()
    sealed_stream(state, "log", 1, count=3)
    state.apply(s.DropExtents("log", (1,)))
    again = state.apply(s.DropExtents("log", (1, 99)))  # a resend, and an id never held
    assert again.dropped == () and again.unreferenced == ()
    assert state.stream("log").extents == (2, 3)


@pytest.mark.parametrize("setup, extents, error, match", [
    ("sealed", (1, 3), PreconditionFailed, "extent 3 is the last"),
    ("open", (3,), PreconditionFailed, "is the last"),
    ("sealed", (1, 1), InvalidArgument, "repeat"),
])
def test_drop_never_takes_the_last_or_an_open_extent(setup: str, extents: tuple[int, ...],
                                                     error: type[Exception], match: str
                                                     ) -> None:
    state = fresh()
    sealed_stream(state, "log", 1, count=2)
    add(state, "log", 3)
    if setup == "sealed":
        state.apply(s.SealExtent(3, 10))
    before = state.digest()
    with pytest.raises(error, match=match):
        state.apply(s.DropExtents("log", extents))
    assert state.digest() == before, "a refused drop changes nothing"


def test_an_open_extent_that_is_not_the_last_is_refused() -> None:
    # Only a stream's last extent is ever open in practice; the guard holds regardless
    # (a stream made of extents by hand).
    state = fresh()
    sealed_stream(state, "a", 1, count=1)
    add(state, "a", 2)  # open
    state.apply(s.CreateStream("b"))
    state.streams["b"] = s.Stream("b", (2, 1))
    with pytest.raises(PreconditionFailed, match="extent 2 of stream 'b' is open"):
        state.apply(s.DropExtents("b", (2,)))


def test_a_deposed_writer_cannot_drop() -> None:
    state = fresh()
    sealed_stream(state, "log", 1, count=3, epoch=4)
    state.apply(s.FenceStream("log", 7))  # a new owner
    with pytest.raises(Fenced):
        state.apply(s.DropExtents("log", (1,), epoch=4))
    assert state.stream("log").extents == (1, 2, 3)
    with pytest.raises(NotFound):
        state.apply(s.DropExtents("nothing", (1,)))


def test_split_children_keep_a_shared_extent_until_the_last_lets_go() -> None:
    state = fresh()
    sealed_stream(state, "p/log", 1, count=3)
    state.apply(s.MultiModify((s.CreateStreamFrom("c/log", (1, 2, 3)),
                               s.CreateStreamFrom("d/log", (1, 2, 3)),
                               s.RetireStream("p/log"))))
    for child in ("c/log", "d/log"):
        add(state, child, {"c/log": 10, "d/log": 11}[child])
    first = state.apply(s.DropExtents("c/log", (1, 2)))
    assert first.dropped == (1, 2) and first.unreferenced == ()
    assert state.references() == {1: 1, 2: 1, 3: 2, 10: 1, 11: 1}
    with pytest.raises(PreconditionFailed, match="still referenced"):
        state.apply(s.DeleteExtent(1))
    second = state.apply(s.DropExtents("d/log", (1,)))
    assert second.unreferenced == (1,)
    state.apply(s.DeleteExtent(1))
    assert state.extent(1).state == s.DELETED and state.extent(2).state == s.SEALED


def test_drop_inside_a_multi_modify_is_all_or_none_and_survives_a_snapshot() -> None:
    state = fresh()
    sealed_stream(state, "a", 1, count=3)
    sealed_stream(state, "b", 4, count=2)
    before = state.digest()
    with pytest.raises(PreconditionFailed):
        state.apply(s.MultiModify((s.DropExtents("a", (1,)), s.DropExtents("b", (5,)))))
    assert state.digest() == before
    state.apply(s.MultiModify((s.DropExtents("a", (1,)), s.DropExtents("b", (4,)))))
    restored = s.StreamManagerState.from_snapshot(state.to_snapshot())
    assert restored.digest() == state.digest()
    assert restored.stream("a").extents == (2, 3) and restored.stream("b").extents == (5,)
