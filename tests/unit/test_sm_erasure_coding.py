"""Erasure coding in the stream manager's pure state machine (RecordErasureCoding,
ReleaseReplicas, ReplaceFragment: transitions and refusals, snapshots) and fragment placement."""

from __future__ import annotations

import pytest

from common.errors import InvalidArgument, NotFound, PreconditionFailed, Unavailable
from stream_layer.stream_manager import state as s
from stream_layer.stream_manager.placement import (
    Candidate,
    place_fragment_replacement,
    place_fragments,
)

NODES = [(f"en-{i}", f"fd-{(i - 1) % 3 + 1}") for i in range(1, 10)]
FRAGMENTS = ("en-4", "en-5", "en-6", "en-7", "en-8")


def sealed_extent(length: int = 300) -> s.StreamManagerState:
    state = s.StreamManagerState()
    for name, domain in NODES:
        state.apply(s.RegisterNode(name, f"127.0.0.1:{7100 + int(name[3:])}", domain, "ud", 0))
    state.apply(s.ReserveExtentIds(10))
    state.apply(s.CreateStream("a"))
    state.apply(s.AddExtent("a", 1, ("en-1", "en-2", "en-3"), expect_last=0))
    state.apply(s.SealExtent(1, length))
    return state


def record(**changes: object) -> s.RecordErasureCoding:
    fields = {"extent_id": 1, "fragments": FRAGMENTS, "k": 3, "m": 2,
              "cuts": (0, 100, 200, 300), "crcs": (1, 2, 3, 4, 5)}
    fields.update(changes)
    return s.RecordErasureCoding(**fields)  # type: ignore[arg-type]


def test_sealed_to_erasure_coded_then_replicas_released() -> None:
    state = sealed_extent()
    coded = state.apply(record())
    assert coded.state == s.ERASURE_CODED
    assert (coded.fragments, coded.ec_k, coded.ec_m) == (FRAGMENTS, 3, 2)
    assert coded.replicas == ("en-1", "en-2", "en-3")  # until they are deleted
    assert state.apply(record()) == coded  # a retried record: the same answer
    assert state.apply(s.ReleaseReplicas(1, ("en-2",))).replicas == ("en-1", "en-3")
    assert state.apply(s.ReleaseReplicas(1, ("en-1", "en-3"))).replicas == ()
    restored = s.StreamManagerState.from_snapshot(state.to_snapshot())
    assert restored.digest() == state.digest()
    assert restored.extent(1).ec_cuts == (0, 100, 200, 300)
    assert state.apply(s.DeleteStream("a")) is None
    assert state.apply(s.DeleteExtent(1)).state == s.DELETED


@pytest.mark.parametrize("changes, error", [
    ({"cuts": (0, 100, 200, 299)}, InvalidArgument),  # not the sealed length
    ({"cuts": (0, 200, 100, 300)}, InvalidArgument),
    ({"fragments": FRAGMENTS[:4]}, InvalidArgument),
    ({"fragments": ("en-4",) * 5}, InvalidArgument),
    ({"fragments": (*FRAGMENTS[:4], "en-99")}, NotFound),
    ({"crcs": (1, 2)}, InvalidArgument),
    ({"k": 0, "cuts": (0,)}, InvalidArgument),
])
def test_bad_records_are_refused_and_change_nothing(changes: dict[str, object],
                                                    error: type[Exception]) -> None:
    state = sealed_extent()
    before = state.digest()
    with pytest.raises(error):
        state.apply(record(**changes))
    assert state.digest() == before


def test_only_sealed_extents_are_coded() -> None:
    state = sealed_extent()
    state.apply(s.AddExtent("a", 2, ("en-1", "en-2", "en-3"), expect_last=1))
    with pytest.raises(PreconditionFailed):
        state.apply(record(extent_id=2))  # open
    state.apply(record())
    with pytest.raises(PreconditionFailed):
        state.apply(record(crcs=(9, 9, 9, 9, 9)))  # coded already, differently
    with pytest.raises(PreconditionFailed):
        state.apply(s.ReplaceReplica(1, "en-1", "en-9"))  # replicas are no longer copied
    with pytest.raises(PreconditionFailed):
        state.apply(s.ReleaseReplicas(2, ("en-1",)))  # an open extent's replicas are its data


def test_replace_fragment() -> None:
    state = sealed_extent()
    state.apply(record())
    assert state.apply(s.ReplaceFragment(1, 2, "en-6", "en-9")).fragments == (
        "en-4", "en-5", "en-9", "en-7", "en-8")
    for bad in [s.ReplaceFragment(1, 2, "en-6", "en-1"),  # not there any more
                s.ReplaceFragment(1, 0, "en-4", "en-5"),  # holds one already
                s.ReplaceFragment(1, 7, "en-4", "en-1")]:
        with pytest.raises(PreconditionFailed):
            state.apply(bad)
    with pytest.raises(NotFound):
        state.apply(s.ReplaceFragment(1, 0, "en-4", "en-99"))
    with pytest.raises(PreconditionFailed):
        sealed_extent().apply(s.ReplaceFragment(1, 0, "en-4", "en-9"))


def test_multi_modify_with_a_refused_record_is_all_or_none() -> None:
    state = sealed_extent()
    before = state.digest()
    with pytest.raises(PreconditionFailed):  # coded by the first command, not by the last
        state.apply(s.MultiModify((record(), s.ReleaseReplicas(1, ("en-1",)),
                                   record(extent_id=1, cuts=(0, 1, 2, 300)))))
    assert state.digest() == before


def candidates(loads: dict[str, int] | None = None) -> list[Candidate]:
    return [Candidate(n, d, (loads or {}).get(n, 0)) for n, d in NODES]


def test_fragments_spread_evenly_over_fault_domains() -> None:
    names = place_fragments(candidates(), 9)
    domains = dict(NODES)
    assert len(set(names)) == 9
    assert sorted(domains[n] for n in names) == ["fd-1"] * 3 + ["fd-2"] * 3 + ["fd-3"] * 3
    five = place_fragments(candidates({"en-1": 5}), 5)
    assert "en-1" not in five
    assert max(sum(domains[n] == d for n in five) for d in ("fd-1", "fd-2", "fd-3")) == 2
    with pytest.raises(Unavailable):
        place_fragments(candidates(), 10)


def test_a_rebuilt_fragment_goes_to_the_emptiest_domain() -> None:
    domains = dict(NODES)
    keep = ["en-1", "en-4", "en-2", "en-5", "en-3"]  # fd-1 x2, fd-2 x2, fd-3 x1
    assert domains[place_fragment_replacement(candidates(), keep, domains)] == "fd-3"
    with pytest.raises(Unavailable):
        place_fragment_replacement(candidates(), [n for n, _ in NODES], domains)
