"""Which accounts a location moves off a stamp past its capacity watermark (issue 30;
location/watermark.py)."""

from __future__ import annotations

from location.placement import AccountPlacement, StampInfo
from location.watermark import Move, plan_moves

GB = 1 << 30


def stamp(name: str, region: str, used_gb: float, capacity_gb: float = 100) -> StampInfo:
    return StampInfo(name, region, (f"127.0.0.1:{len(name)}",), int(capacity_gb * GB),
                     int(used_gb * GB))


def placed(account: str, primary: str, secondary: str, state: str = "live"
           ) -> AccountPlacement:
    return AccountPlacement(account, primary, secondary, state)


STAMPS = {s.name: s for s in (stamp("west-1", "west", 80), stamp("west-2", "west", 10),
                              stamp("west-3", "west", 50), stamp("east-1", "east", 40))}


def test_the_largest_accounts_move_until_the_stamp_is_under_the_watermark() -> None:
    placements = [placed("small", "west-1", "east-1"), placed("big", "west-1", "east-1"),
                  placed("mid", "west-1", "east-1")]
    sizes = {"small": 2 * GB, "big": 8 * GB, "mid": 5 * GB}
    plan = plan_moves(STAMPS, placements, sizes, 70)
    # 80% - 8 = 72%: still over; - 5 = 67%: under, "small" stays.
    assert plan.moves == [Move("big", "west-1", "west-2", 8 * GB),
                          Move("mid", "west-1", "west-2", 5 * GB)]
    assert plan.over == ["west-1"] and plan.stuck == []


def test_a_move_goes_to_the_least_used_stamp_of_the_region_that_stays_under() -> None:
    stamps = {**STAMPS, "west-2": stamp("west-2", "west", 65)}
    plan = plan_moves(stamps, [placed("big", "west-1", "east-1")], {"big": 15 * GB}, 70)
    assert plan.moves == [Move("big", "west-1", "west-3", 15 * GB)]  # 65+15 would pass 70


def test_what_the_plan_sends_counts_against_the_target() -> None:
    stamps = {**STAMPS, "west-1": stamp("west-1", "west", 99),
              "west-3": stamp("west-3", "west", 30)}
    placements = [placed("a", "west-1", "east-1"), placed("b", "west-1", "east-1")]
    plan = plan_moves(stamps, placements, {"a": 25 * GB, "b": 24 * GB}, 70)
    # a takes west-2 from 10% to 35%: b (99 - 25 = 74%, still over) goes to west-3 at 30%.
    assert plan.moves == [Move("a", "west-1", "west-2", 25 * GB),
                          Move("b", "west-1", "west-3", 24 * GB)]


def test_an_account_too_big_for_any_stamp_stays_and_a_smaller_one_moves() -> None:
    placements = [placed("a", "west-1", "east-1"), placed("b", "west-1", "east-1")]
    plan = plan_moves(STAMPS, placements, {"a": 5 * GB, "b": 64 * GB}, 70)
    assert plan.moves == [Move("a", "west-1", "west-2", 5 * GB)] and plan.stuck == ["b"]


def test_nowhere_to_go_is_said_and_nothing_else_moves() -> None:
    stamps = {"west-1": stamp("west-1", "west", 90), "east-1": stamp("east-1", "east", 10)}
    plan = plan_moves(stamps, [placed("a", "west-1", "east-1")], {"a": GB}, 70)
    assert plan.moves == [] and plan.stuck == ["a"] and plan.over == ["west-1"]


def test_only_live_geo_accounts_of_reported_stamps_move() -> None:
    stamps = {**STAMPS, "west-9": StampInfo("west-9", "west", ("127.0.0.1:9",))}
    placements = [placed("down", "west-1", "east-1", "unavailable"),
                  placed("copying", "west-1", "east-1", "bootstrapping"),
                  placed("elsewhere", "west-9", "east-1")]
    plan = plan_moves(stamps, placements, {"down": GB, "copying": GB, "elsewhere": GB}, 70)
    assert plan.moves == [] and plan.stuck == []
    assert plan_moves(STAMPS, [], {}, 70).over == ["west-1"]
    assert plan_moves(STAMPS, [], {}, 81).over == []


def test_the_secondary_is_never_the_target() -> None:
    stamps = {"west-1": stamp("west-1", "west", 90), "west-2": stamp("west-2", "west", 1),
              "east-1": stamp("east-1", "east", 1)}
    plan = plan_moves(stamps, [placed("a", "west-1", "west-2")], {"a": GB}, 70)
    assert plan.moves == [] and plan.stuck == ["a"]


def test_accounts_of_unknown_size_and_resting_stamps_are_left_alone() -> None:
    placements = [placed("known", "west-1", "east-1"), placed("unknown", "west-1", "east-1")]
    plan = plan_moves(STAMPS, placements, {"known": GB}, 70)
    assert plan.moves == [Move("known", "west-1", "west-2", GB)]
    resting = plan_moves(STAMPS, placements, {"known": GB}, 70, resting={"west-1"})
    assert resting.moves == [] and resting.over == []
