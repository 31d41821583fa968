"""The stream manager's pure state machine: commands, refusals, atomic multi-modify, and
property tests over random command sequences."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import (
    AlreadyExists,
    Fenced,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    StampError,
)
from stream_layer.stream_manager import state as s
from stream_layer.stream_manager.placement import Candidate, place_extent, place_replacement
from tests.support.stream_manager import NODES, add, fresh


def test_stream_life() -> None:
    state = fresh()
    state.apply(s.CreateStream("a"))
    add(state, "a", 1)
    with pytest.raises(PreconditionFailed, match="open"):
        add(state, "a", 2)  # only the last extent may be open: seal it first
    state.apply(s.SealExtent(1, 100))
    assert state.apply(s.SealExtent(1, 100)).sealed_length == 100  # retried: same answer
    with pytest.raises(PreconditionFailed):
        state.apply(s.SealExtent(1, 99))
    add(state, "a", 2)
    assert state.stream("a").extents == (1, 2)
    with pytest.raises(PreconditionFailed, match="ends with extent 2"):
        state.apply(s.AddExtent("a", 3, ("en-1", "en-2", "en-3"), expect_last=1))
    renamed = state.apply(s.RenameStream("a", "b"))
    assert renamed.extents == (1, 2) and "a" not in state.streams
    state.apply(s.DeleteStream("b"))
    with pytest.raises(NotFound):
        state.stream("b")


def test_refusals() -> None:
    state = fresh()
    state.apply(s.CreateStream("a"))
    with pytest.raises(AlreadyExists):
        state.apply(s.CreateStream("a"))
    with pytest.raises(InvalidArgument):
        state.apply(s.CreateStream(""))
    with pytest.raises(InvalidArgument, match="not reserved"):
        state.apply(s.AddExtent("a", 10**9, ("en-1",), expect_last=0))
    with pytest.raises(NotFound):
        state.apply(s.AddExtent("a", 5, ("en-99",), expect_last=0))
    with pytest.raises(InvalidArgument):
        state.apply(s.AddExtent("a", 5, ("en-1", "en-1"), expect_last=0))
    with pytest.raises(InvalidArgument):
        state.apply("not a command")


def test_concat_is_pointer_only_and_needs_sealed_extents() -> None:
    state = fresh()
    for name, ids in (("c", (1, 2)), ("d", (3,))):
        state.apply(s.CreateStream(name))
        for extent_id in ids:
            add(state, name, extent_id)
            state.apply(s.SealExtent(extent_id, 10))
    state.apply(s.CreateStream("open"))
    add(state, "open", 4)
    with pytest.raises(PreconditionFailed):
        state.apply(s.Concat("c", "open"))
    joined = state.apply(s.Concat("c", "d"))
    assert joined.extents == (1, 2, 3)
    assert state.references()[3] == 2  # shared by c and d, not copied


def test_multi_modify_is_all_or_none() -> None:
    state = fresh()
    state.apply(s.CreateStream("b"))
    add(state, "b", 1)
    state.apply(s.SealExtent(1, 50))
    before = state.digest()
    with pytest.raises(AlreadyExists):
        state.apply(s.MultiModify((s.CreateStream("c"), s.Concat("c", "b"),
                                   s.CreateStream("d"), s.CreateStream("c"))))
    assert state.digest() == before
    # The split of B into C and D: both from B's extents, B gone, in one step.
    state.apply(s.MultiModify((s.CreateStream("c"), s.Concat("c", "b"), s.CreateStream("d"),
                               s.Concat("d", "b"), s.DeleteStream("b"))))
    assert state.stream("c").extents == state.stream("d").extents == (1,)
    assert "b" not in state.streams
    with pytest.raises(InvalidArgument):
        state.apply(s.MultiModify((s.ReserveExtentIds(5),)))


def test_replace_replica_and_delete() -> None:
    state = fresh()
    state.apply(s.CreateStream("a"))
    add(state, "a", 1)
    with pytest.raises(PreconditionFailed, match="only sealed"):
        state.apply(s.ReplaceReplica(1, "en-1", "en-4"))
    state.apply(s.SealExtent(1, 7))
    assert state.apply(s.ReplaceReplica(1, "en-1", "en-4")).replicas == ("en-4", "en-2", "en-3")
    with pytest.raises(PreconditionFailed, match="still referenced"):
        state.apply(s.DeleteExtent(1))
    state.apply(s.DeleteStream("a"))
    assert state.apply(s.DeleteExtent(1)).state == s.DELETED


def test_fence_stream_cuts_off_older_writers() -> None:
    state = fresh()
    state.apply(s.CreateStream("log"))
    state.apply(s.AddExtent("log", 1, ("en-1", "en-2", "en-3"), expect_last=0, epoch=5))
    assert state.apply(s.FenceStream("log", 7)).writer_epoch == 7
    state.apply(s.SealExtent(1, 10))
    with pytest.raises(Fenced, match="epoch 5 is fenced"):
        state.apply(s.AddExtent("log", 2, ("en-1", "en-2", "en-3"), expect_last=1, epoch=5))
    with pytest.raises(Fenced):
        state.apply(s.FenceStream("log", 6))
    assert state.apply(s.FenceStream("log", 7)).writer_epoch == 7  # a retry: same epoch
    state.apply(s.AddExtent("log", 2, ("en-1", "en-2", "en-3"), expect_last=1, epoch=7))
    assert state.apply(s.RenameStream("log", "log2")).writer_epoch == 7
    copy = s.StreamManagerState.from_snapshot(state.to_snapshot())
    assert copy.stream("log2").writer_epoch == 7


def test_snapshot_round_trip() -> None:
    state = fresh()
    state.apply(s.CreateStream("a"))
    add(state, "a", 1)
    state.apply(s.NodeDead("en-5"))
    copy = s.StreamManagerState.from_snapshot(state.to_snapshot())
    assert copy.digest() == state.digest()
    assert copy.streams == state.streams and copy.extents == state.extents


# ---- properties over random command sequences ------------------------------------------------

names = st.sampled_from(["a", "b", "c"])
replicas = st.permutations([n for n, _ in NODES]).map(lambda p: tuple(p[:3]))
commands = st.one_of(
    st.builds(s.CreateStream, names), st.builds(s.DeleteStream, names),
    st.builds(s.RenameStream, names, names),
    st.builds(s.AddExtent, names, st.integers(1, 30), replicas, st.integers(0, 30),
              st.integers(0, 3)),
    st.builds(s.FenceStream, names, st.integers(0, 3)),
    st.builds(s.SealExtent, st.integers(1, 30), st.integers(0, 500)),
    st.builds(s.Concat, names, names),
    st.builds(s.CreateStreamFrom, names, st.lists(st.integers(1, 30), max_size=3).map(tuple)),
    st.builds(s.RetireStream, names),
    st.builds(s.ReplaceReplica, st.integers(1, 30), st.sampled_from([n for n, _ in NODES]),
              st.sampled_from([n for n, _ in NODES])),
    st.builds(s.DeleteExtent, st.integers(1, 30)),
    st.builds(s.NodeDead, st.sampled_from([n for n, _ in NODES])),
)
any_command = st.one_of(commands, st.lists(commands, min_size=1, max_size=4).map(
    lambda cs: s.MultiModify(tuple(cs))))


def check_invariants(state: s.StreamManagerState) -> None:
    for stream in state.streams.values():
        for extent_id in stream.extents[:-1]:
            assert state.extents[extent_id].state != s.OPEN, "an open extent mid-stream"
        assert len(set(stream.extents)) == len(stream.extents)
        assert stream.name not in state.retired, "a retired name is in use"
    references = state.references()
    for extent in state.extents.values():
        if extent.state == s.DELETED:
            assert not references.get(extent.extent_id), "a deleted extent is referenced"
        assert len(set(extent.replicas)) == len(extent.replicas)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(any_command, max_size=40))
def test_refused_commands_change_nothing_and_invariants_hold(sequence: list[object]) -> None:
    state = fresh()
    replica = fresh()  # a second replica applying the same log must agree
    for command in sequence:
        before = state.digest()
        try:
            state.apply(command)
        except StampError:
            assert state.digest() == before, f"refused {command} changed the state"
        with contextlib.suppress(StampError):
            replica.apply(command)
        check_invariants(state)
    assert state.digest() == replica.digest()
    assert s.StreamManagerState.from_snapshot(state.to_snapshot()).digest() == state.digest()


# ---- placement -------------------------------------------------------------------------------

@given(st.lists(st.tuples(st.sampled_from(["fd-1", "fd-2", "fd-3", "fd-4"]),
                          st.integers(0, 50)), min_size=3, max_size=12))
def test_placement_prefers_distinct_fault_domains_and_light_nodes(
        nodes: list[tuple[str, int]]) -> None:
    candidates = [Candidate(f"n{i}", domain, load) for i, (domain, load) in enumerate(nodes)]
    chosen = place_extent(candidates, 3)
    assert len(set(chosen)) == 3
    domains = {c.fault_domain for c in candidates}
    by_name = {c.name: c for c in candidates}
    chosen_domains = {by_name[n].fault_domain for n in chosen}
    assert len(chosen_domains) == min(3, len(domains))
    for name in chosen:  # nobody lighter in the same domain was passed over
        c = by_name[name]
        assert all(o.load >= c.load for o in candidates
                   if o.fault_domain == c.fault_domain and o.name not in chosen)


def test_replacement_avoids_the_fault_domains_of_the_replicas_that_stay() -> None:
    candidates = [Candidate(n, d, 0) for n, d in NODES]
    domains = dict(NODES)
    # en-3 (fd-3) is lost; en-1 (fd-1) and en-2 (fd-2) stay: the copy goes to fd-3's en-6.
    target = place_replacement(candidates, ["en-1", "en-2"], domains,
                               exclude=["en-1", "en-2", "en-3"])
    assert target == "en-6"
    # The lost replica's node is never the target, even when lightest.
    lighter = [Candidate(n, d, 0 if n == "en-3" else 5) for n, d in NODES]
    assert place_replacement(lighter, ["en-1", "en-2"], domains,
                             exclude=["en-1", "en-2", "en-3"]) == "en-6"
