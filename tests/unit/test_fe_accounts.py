"""frontend/accounts.py on an in-memory key/value store with versions (the LockClient's
get/compare_and_set/delete/list contract) and a manual clock: create, keys, rotate, list,
delete, and the read-through cache that lets a rotated key work at most `cache_ttl_s` more."""

from __future__ import annotations

import base64

import pytest

from common.clock import ManualClock
from common.errors import (
    AlreadyExists,
    InvalidArgument,
    Moved,
    NotFound,
    PreconditionFailed,
    Unauthenticated,
)
from frontend import accounts, signing
from frontend.accounts import AccountStore


class VersionedDict:
    """The KV contract: versions count up from 1; expected version 0 means absent."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[bytes, int]] = {}
        self.reads = 0
        self.next_version = 1

    def get(self, key: str) -> tuple[bytes, int] | None:
        self.reads += 1
        return self.entries.get(key)

    def compare_and_set(self, key: str, expected_version: int, value: bytes) -> int | None:
        current = self.entries.get(key)
        if (current[1] if current else 0) != expected_version:
            return None
        self.entries[key] = (value, self.next_version)
        self.next_version += 1
        return self.entries[key][1]

    def delete(self, key: str, expected_version: int | None = None) -> bool:
        return self.entries.pop(key, None) is not None

    def list(self, prefix: str = "") -> list[str]:
        return sorted(k for k in self.entries if k.startswith(prefix))


@pytest.fixture
def kv() -> VersionedDict:
    return VersionedDict()


def test_create_keys_list_delete(kv: VersionedDict) -> None:
    store = AccountStore(kv, ManualClock())
    acme = store.create("acme")
    assert len(set(acme.keys)) == 2 and all(len(k) == accounts.KEY_BYTES for k in acme.keys)
    store.create("zeta")
    assert store.get("acme") == acme
    assert store.list() == ["acme", "zeta"]
    with pytest.raises(AlreadyExists):
        store.create("acme")
    with pytest.raises(InvalidArgument, match="account name"):
        store.create("Bad_Name")
    tombstone = store.delete("acme")
    assert store.list() == ["zeta"]
    with pytest.raises(NotFound):
        store.get("acme")
    assert store.delete("acme") == tombstone  # again: the purge resumes (idempotent)
    with pytest.raises(NotFound):
        store.delete("nobody")
    assert store.keys_of("acme") is None


def test_rotate_replaces_one_key_only(kv: VersionedDict) -> None:
    store = AccountStore(kv, ManualClock())
    before = store.create("acme")
    after = store.rotate("acme", 2)
    assert after.keys[0] == before.keys[0] and after.keys[1] != before.keys[1]
    assert store.get("acme") == after
    with pytest.raises(InvalidArgument, match="not 1 or 2"):
        store.rotate("acme", 3)
    with pytest.raises(NotFound):
        store.rotate("nobody", 1)


def test_a_key_rotated_elsewhere_stops_working_within_the_ttl(kv: VersionedDict) -> None:
    clock = ManualClock()
    front_end = AccountStore(kv, clock, cache_ttl_s=accounts.CACHE_TTL_MAX_S)
    operator = AccountStore(kv, clock)
    old_key = operator.create("acme").keys[0]
    request = signing.sign(old_key, "acme", "Append", "/acme/orders", signing.digest_of(b""),
                           clock.wall())
    signing.verify(request, keys_of=front_end.keys_of, now_s=clock.wall())
    reads = kv.reads
    operator.rotate("acme", 1)
    clock.advance(accounts.CACHE_TTL_MAX_S - 0.001)
    signing.verify(request, keys_of=front_end.keys_of, now_s=clock.wall())  # still cached
    assert kv.reads == reads + 1  # the rotation's own read; the front end read nothing
    clock.advance(0.001)
    with pytest.raises(Unauthenticated, match="bad signature"):
        signing.verify(request, keys_of=front_end.keys_of, now_s=clock.wall())


def test_a_miss_is_not_cached_and_the_cache_sees_its_own_changes(kv: VersionedDict) -> None:
    """A failed lookup occupies nothing (issue 28: made-up names filled the cache); bounding
    the reads they cause is frontend/auth.py's."""
    clock = ManualClock()
    store = AccountStore(kv, clock)
    assert store.keys_of("acme") is None
    reads = kv.reads
    assert store.keys_of("acme") is None and kv.reads == reads + 1
    assert store.keys_of("x" * 100_000) is None and kv.reads == reads + 1  # never read
    assert not store._cache
    created = store.create("acme")
    assert store.keys_of("acme") == created.keys  # its own change, at once
    rotated = store.rotate("acme", 1)
    assert store.keys_of("acme") == rotated.keys
    store.delete("acme")
    assert store.keys_of("acme") is None
    assert store.keys_of("Not A Name") is None
    assert not store._cache


def test_cache_ttl_is_at_most_ten_seconds(kv: VersionedDict) -> None:
    with pytest.raises(InvalidArgument, match="within that"):
        AccountStore(kv, ManualClock(), cache_ttl_s=10.5)


def test_rotation_retries_a_concurrent_change(kv: VersionedDict) -> None:
    store = AccountStore(kv, ManualClock())
    store.create("acme")
    real_cas = kv.compare_and_set
    raced: list[accounts.Account] = []

    def racing_cas(key: str, expected_version: int, value: bytes) -> int | None:
        if not raced:  # another operator rotates key 2 between our read and our write
            kv.compare_and_set = real_cas  # type: ignore[method-assign]
            raced.append(AccountStore(kv, ManualClock()).rotate("acme", 2))
        return real_cas(key, expected_version, value)

    kv.compare_and_set = racing_cas  # type: ignore[method-assign]
    mine = store.rotate("acme", 1)
    assert mine.keys[1] == raced[0].keys[1]  # their rotation of key 2 is kept, not lost
    assert store.get("acme") == mine


def test_repr_hides_keys(kv: VersionedDict) -> None:
    account = AccountStore(kv, ManualClock()).create("acme")
    assert all(repr(k) not in repr(account) for k in account.keys)


def test_a_deleted_name_is_retired_for_ever(kv: VersionedDict) -> None:
    """Issue 28, item 6: the tombstone takes the keys away at once, says a purge is pending
    until one is recorded, and no `create` gives the name out again, before or after."""
    clock = ManualClock(1000.0)
    store = AccountStore(kv, clock)
    store.create("acme")
    tombstone = store.delete("acme")
    assert tombstone == accounts.Tombstone("acme", 1000.0, None)
    assert b"keys" not in kv.entries["accounts/acme"][0]  # the keys themselves are gone
    assert store.keys_of("acme") is None
    with pytest.raises(NotFound, match="was deleted"):
        store.get("acme")
    with pytest.raises(NotFound, match="was deleted"):
        store.rotate("acme", 1)
    with pytest.raises(AlreadyExists, match="retired"):
        store.create("acme")
    assert store.list() == [] and store.tombstone("acme") == tombstone
    clock.advance(60)
    purged = store.mark_purged("acme")
    assert purged == accounts.Tombstone("acme", 1000.0, 1060.0)
    assert store.delete("acme") == purged  # a later delete sees it done (and may re-run)
    with pytest.raises(AlreadyExists, match="retired"):
        store.create("acme")
    assert store.keys_of("acme") is None


def test_only_a_deleted_account_has_a_tombstone_to_mark(kv: VersionedDict) -> None:
    store = AccountStore(kv, ManualClock())
    store.create("acme")
    for call in (store.tombstone, store.mark_purged):
        with pytest.raises(NotFound, match="no deleted account"):
            call("acme")
        with pytest.raises(NotFound, match="no deleted account"):
            call("nobody")
    assert store.keys_of("acme") is not None  # nothing changed


def test_an_account_deleted_elsewhere_stops_working_within_the_ttl(kv: VersionedDict) -> None:
    clock = ManualClock()
    front_end = AccountStore(kv, clock, cache_ttl_s=accounts.CACHE_TTL_MAX_S)
    operator = AccountStore(kv, clock)
    keys = operator.create("acme").keys
    assert front_end.keys_of("acme") == keys
    operator.delete("acme")
    clock.advance(accounts.CACHE_TTL_MAX_S)
    assert front_end.keys_of("acme") is None


def test_a_delete_racing_a_rotation_leaves_no_key(kv: VersionedDict) -> None:
    store = AccountStore(kv, ManualClock())
    store.create("acme")
    real_cas = kv.compare_and_set

    def racing_cas(key: str, expected_version: int, value: bytes) -> int | None:
        kv.compare_and_set = real_cas  # type: ignore[method-assign]
        AccountStore(kv, ManualClock()).rotate("acme", 1)  # between our read and our write
        return real_cas(key, expected_version, value)

    kv.compare_and_set = racing_cas  # type: ignore[method-assign]
    store.delete("acme")
    assert b"keys" not in kv.entries["accounts/acme"][0]
    assert store.keys_of("acme") is None


def test_a_purge_waits_out_the_front_ends_caches_once() -> None:
    """tools/account_purge.py: a purge starts once no front end takes the account's
    requests; a tombstone dated ahead of this host's clock costs one settle time, not
    more."""
    from common.config import default_config
    from tools import account_purge

    config = default_config()
    settle = account_purge.settle_s(config)
    assert settle == (config.front_end.account_cache_ttl_ms
                      + config.partition.client_timeout_ms) / 1000
    tombstone = accounts.Tombstone("acme", 1000.0)
    assert account_purge.remaining_settle_s(tombstone, config, 1000.0) == settle
    assert account_purge.remaining_settle_s(tombstone, config, 1001.5) == settle - 1.5
    assert account_purge.remaining_settle_s(tombstone, config, 1000.0 + settle) == 0
    assert account_purge.remaining_settle_s(tombstone, config, 500.0) == settle


def test_a_purge_deletes_in_batches_of_one_entity_group() -> None:
    """tools/account_purge.py's batching, on a recording client: one group per batch, at
    most batch_ops_max rows each, every row once; a batch that another purge beat to a row
    is done one row at a time."""
    import asyncio
    from types import SimpleNamespace

    from common.config import PartitionLimits
    from common.proto import partition_pb2 as pb
    from tools import account_purge
    from tools.progress import SILENT

    batches: list[tuple[str, list[bytes]]] = []
    deletes: list[tuple[str, bytes]] = []
    gone = {("b", b"1")}  # another purge deleted it

    async def batch(account: str, group: str, ops: list[tuple[str, bytes]]) -> list[str]:
        assert account == "acme" and all(kind == "delete" for kind, _ in ops)
        if any((group, row) in gone for _, row in ops):
            raise NotFound("no row")
        batches.append((group, [row for _, row in ops]))
        return [""] * len(ops)

    async def delete(account: str, group: str, row: bytes) -> None:
        if (group, row) in gone:
            raise NotFound("no row")
        deletes.append((group, row))

    client = SimpleNamespace(limits=PartitionLimits(batch_ops_max=2), batch=batch,
                             delete=delete)
    deleter = account_purge._BatchDeleter(client, "acme", SILENT)  # type: ignore[arg-type]

    async def run() -> None:
        for group, row in [("a", b"1"), ("a", b"2"), ("a", b"3"), ("b", b"1"), ("b", b"2"),
                           ("c", b"1")]:
            await deleter.add(pb.ScanItem(pname=group, row=row))
        await deleter.flush()

    asyncio.run(run())
    assert batches == [("a", [b"1", b"2"]), ("a", [b"3"]), ("c", [b"1"])]
    assert deletes == [("b", b"2")]
    assert (deleter.deleted, deleter.groups) == (5, 3)


def test_a_secondary_adopts_its_primarys_account_once_and_again(kv: VersionedDict) -> None:
    """A geo secondary holds the account its primary created, with the same keys, as its
    secondary naming the primary stamp (issue 30); adopting it again (a retried `stamp
    location create-account`) is a no-op; another account of that name, or a retired name,
    is refused."""
    primary = AccountStore(VersionedDict(), ManualClock()).create(
        "acme", primary_stamp="east-1", epoch=3)
    assert primary.geo == accounts.GeoRole("primary", "east-1", 3)
    store = AccountStore(kv, ManualClock())
    held = store.adopt(primary)
    assert held.geo == accounts.GeoRole("secondary", "east-1", 3)  # from the primary's record
    assert (held.name, held.keys, held.created_s) == (
        primary.name, primary.keys, primary.created_s)
    assert store.adopt(primary) == held
    assert store.get("acme") == held
    with pytest.raises(AlreadyExists, match="not as the one adopted"):
        store.adopt(primary, epoch=4)  # another role: set_role's, not adopt's
    other = AccountStore(VersionedDict(), ManualClock()).create("acme")
    with pytest.raises(AlreadyExists, match="not as the one adopted"):
        store.adopt(other)
    store.delete("acme")
    with pytest.raises(AlreadyExists):
        store.adopt(primary)


def test_an_old_record_is_a_stand_alone_primary_and_stays_as_it_was(kv: VersionedDict) -> None:
    """Issue 30: every record written before geo roles (no role, primary, epoch) decodes as
    a stand-alone primary, and a stand-alone account is written byte for byte as before."""
    old = (b'{"created_s": 5.0, "keys": ["' + base64.b64encode(b"a" * 32) + b'", "'
           + base64.b64encode(b"b" * 32) + b'"], "name": "acme"}')
    account = accounts.Account.decode(old)
    assert account.geo == accounts.STAND_ALONE == accounts.GeoRole("primary", "", 0)
    assert account.encode() == old
    kv.entries["accounts/acme"] = (old, 1)
    assert AccountStore(kv, ManualClock()).lookup("acme") == account
    assert AccountStore(kv, ManualClock()).create("zeta").geo == accounts.STAND_ALONE


@pytest.mark.parametrize("geo", [accounts.GeoRole(), accounts.GeoRole("primary", "east-1", 1),
                                 accounts.GeoRole("secondary", "east-1", 7),
                                 accounts.GeoRole("secondary", "", 2)])
def test_a_record_with_its_role_round_trips(geo: accounts.GeoRole) -> None:
    account = accounts.Account("acme", (b"a" * 32, b"b" * 32), 5.0, geo)
    assert accounts.Account.decode(account.encode()) == account
    assert accounts.decode_entry(account.encode()) == account


def test_a_role_is_one_of_two_and_an_epoch_not_negative() -> None:
    with pytest.raises(InvalidArgument, match="role"):
        accounts.GeoRole("tertiary", "east-1", 1)
    with pytest.raises(InvalidArgument, match="epoch"):
        accounts.GeoRole("secondary", "east-1", -1)


def test_set_role_moves_forward_by_epoch_only(kv: VersionedDict) -> None:
    """`set_role` (a failover's step): idempotent for the same role, primary and epoch;
    refused for an older epoch, or another role at the stored epoch; keys kept."""
    store = AccountStore(kv, ManualClock())
    created = store.create("acme", primary_stamp="east-1", epoch=3)
    demoted = store.set_role("acme", "secondary", "west-1", 4)
    assert demoted.geo == accounts.GeoRole("secondary", "west-1", 4)
    assert demoted.keys == created.keys and store.get("acme") == demoted
    version = kv.entries["accounts/acme"][1]
    assert store.set_role("acme", "secondary", "west-1", 4) == demoted  # again: nothing
    assert kv.entries["accounts/acme"][1] == version
    with pytest.raises(PreconditionFailed, match="not newer"):
        store.set_role("acme", "primary", "east-1", 3)  # an older placement
    with pytest.raises(PreconditionFailed, match="not newer"):
        store.set_role("acme", "primary", "east-1", 4)  # the same epoch, another role
    assert store.get("acme") == demoted
    rotated = store.rotate("acme", 1)
    assert rotated.geo == demoted.geo  # a rotation keeps the role
    with pytest.raises(NotFound):
        store.set_role("nobody", "primary", "east-1", 1)


def test_a_role_changed_elsewhere_is_seen_within_the_ttl(kv: VersionedDict) -> None:
    """The cache holds keys and role together: one read, one TTL."""
    clock = ManualClock()
    front_end = AccountStore(kv, clock, cache_ttl_s=accounts.CACHE_TTL_MAX_S)
    operator = AccountStore(kv, clock)
    operator.create("acme", primary_stamp="east-1", epoch=1)
    found = front_end.lookup("acme")
    assert found is not None and found.geo.role == "primary"
    reads = kv.reads
    operator.set_role("acme", "secondary", "west-1", 2)
    clock.advance(accounts.CACHE_TTL_MAX_S - 0.001)
    assert front_end.lookup("acme") == found and front_end.keys_of("acme") == found.keys
    assert kv.reads == reads + 1  # set_role's own read; the front end read nothing
    clock.advance(0.001)
    moved = front_end.lookup("acme")
    assert moved is not None and moved.geo == accounts.GeoRole("secondary", "west-1", 2)
    with pytest.raises(Moved, match="its primary is stamp west-1 \\(epoch 2\\)"):
        moved.geo.check_serves("acme", write=True, secondary_read=False)
