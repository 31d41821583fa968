"""The nemesis's schedule (tools/chaos/schedule.py): the same seed replays the same schedule,
another seed makes another; every kind of fault and every role appears over a long enough
schedule; faults come one at a time, inside the run, on processes of the right role."""

from __future__ import annotations

import itertools
from collections import Counter

from tools.chaos.report import availability_by_fault, outside_power_cuts
from tools.chaos.schedule import (
    DISK_KINDS,
    END_QUIET_S,
    FIRST_DECK_RUN_S,
    KINDS,
    PROCESS_KINDS,
    ROLES,
    make_schedule,
)

SHAPE = {"lock": ["lock-1", "lock-2", "lock-3"], "sm": ["sm-1", "sm-2", "sm-3"],
         "en": [f"en-{i}" for i in range(1, 7)], "pm": ["pm-1", "pm-2"],
         "ps": ["ps-1", "ps-2"], "fe": ["fe-1", "fe-2"]}
LOGS = [f"log-{w}" for w in range(8)]
ROLE_OF = {name: role for role, names in SHAPE.items() for name in names}


def test_the_same_seed_makes_the_same_schedule_and_another_seed_another() -> None:
    one = make_schedule(7, 600, SHAPE, LOGS, power_cuts=True)
    assert one == make_schedule(7, 600, SHAPE, LOGS, power_cuts=True)
    assert [f.to_dict() for f in one] == [f.to_dict() for f in
                                          make_schedule(7, 600, SHAPE, LOGS, power_cuts=True)]
    assert one != make_schedule(8, 600, SHAPE, LOGS, power_cuts=True)


def test_every_kind_and_every_role_appears_in_a_long_schedule() -> None:
    faults = make_schedule(1, 30 * 60, SHAPE, LOGS, power_cuts=True)
    assert set(Counter(f.kind for f in faults)) == set(KINDS)
    hit_roles = {ROLE_OF[f.target] for f in faults if f.kind in PROCESS_KINDS}
    assert hit_roles == set(ROLES)
    # Each kind about as often as the others (a deck, not a lucky draw).
    counts = Counter(f.kind for f in faults)
    assert max(counts.values()) - min(counts.values()) <= 1, counts


def test_a_one_minute_schedule_has_as_many_kinds_as_faults() -> None:
    faults = make_schedule(1, 60, SHAPE, LOGS, power_cuts=False)
    assert len(faults) >= 5
    kinds = [f.kind for f in faults]
    assert len(set(kinds)) == min(len(kinds), len(KINDS) - 1)
    assert "power_cut" not in kinds  # no lossy file system: no power cuts


def test_a_run_of_a_minute_deals_every_kind_with_any_seed() -> None:
    for seed in range(20):
        for cuts in (True, False):
            faults = make_schedule(seed, FIRST_DECK_RUN_S, SHAPE, LOGS, power_cuts=cuts)
            kinds = {f.kind for f in faults}
            assert kinds == set(KINDS) - (set() if cuts else {"power_cut"}), (seed, kinds)
    # a long run keeps its pace after the first deck
    long = make_schedule(1, 1800, SHAPE, LOGS, power_cuts=True)
    assert all(f.hold_s >= 1.0 or f.hold_s == 0 for f in long[len(KINDS):])


def test_faults_come_one_at_a_time_inside_the_run_on_the_right_roles() -> None:
    for seed in range(20):
        faults = make_schedule(seed, 300, SHAPE, LOGS, power_cuts=True)
        for before, after in itertools.pairwise(faults):
            assert before.at_s + before.hold_s < after.at_s
        assert all(0 < f.at_s < 300 - END_QUIET_S for f in faults)
        for f in faults:
            if f.kind in DISK_KINDS:
                assert ROLE_OF[f.target] == "en"
            elif f.kind == "flip_read":
                assert f.target == "ps-*"
            elif f.kind in ("split", "merge", "move"):
                assert f.target in LOGS
            elif f.kind == "power_cut":
                assert f.target == "stamp"


def test_a_stamp_with_one_partition_server_is_never_asked_to_move() -> None:
    shape = {**SHAPE, "ps": ["ps-1"]}
    assert "move" not in {f.kind for f in make_schedule(3, 30 * 60, shape, LOGS, True)}


def test_availability_by_fault_kind() -> None:
    ok = [10, 10, 0, 0, 10, 10, 10, 10, 10, 10, 4, 10]
    log = [{"kind": "kill", "start_s": 2.0, "end_s": 3.5, "outcome": "done"},
           {"kind": "split", "start_s": 10.2, "end_s": 10.4, "outcome": "done"},
           {"kind": "merge", "start_s": 5.0, "end_s": 5.1, "outcome": "skipped"}]
    by = availability_by_fault(ok, log)
    assert by["kill"] == {"ok_per_s": 0.0, "seconds": 2}
    assert by["split"] == {"ok_per_s": 7.0, "seconds": 2}  # the seconds after it
    assert by["none"] == {"ok_per_s": 10.0, "seconds": 8}
    assert "merge" not in by


def test_availability_outside_power_cuts_and_the_longest_gap() -> None:
    """Seconds 3-6 are a power cut (left out, and they end a run of empty seconds); of the
    7 left, 1, 2 and 8, 9 had no success: the longest gap is 2 s."""
    ok = [5, 0, 0, 0, 0, 0, 0, 5, 0, 0, 5]
    log = [{"kind": "power_cut", "start_s": 3.2, "end_s": 6.9, "outcome": "done"},
           {"kind": "kill", "start_s": 1.0, "end_s": 2.5, "outcome": "done"}]
    assert outside_power_cuts(ok, log) == {
        "seconds_outside_power_cuts": 7, "seconds_without_success_outside_power_cuts": 4,
        "available_share": round(3 / 7, 4), "longest_gap_s": 2}
