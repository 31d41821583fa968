"""The location server's cache (location/service.py, issue 30): answers at most its TTL old,
read through after a Moved (`fresh`), bounded, and failures never cached."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from common.errors import InvalidArgument, NotFound
from location.placement import AccountPlacement, StampInfo
from location.service import PlacementCache


class FakeStore:
    """location/store.py's reads, counted."""

    def __init__(self) -> None:
        self.placements: dict[str, AccountPlacement] = {}
        self.stamp_infos = {name: StampInfo(name, region, (f"127.0.0.{i}:7061",))
                            for i, (name, region) in enumerate(
                                (("west-1", "west"), ("east-1", "east")), start=2)}
        self.reads = 0

    def resolve(self, account: str) -> tuple[AccountPlacement, int]:
        self.reads += 1
        if account not in self.placements:
            raise NotFound(f"no account {account} in this location")
        return self.placements[account], 1

    def stamps(self) -> dict[str, StampInfo]:
        return dict(self.stamp_infos)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def resolve(cache: PlacementCache, account: str, fresh: bool = False) -> Any:
    return asyncio.run(cache.resolve(account, fresh))


def test_an_answer_is_cached_for_the_ttl_and_read_through_when_fresh() -> None:
    store, clock = FakeStore(), Clock()
    store.placements["acme"] = AccountPlacement("acme", "west-1", "east-1")
    cache = PlacementCache(store, ttl_s=1.0, now=clock)  # type: ignore[arg-type]
    placement, primary, secondary = resolve(cache, "acme")
    assert (primary.name, secondary.name) == ("west-1", "east-1")
    assert primary.front_ends == ("127.0.0.2:7061",)
    # The account fails over: the cache answers the old placement until its TTL is up...
    store.placements["acme"] = AccountPlacement("acme", "east-1", "west-1", epoch=2)
    clock.now += 0.9
    assert resolve(cache, "acme")[0] == placement and store.reads == 1
    # ... unless asked fresh (a client that a stamp told Moved), and after the TTL.
    assert resolve(cache, "acme", fresh=True)[0].primary == "east-1" and store.reads == 2
    store.placements["acme"] = AccountPlacement("acme", "west-1", "east-1", epoch=3)
    clock.now += 1.1
    assert resolve(cache, "acme")[0].epoch == 3 and store.reads == 3


def test_unknown_and_malformed_names_are_refused_and_not_cached() -> None:
    store = FakeStore()
    cache = PlacementCache(store, now=Clock())  # type: ignore[arg-type]
    for _ in range(2):
        with pytest.raises(NotFound, match="no account ghost"):
            resolve(cache, "ghost")
    assert store.reads == 2 and len(cache) == 0
    with pytest.raises(InvalidArgument):
        resolve(cache, "Not_A_Name")
    assert store.reads == 2  # refused before any read


def test_the_cache_keeps_at_most_its_bound_dropping_the_oldest() -> None:
    store = FakeStore()
    for i in range(5):
        store.placements[f"acct-{i}"] = AccountPlacement(f"acct-{i}", "west-1", "east-1")
    cache = PlacementCache(store, entries_max=3, now=Clock())  # type: ignore[arg-type]
    for i in range(5):
        resolve(cache, f"acct-{i}")
    assert len(cache) == 3
    reads = store.reads
    resolve(cache, "acct-4")  # kept
    assert store.reads == reads
    resolve(cache, "acct-0")  # dropped first
    assert store.reads == reads + 1


def test_a_placement_naming_an_unknown_stamp_is_not_half_answered() -> None:
    store = FakeStore()
    store.placements["acme"] = AccountPlacement("acme", "west-1", "gone-1")
    with pytest.raises(NotFound, match="gone-1"):
        resolve(PlacementCache(store, now=Clock()), "acme")  # type: ignore[arg-type]


def test_the_ttl_is_bounded() -> None:
    with pytest.raises(InvalidArgument, match="0 to 10"):
        PlacementCache(FakeStore(), ttl_s=60)  # type: ignore[arg-type]
