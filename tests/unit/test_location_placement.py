"""Placement of a new account in a location (location/placement.py, issue 30): the primary by
load, the secondary the least loaded stamp of another region, never both in one region."""

from __future__ import annotations

import pytest

from common.errors import InvalidArgument, Unavailable
from location.placement import AccountPlacement, StampInfo, choose_stamps


def stamp(name: str, region: str, used: int = 0, capacity: int = 100) -> StampInfo:
    return StampInfo(name, region, (f"127.0.0.1:{len(name)}",), capacity, used)


def test_the_least_used_stamp_is_primary_and_the_least_used_elsewhere_secondary() -> None:
    stamps = [stamp("west-1", "west", used=50), stamp("west-2", "west", used=10),
              stamp("east-1", "east", used=70), stamp("east-2", "east", used=40)]
    primary, secondary = choose_stamps(stamps, {})
    assert (primary.name, secondary.name) == ("west-2", "east-2")


def test_equally_used_stamps_are_told_apart_by_accounts_then_name() -> None:
    """Equally: in whole percent (a fresh stamp's few megabytes more say nothing)."""
    stamps = [stamp("b", "west", used=999, capacity=100_000), stamp("a", "west"),
              stamp("c", "east", used=500, capacity=100_000)]
    assert [s.name for s in choose_stamps(stamps, {})] == ["a", "c"]
    assert [s.name for s in choose_stamps(stamps, {"a": 2, "c": 1})] == ["b", "c"]
    assert [s.name for s in choose_stamps(stamps, {"a": 2, "b": 2})] == ["c", "a"]


def test_a_location_of_one_region_places_nothing() -> None:
    with pytest.raises(Unavailable, match="another region"):
        choose_stamps([stamp("a", "west"), stamp("b", "west")], {})
    with pytest.raises(Unavailable, match="no stamp"):
        choose_stamps([], {})


@pytest.mark.parametrize("bad", [
    dict(name="A", region="west", front_ends=("h:1",)),
    dict(name="a", region="", front_ends=("h:1",)),
    dict(name="a", region="west", front_ends=()),
    dict(name="a", region="west", front_ends=("h:1",), capacity_bytes=-1),
])
def test_a_bad_stamp_record_is_refused(bad: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(InvalidArgument):
        StampInfo(**bad)


def test_records_round_trip_and_a_placement_has_two_stamps() -> None:
    info = stamp("west-1", "west", used=5)
    assert StampInfo.from_json(info.to_json()) == info
    placed = AccountPlacement("acct", "west-1", "east-1", "live", 3)
    assert AccountPlacement.from_json(placed.to_json()) == placed
    with pytest.raises(InvalidArgument):
        AccountPlacement("acct", "west-1", "west-1")
    with pytest.raises(InvalidArgument):
        AccountPlacement("acct", "west-1", "east-1", "lost")
