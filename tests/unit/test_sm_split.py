"""The stream manager's side of split and merge (issue 17), pure state machine: CreateStreamFrom
and its refusals, RetireStream and retired names (snapshots too), FenceStream as a guard inside
a MultiModify, a split-shaped multi-modify all or none, shared extents counted and kept."""

from __future__ import annotations

import pytest

from common.errors import AlreadyExists, Fenced, InvalidArgument, NotFound, PreconditionFailed
from common.proto import stream_manager_pb2 as pb
from stream_layer import stream_ops
from stream_layer.stream_manager import state as s
from stream_layer.stream_manager.server import _stream_op
from tests.support.stream_manager import add, fresh, sealed_stream

KINDS = ("log", "row", "meta", "blob")


def test_create_stream_from_holds_exactly_the_extents_in_order() -> None:
    state = fresh()
    sealed_stream(state, "b", 1, count=3)
    child = state.apply(s.CreateStreamFrom("c", (3, 1)))
    assert child.extents == (3, 1) and child.writer_epoch == 0
    assert state.stream("b").extents == (1, 2, 3)  # the source is untouched
    assert state.references() == {1: 2, 2: 1, 3: 2}
    assert state.apply(s.CreateStreamFrom("empty", ())).extents == ()


@pytest.mark.parametrize("extents, error, match", [
    ((1, 99), NotFound, "no extent 99"),
    ((1, 3), PreconditionFailed, "extent 3 is open"),
    ((1, 4), PreconditionFailed, "extent 4 is deleted"),
    ((1, 2, 1), InvalidArgument, "repeat"),
])
def test_create_stream_from_refuses_bad_extents(extents: tuple[int, ...],
                                                error: type[Exception], match: str) -> None:
    state = fresh()
    sealed_stream(state, "b", 1, count=2)
    add(state, "b", 3)  # open, the stream's last
    state.apply(s.CreateStream("gone"))
    add(state, "gone", 4)
    state.apply(s.SealExtent(4, 1))
    state.apply(s.DeleteStream("gone"))
    state.apply(s.DeleteExtent(4))
    before = state.digest()
    with pytest.raises(error, match=match):
        state.apply(s.CreateStreamFrom("c", extents))
    assert state.digest() == before and "c" not in state.streams


def test_create_stream_from_refuses_bad_names() -> None:
    state = fresh()
    sealed_stream(state, "b", 1)
    with pytest.raises(AlreadyExists):
        state.apply(s.CreateStreamFrom("b", (1,)))
    with pytest.raises(InvalidArgument):
        state.apply(s.CreateStreamFrom("", (1,)))
    state.apply(s.CreateStreamFrom("c", (1, 2)))
    state.apply(s.RetireStream("b"))
    with pytest.raises(PreconditionFailed, match="retired"):
        state.apply(s.CreateStreamFrom("b", (1,)))


def test_retired_name_is_never_created_again() -> None:
    state = fresh()
    sealed_stream(state, "b", 1)
    with pytest.raises(NotFound):
        state.apply(s.RetireStream("nope"))
    state.apply(s.RetireStream("b"))
    assert "b" not in state.streams and state.retired == {"b"}
    for command in (s.CreateStream("b"), s.CreateStreamFrom("b", ()),
                    s.MultiModify((s.CreateStream("x"), s.CreateStream("b")))):
        with pytest.raises(PreconditionFailed, match="retired"):
            state.apply(command)
    assert "x" not in state.streams  # the multi-modify rolled back
    state.apply(s.CreateStream("a"))
    with pytest.raises(PreconditionFailed, match="retired"):
        state.apply(s.RenameStream("a", "b"))
    # The extents the retired stream held and no other holds are garbage now.
    assert state.apply(s.DeleteExtent(1)).state == s.DELETED


def test_a_refused_retire_inside_a_multi_modify_unretires() -> None:
    state = fresh()
    sealed_stream(state, "b", 1)
    before = state.digest()
    with pytest.raises(NotFound):
        state.apply(s.MultiModify((s.RetireStream("b"), s.DeleteStream("nope"))))
    assert state.retired == set() and "b" in state.streams and state.digest() == before


def test_snapshot_round_trip_keeps_retired_names() -> None:
    state = fresh()
    sealed_stream(state, "b", 1)
    state.apply(s.CreateStreamFrom("c", (1, 2)))
    state.apply(s.RetireStream("b"))
    raw = state.to_snapshot()
    copy = s.StreamManagerState.from_snapshot(raw)
    assert copy.retired == {"b"} and copy.digest() == state.digest()
    with pytest.raises(PreconditionFailed, match="retired"):
        copy.apply(s.CreateStream("b"))
    # A snapshot written before names could be retired loads, with none retired.
    del raw["retired"]
    old = s.StreamManagerState.from_snapshot(raw)
    assert old.retired == set() and old.streams == state.streams
    assert old.digest() != state.digest()  # the digest covers retired names


def test_fence_inside_a_multi_modify_is_a_guard() -> None:
    state = fresh()
    sealed_stream(state, "b", 1, epoch=7)
    before = state.digest()
    with pytest.raises(Fenced, match="epoch 6 is fenced"):
        state.apply(s.MultiModify((s.CreateStreamFrom("c", (1, 2)), s.FenceStream("b", 6),
                                   s.RetireStream("b"))))
    assert state.digest() == before and "c" not in state.streams
    # At the stream's own epoch the guard passes and changes nothing by itself.
    state.apply(s.MultiModify((s.FenceStream("b", 7),)))
    assert state.digest() == before


def split_commands(parent: int, left: int, right: int, epoch: int,
                   extents: dict[str, tuple[int, ...]]) -> s.MultiModify:
    """The split-shaped multi-modify the partition server sends, built the way it builds it
    (stream_ops) and converted the way the SM server converts it."""
    ops = [stream_ops.fence_op(f"partition/{parent}/{k}", epoch) for k in KINDS]
    for child in (left, right):
        ops += [stream_ops.create_from_op(f"partition/{child}/{k}", extents[k]) for k in KINDS]
    ops += [stream_ops.retire_op(f"partition/{parent}/{k}") for k in KINDS]
    return s.MultiModify(tuple(_stream_op(op) for op in ops))


def partition_streams(state: s.StreamManagerState, pid: int, epoch: int
                      ) -> dict[str, tuple[int, ...]]:
    extents = {}
    for index, kind in enumerate(KINDS):
        sealed_stream(state, f"partition/{pid}/{kind}", 10 * (index + 1), count=2, epoch=epoch)
        extents[kind] = state.stream(f"partition/{pid}/{kind}").extents
    return extents


def test_split_shaped_multi_modify_is_all_or_none() -> None:
    state = fresh()
    extents = partition_streams(state, 1, epoch=5)
    state.apply(s.FenceStream("partition/1/meta", 8))  # a newer owner of partition 1
    before = state.digest()
    with pytest.raises(Fenced):
        state.apply(split_commands(1, 2, 3, 5, extents))
    assert state.digest() == before
    assert all(f"partition/1/{k}" in state.streams for k in KINDS)
    assert not any(n.startswith(("partition/2/", "partition/3/")) for n in state.streams)
    assert state.retired == set()

    state.apply(split_commands(1, 2, 3, 8, extents))
    for kind in KINDS:
        assert (state.stream(f"partition/2/{kind}").extents
                == state.stream(f"partition/3/{kind}").extents == extents[kind])
    assert not any(n.startswith("partition/1/") for n in state.streams)
    assert state.retired == {f"partition/1/{k}" for k in KINDS}
    # Each extent is held by both children: counted twice, never deletable.
    references = state.references()
    for kind in KINDS:
        for extent_id in extents[kind]:
            assert references[extent_id] == 2
            with pytest.raises(PreconditionFailed, match="still referenced"):
                state.apply(s.DeleteExtent(extent_id))
    # A retry of the committed split changes nothing: its guards find no parent.
    after = state.digest()
    with pytest.raises(NotFound):
        state.apply(split_commands(1, 2, 3, 8, extents))
    assert state.digest() == after


def test_a_shared_extent_is_deletable_only_once_no_stream_holds_it() -> None:
    state = fresh()
    sealed_stream(state, "b", 1, count=1)
    state.apply(s.CreateStreamFrom("c", (1,)))
    state.apply(s.CreateStreamFrom("d", (1,)))
    state.apply(s.RetireStream("b"))
    state.apply(s.DeleteStream("c"))
    with pytest.raises(PreconditionFailed, match="still referenced"):
        state.apply(s.DeleteExtent(1))
    assert state.references() == {1: 1}
    state.apply(s.DeleteStream("d"))
    assert state.apply(s.DeleteExtent(1)).state == s.DELETED


def test_stream_op_builders_round_trip_through_the_server_conversion() -> None:
    assert _stream_op(stream_ops.fence_op("a", 3)) == s.FenceStream("a", 3)
    assert _stream_op(stream_ops.create_from_op("a", [4, 2])) == s.CreateStreamFrom("a", (4, 2))
    assert _stream_op(stream_ops.retire_op("a")) == s.RetireStream("a")
    assert _stream_op(stream_ops.create_op("a")) == s.CreateStream("a")
    assert _stream_op(stream_ops.delete_op("a")) == s.DeleteStream("a")
    assert _stream_op(stream_ops.rename_op("a", "b")) == s.RenameStream("a", "b")
    assert _stream_op(stream_ops.concat_op("a", "b")) == s.Concat("a", "b")
    assert stream_ops.named(stream_ops.concat_op("a", "b")) == ("a", "b")
    assert stream_ops.named(stream_ops.create_from_op("c", [1])) == ("c",)
    with pytest.raises(InvalidArgument):
        _stream_op(pb.StreamOp())


def test_concat_refuses_to_make_a_stream_hold_an_extent_twice() -> None:
    # Siblings of a split share their parent's extents: concatenating one onto the other
    # (or a stream onto one it was concatenated to before) would repeat them.
    state = fresh()
    sealed_stream(state, "b", 1)
    state.apply(s.CreateStreamFrom("c", (1, 2)))
    state.apply(s.CreateStreamFrom("d", (1, 2)))
    sealed_stream(state, "e", 3)
    state.apply(s.Concat("b", "e"))
    before = state.digest()
    for target, source in (("c", "d"), ("b", "e")):
        with pytest.raises(InvalidArgument, match="already holds extent"):
            state.apply(s.Concat(target, source))
    assert state.digest() == before
    assert state.stream("b").extents == (1, 2, 3, 4)
