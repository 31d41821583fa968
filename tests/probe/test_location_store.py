"""The location service's state on a real lock-service group (location/store.py, issue 30):
stamps registered, accounts placed by load across regions, a name placed at most once even
when created concurrently, and placement changes refused on a stale version."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from common.errors import AlreadyExists, NotFound, PreconditionFailed, StampError
from location.placement import StampInfo
from location.store import LocationStore
from lock_service.client import LockClient
from tests.conftest import module_stamp

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocationStore]:
    with module_stamp(tmp_path_factory, "location", extent_nodes=0, lock_servers=3) as local, \
            LockClient.from_stamp(local.data_dir, holder="test-location") as locks:
        store = LocationStore(locks)
        store.register_stamp(StampInfo("west-1", "west", ("127.0.0.2:1",), 100, 10))
        store.register_stamp(StampInfo("west-2", "west", ("127.0.0.2:2",), 100, 50))
        store.register_stamp(StampInfo("east-1", "east", ("127.0.0.3:1",), 100, 20))
        yield store


def test_accounts_are_placed_by_load_across_regions(store: LocationStore) -> None:
    assert sorted(store.stamps()) == ["east-1", "west-1", "west-2"]
    first = store.create_account("alpha")
    assert (first.primary, first.secondary, first.epoch) == ("west-1", "east-1", 1)
    assert store.resolve("alpha")[0] == first
    # west-1 grows past east-1's use: the next account goes to east-1, its copy to the west.
    store.register_stamp(StampInfo("west-1", "west", ("127.0.0.2:1",), 100, 90))
    second = store.create_account("beta")
    assert (second.primary, second.secondary) == ("east-1", "west-2")
    assert store.primaries() == {"west-1": 1, "east-1": 1}
    with pytest.raises(NotFound):
        store.resolve("nobody")
    with pytest.raises(AlreadyExists):
        store.create_account("alpha")


def test_concurrent_creates_of_one_name_place_it_once(store: LocationStore) -> None:
    outcomes: list[object] = []

    def create() -> None:
        try:
            outcomes.append(store.create_account("gamma"))
        except StampError as exc:
            outcomes.append(exc)
    threads = [threading.Thread(target=create) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    placed = [o for o in outcomes if not isinstance(o, Exception)]
    assert len(outcomes) == 4 and len(placed) == 1, outcomes
    assert all(isinstance(o, AlreadyExists) for o in outcomes if o not in placed)
    assert store.resolve("gamma")[0] == placed[0]


def test_a_placement_change_needs_the_version_it_read(store: LocationStore) -> None:
    current, version = store.create_account("delta"), store.resolve("delta")[1]
    live = store.replace(current, version, secondary_state="live")
    assert live.epoch == current.epoch  # no role moved
    _, version = store.resolve("delta")
    swapped = store.replace(live, version, primary=live.secondary, secondary=live.primary)
    assert (swapped.primary, swapped.secondary, swapped.epoch) == (
        current.secondary, current.primary, current.epoch + 1)
    with pytest.raises(PreconditionFailed):
        store.replace(live, version, secondary_state="unavailable")  # stale version
    assert store.resolve("delta")[0] == swapped
