"""The gc job's pure decisions (spark/gc_plan.py): what an orphan is, and mark then sweep."""

from __future__ import annotations

from spark.gc_plan import REPLICA, Holding, Known, candidates, extent_key, plan_sweep

KNOWN = {
    1: Known(1, "sealed", ("a", "b", "c"), streams=("log",)),
    2: Known(2, "deleted", ("a", "b", "c")),
    3: Known(3, "erasure_coded", ("a",), ("d", "e", "f"), ("log",)),
    4: Known(4, "sealed", ("a", "b", "c")),          # held by no stream
    5: Known(5, "sealed", ("a", "b", "c"), streams=("x", "y")),  # shared after a split
}


def test_orphans_and_unreferenced_extents() -> None:
    holdings = [
        Holding("a", 1), Holding("d", 1),            # live; on a node not a replica
        Holding("a", 2),                             # of a deleted extent
        Holding("a", 3), Holding("d", 3, 0), Holding("g", 3, 1),  # leftover replica: kept
        Holding("a", 9),                             # unknown (a failed create, a spare)
        Holding("a", 10),                            # unknown but busy (the leader's spare)
        Holding("b", 1, 0),                          # fragment of a sealed extent
        Holding("a", 5), Holding("b", 5),            # shared: live
    ]
    found = candidates(holdings, KNOWN, busy={10})
    assert set(found) == {"replica:d:1", "replica:a:2", "fragment1:g:3", "replica:a:9",
                          "fragment0:b:1", extent_key(4)}
    assert "replaced" in found["fragment1:g:3"]
    assert candidates([], KNOWN, busy={4}) == {}  # busy: not even the extent


def test_sweep_only_after_the_grace_and_while_still_a_candidate() -> None:
    found = {"replica:a:9": "unknown", extent_key(4): "held by no stream"}
    sweep, marks = plan_sweep({}, found, now=100.0, grace_s=10)
    assert sweep == [] and marks == {"replica:a:9": 100.0, extent_key(4): 100.0}
    sweep, marks2 = plan_sweep(marks, found, now=105.0, grace_s=10)
    assert sweep == [] and marks2 == marks  # the first mark's time is kept
    # Extent 4 was taken into a stream at 106: not a candidate, its mark goes.
    sweep, marks3 = plan_sweep(marks2, {"replica:a:9": "unknown"}, now=107.0, grace_s=10)
    assert sweep == [] and set(marks3) == {"replica:a:9"}
    # Orphaned again at 111: marked anew, not swept with the old time.
    sweep, marks4 = plan_sweep(marks3, found, now=111.0, grace_s=10)
    assert sweep == ["replica:a:9"] and marks4[extent_key(4)] == 111.0


def test_marks_of_silent_nodes_are_kept_and_the_oldest_win_the_bound() -> None:
    marks = {"replica:s:1": 5.0, "replica:a:2": 6.0}
    sweep, kept = plan_sweep(marks, {}, now=100.0, grace_s=1, silent_nodes={"s"})
    assert sweep == [] and kept == {"replica:s:1": 5.0}
    found = {f"replica:a:{i}": "x" for i in range(10)}
    _, bounded = plan_sweep({"replica:a:7": 1.0}, found, now=50.0, grace_s=1, marks_max=3)
    assert len(bounded) == 3 and bounded["replica:a:7"] == 1.0
    assert REPLICA == -1


def test_copies_of_a_deleted_extent_go_at_once() -> None:
    found = candidates([Holding("a", 2), Holding("a", 9)], KNOWN, busy=set())
    sweep, marks = plan_sweep({}, found, now=100.0, grace_s=10)
    assert sweep == ["replica:a:2"] and {"replica:a:2", "replica:a:9"} <= set(marks)
