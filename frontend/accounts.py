"""Accounts and their keys, stored replicated in the lock service's key/value store (DESIGN
§3: "metadata that must survive (e.g. the partition map, account keys)"), never only in a
local file; and the read-through cache the front ends check signatures against.

Each account is one KV entry, `accounts/NAME` -> JSON `{"name", "keys": [key1, key2] as
base64, "created_s"}`, plus, for an account placed by a location (issue 30, geo-replication),
its role at this stamp: `"role"` ("primary": this stamp takes its writes; "secondary": this
stamp holds a copy and refuses its writes with Moved), `"primary"` (the name of its primary
stamp) and `"epoch"` (the location placement's epoch, which grows with every change of
roles). A record without them — every account made before, and every one made by plain
`stamp account create` — is a stand-alone primary (`GeoRole()`: "primary", "", 0), and a
stand-alone account is written without them, so its record is byte for byte what it was.
Every change is a compare-and-set on the version read, so two operators rotating at once
cannot lose one rotation (the loser retries on the new version); a role changes only to an
epoch at least the stored one (`set_role`), so a late, older placement cannot undo a newer.

Deleting an account (issue 28, item 6) replaces its entry by a tombstone, JSON `{"name",
"retired": true, "deleted_s", "purged_s"}`, in one compare-and-set: the keys are gone from
the store at once (and from every front end's cache within its TTL), and the name is
retired for ever — `create` refuses it. Why for ever, not until the data is gone: the
partition layer cannot drop a partition name, so what a purge (tools/account_purge.py)
leaves is each name's bookkeeping — a sealed, empty log under its old name, an entity
group's mark — and a new owner of the account would inherit those names (listed, sealed,
typed); names are data too. `purged_s` is None while the purge of the account's data is
pending (a purge cut short is resumed by deleting again: `delete` of a tombstoned name
returns its tombstone) and the time of the last complete purge after.

The cache (`lookup`, and `keys_of` over it) holds the accounts it found — keys and role
together, one read for both — for at most `cache_ttl_s` (<= CACHE_TTL_MAX_S = 10 s) of the
injected clock's monotonic time. So a key rotated, an account deleted or a role changed
anywhere is seen by every front end within 10 s, and a flood of
requests of one account costs the lock service one read per TTL. A failed lookup (no such
account, or a name no account can have) is never cached: made-up names must not occupy
memory (issue 28); bounding the lookups they cause is the caller's (frontend/auth.py). A
TTL of 0 caches nothing. A change made through this store instance is seen by it at once.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from common.clock import Clock, SystemClock
from common.errors import AlreadyExists, InvalidArgument, Moved, NotFound, PreconditionFailed
from frontend import names

KEY_PREFIX = "accounts/"
KEY_BYTES = 32  # 256-bit keys, from `secrets`
CACHE_TTL_MAX_S = 10.0
CACHE_TTL_S = 5.0
CACHE_ENTRIES_MAX = 100_000
CAS_ATTEMPTS_MAX = 16
PRIMARY = "primary"
SECONDARY = "secondary"
ROLES = (PRIMARY, SECONDARY)
STAMP_NAME_CHARS_MAX = 63  # location/placement.py's stamp names


class KeyValue(Protocol):
    """The part of lock_service.client.LockClient the store uses."""

    def get(self, key: str) -> tuple[bytes, int] | None: ...

    def compare_and_set(self, key: str, expected_version: int, value: bytes) -> int | None: ...

    def delete(self, key: str, expected_version: int | None = None) -> bool: ...

    def list(self, prefix: str = "") -> list[str]: ...


@dataclass(frozen=True)
class Tombstone:
    """A deleted account's entry: its name retired, `purged_s` None while its data's purge
    is pending."""

    name: str
    deleted_s: float
    purged_s: float | None = None

    def encode(self) -> bytes:
        return json.dumps({"name": self.name, "retired": True, "deleted_s": self.deleted_s,
                           "purged_s": self.purged_s}, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> Tombstone:
        record = json.loads(data)
        purged_s = record["purged_s"]
        return cls(record["name"], float(record["deleted_s"]),
                   None if purged_s is None else float(purged_s))


@dataclass(frozen=True)
class GeoRole:
    """An account's role at this stamp (module docstring); the default is a stand-alone
    primary. `primary` names the account's primary stamp ("": stand-alone, or not told)."""

    role: str = PRIMARY
    primary: str = ""
    epoch: int = 0

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise InvalidArgument(f"an account's role is {' or '.join(ROLES)}, not "
                                  f"{self.role!r}")
        if not isinstance(self.epoch, int) or self.epoch < 0:
            raise InvalidArgument(f"a placement's epoch is a whole number >= 0, not "
                                  f"{self.epoch!r}")
        if len(self.primary) > STAMP_NAME_CHARS_MAX:
            raise InvalidArgument(f"a stamp name has at most {STAMP_NAME_CHARS_MAX} "
                                  f"characters")

    @property
    def stand_alone(self) -> bool:
        return self == STAND_ALONE

    def check_serves(self, account: str, write: bool, secondary_read: bool) -> None:
        """Moved (naming the primary) if this stamp must not answer a request of `account`:
        here its secondary, a write, or a read its client did not mark as a read of the
        secondary. An unmarked read is one its client means for the primary, and must see
        every write acknowledged before it (DESIGN §8): a client that still holds this stamp
        as primary (its location answer not yet expired after a failover) is sent on."""
        if self.role == SECONDARY and (write or not secondary_read):
            raise Moved.of(account, self.primary, self.epoch, write)


STAND_ALONE = GeoRole()


@dataclass(frozen=True)
class Account:
    name: str
    keys: tuple[bytes, bytes]
    created_s: float
    geo: GeoRole = STAND_ALONE

    def encode(self) -> bytes:
        record: dict[str, object] = {
            "name": self.name, "keys": [base64.b64encode(k).decode() for k in self.keys],
            "created_s": self.created_s}
        if not self.geo.stand_alone:  # a stand-alone record stays as it always was
            record.update(role=self.geo.role, primary=self.geo.primary, epoch=self.geo.epoch)
        return json.dumps(record, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> Account:
        """A record of any age: one without a role is a stand-alone primary."""
        record = json.loads(data)
        key1, key2 = (base64.b64decode(k, validate=True) for k in record["keys"])
        geo = GeoRole(record.get("role", PRIMARY), record.get("primary", ""),
                      int(record.get("epoch", 0)))
        return cls(record["name"], (key1, key2), float(record["created_s"]), geo)

    def __repr__(self) -> str:
        return (f"Account(name={self.name!r}, keys=<2 secret>, created_s={self.created_s}, "
                f"geo={self.geo!r})")


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def decode_entry(data: bytes) -> Account | Tombstone:
    """An `accounts/NAME` entry: a live account or a deleted one's tombstone."""
    return Tombstone.decode(data) if json.loads(data).get("retired") else Account.decode(data)


def retired_message(name: str) -> str:
    return (f"the name {name!r} belonged to a deleted account and is retired: a deleted "
            f"account's name is never given out again; choose another")


class AccountStore:
    """Create, read, rotate, list and delete accounts in `kv`; `keys_of` for verifying."""

    def __init__(self, kv: KeyValue, clock: Clock, cache_ttl_s: float = CACHE_TTL_S) -> None:
        if not 0 <= cache_ttl_s <= CACHE_TTL_MAX_S:
            raise InvalidArgument(f"account cache TTL is 0 to {CACHE_TTL_MAX_S} s (a rotated "
                                  f"key must stop working within that), not {cache_ttl_s}")
        self._kv = kv
        self._clock = clock
        self._ttl_s = cache_ttl_s
        self._cache: dict[str, tuple[float, Account]] = {}

    # --- administration (always read through to the replicated store) ----------------------

    def create(self, name: str, *, primary_stamp: str = "", epoch: int = 0) -> Account:
        """A new account with two fresh random keys; AlreadyExists if the name is taken,
        by an account or by a deleted one's tombstone (retired for ever: module docstring).
        By default a stand-alone account; a location creating an account's primary names
        this stamp (`primary_stamp`) and its placement's `epoch`: the record then says this
        stamp is the primary, and a secondary adopting it learns where writes go."""
        names.check_account(name)
        geo = GeoRole(PRIMARY, primary_stamp, epoch)
        account = Account(name, (new_key(), new_key()), self._clock.wall(), geo)
        if self._kv.compare_and_set(KEY_PREFIX + name, 0, account.encode()) is None:
            found = self._entry(name)
            if found is not None and isinstance(found[0], Tombstone):
                raise AlreadyExists(retired_message(name))
            raise AlreadyExists(f"account {name!r} already exists")
        self._remember(name, account)
        return account

    def adopt(self, account: Account, *, primary: str | None = None,
              epoch: int | None = None) -> Account:
        """Hold `account` (made by another stamp, its primary) as its geo **secondary**
        (issue 30): the same keys and creation time, role "secondary", naming the primary
        stamp `primary` at placement `epoch` — by default those `account`'s own record
        names (`create`'s `primary_stamp` and `epoch`). Written if the name is free;
        returned if this very secondary is here already (a retried adoption, idempotent);
        else AlreadyExists (another account of the name, another role, or retired: a role
        changes by `set_role` only). This stamp then refuses the account's writes (Moved)."""
        names.check_account(account.name)
        geo = GeoRole(SECONDARY, account.geo.primary if primary is None else primary,
                      account.geo.epoch if epoch is None else epoch)
        held = Account(account.name, account.keys, account.created_s, geo)
        if self._kv.compare_and_set(KEY_PREFIX + held.name, 0, held.encode()) is None:
            found = self._entry(held.name)
            if found is None or found[0] != held:
                raise AlreadyExists(f"account {held.name!r} already exists here, not "
                                    "as the one adopted (other keys or role, or retired)")
        self._remember(held.name, held)
        return held

    def set_role(self, name: str, role: str, primary: str, epoch: int) -> Account:
        """Make this stamp `name`'s `role` ("primary" or "secondary") with primary stamp
        `primary` at placement `epoch` (a failover or a migration), by compare-and-set.
        Idempotent: the same (role, primary, epoch) again returns the account unchanged.
        PreconditionFailed for an epoch lower than the stored one (an older placement must
        not undo a newer), or for the stored epoch with another role or primary (one epoch
        has one placement); NotFound for no account."""
        names.check_account(name)
        geo = GeoRole(role, primary, epoch)
        for _ in range(CAS_ATTEMPTS_MAX):
            current, version = self._read(name)
            if current.geo == geo:
                return current
            if epoch <= current.geo.epoch:
                raise PreconditionFailed(
                    f"account {name!r} is {current.geo.role} at epoch {current.geo.epoch} "
                    f"here (primary {current.geo.primary or 'none'}); role {role} at epoch "
                    f"{epoch} is not newer")
            changed = Account(name, current.keys, current.created_s, geo)
            if self._kv.compare_and_set(KEY_PREFIX + name, version, changed.encode()):
                self._remember(name, changed)
                return changed
        raise PreconditionFailed(f"account {name!r} kept changing; role not set after "
                                 f"{CAS_ATTEMPTS_MAX} attempts")

    def get(self, name: str) -> Account:
        """The account as stored now (not cached); NotFound if there is none."""
        return self._read(names.check_account(name))[0]

    def rotate(self, name: str, key_number: int) -> Account:
        """Replace key `key_number` (1 or 2) with a fresh one; the other key stays valid, so
        clients move to it first and lose no request (Azure's rotation)."""
        if key_number not in (1, 2):
            raise InvalidArgument(f"key number {key_number} is not 1 or 2")
        names.check_account(name)
        for _ in range(CAS_ATTEMPTS_MAX):
            current, version = self._read(name)
            keys = list(current.keys)
            keys[key_number - 1] = new_key()
            rotated = Account(name, (keys[0], keys[1]), current.created_s, current.geo)
            if self._kv.compare_and_set(KEY_PREFIX + name, version, rotated.encode()):
                self._remember(name, rotated)
                return rotated
        raise PreconditionFailed(f"account {name!r} kept changing; rotation not done after "
                                 f"{CAS_ATTEMPTS_MAX} attempts")

    def list(self) -> list[str]:
        """The live accounts' names (tombstones left out: one read per name)."""
        found = (self._entry(key[len(KEY_PREFIX):]) for key in self._kv.list(KEY_PREFIX))
        return sorted(entry.name for entry, _ in filter(None, found)
                      if isinstance(entry, Account))

    def delete(self, name: str) -> Tombstone:
        """Replace the account by its tombstone (purge pending) and return it; NotFound if
        there never was one. Its keys stop working at once here and within the cache TTL
        elsewhere. Deleting a deleted account returns its tombstone unchanged: the caller
        resumes or repeats its purge (idempotent)."""
        names.check_account(name)
        for _ in range(CAS_ATTEMPTS_MAX):
            found = self._entry(name)
            if found is None:
                raise NotFound(f"no account {name!r}")
            entry, version = found
            if isinstance(entry, Tombstone):
                return entry
            tombstone = Tombstone(name, self._clock.wall())
            if self._kv.compare_and_set(KEY_PREFIX + name, version, tombstone.encode()):
                self._remember(name, None)
                return tombstone
        raise PreconditionFailed(f"account {name!r} kept changing; not deleted after "
                                 f"{CAS_ATTEMPTS_MAX} attempts")

    def release(self, name: str, epoch: int) -> bool:
        """Stop holding geo account `name`, which a migration moved off this stamp (issue 30):
        held here as a secondary at an epoch up to `epoch`, the placement's that no longer
        names this stamp. Its record goes, not retired: the account lives on at its stamps
        and may come back. Whether there was one to remove (idempotent); PreconditionFailed
        if it is primary here, or held at a later epoch (a newer placement has it here)."""
        names.check_account(name)
        for _ in range(CAS_ATTEMPTS_MAX):
            found = self._entry(name)
            if found is None:
                return False
            entry, version = found
            if not isinstance(entry, Account) or entry.geo.role != SECONDARY \
                    or entry.geo.epoch > epoch:
                raise PreconditionFailed(f"account {name!r} is not an old secondary here: "
                                         "not released")
            if self._kv.delete(KEY_PREFIX + name, expected_version=version):
                self._remember(name, None)
                return True
        raise PreconditionFailed(f"account {name!r} kept changing; not released after "
                                 f"{CAS_ATTEMPTS_MAX} attempts")

    def tombstone(self, name: str) -> Tombstone:
        """The tombstone of deleted account `name`; NotFound if it is not a deleted one."""
        found = self._entry(names.check_account(name))
        if found is None or not isinstance(found[0], Tombstone):
            raise NotFound(f"no deleted account {name!r}")
        return found[0]

    def mark_purged(self, name: str) -> Tombstone:
        """Record on deleted account `name`'s tombstone that its data was purged now (the
        purge's last step: until then a purge is pending). NotFound if it is not a deleted
        one."""
        names.check_account(name)
        for _ in range(CAS_ATTEMPTS_MAX):
            found = self._entry(name)
            if found is None or not isinstance(found[0], Tombstone):
                raise NotFound(f"no deleted account {name!r}")
            purged = Tombstone(name, found[0].deleted_s, self._clock.wall())
            if self._kv.compare_and_set(KEY_PREFIX + name, found[1], purged.encode()):
                return purged
        raise PreconditionFailed(f"deleted account {name!r} kept changing; purge not "
                                 f"recorded after {CAS_ATTEMPTS_MAX} attempts")

    # --- the cached path of request verification ---------------------------------------------

    def keys_of(self, name: str) -> Sequence[bytes] | None:
        """The account's current keys, or None if it does not exist, as read at most
        `cache_ttl_s` ago (frontend/signing.verify's and sas.check's `keys_of`)."""
        account = self.lookup(name)
        return account.keys if account is not None else None

    def lookup(self, name: str) -> Account | None:
        """The account — keys and role, one read — or None if it does not exist, as read
        at most `cache_ttl_s` ago (frontend/auth.py's reader)."""
        cached = self._cache.get(name)
        if cached is not None and self._clock.monotonic() < cached[0]:
            return cached[1]
        try:
            names.check_account(name)
            account: Account | None = self._read(name)[0]
        except (NotFound, InvalidArgument):
            account = None
        self._remember(name, account)
        return account

    def _read(self, name: str) -> tuple[Account, int]:
        """The live account and its version; NotFound for none and for a deleted one."""
        found = self._entry(name)
        if found is None:
            raise NotFound(f"no account {name!r}")
        entry, version = found
        if isinstance(entry, Tombstone):
            raise NotFound(f"account {name!r} was deleted")
        return entry, version

    def _entry(self, name: str) -> tuple[Account | Tombstone, int] | None:
        found = self._kv.get(KEY_PREFIX + name)
        if found is None:
            return None
        data, version = found
        return decode_entry(data), version

    def _remember(self, name: str, account: Account | None) -> None:
        """Cache `account` (None: there is none, which is not cached but drops what was)."""
        if account is None or self._ttl_s <= 0:
            self._cache.pop(name, None)
            return
        if len(self._cache) >= CACHE_ENTRIES_MAX:
            now = self._clock.monotonic()
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            if len(self._cache) >= CACHE_ENTRIES_MAX:
                self._cache.clear()  # a flood of distinct names: start over, stay bounded
        self._cache[name] = (self._clock.monotonic() + self._ttl_s, account)


class HeldRoles:
    """Accounts' roles as this stamp's records hold them, read through (no cache), for its
    partition servers' shippers (partition_layer/geo_link.Roles): what decides whether an
    unplanned failover deposed this stamp, and makes it the secondary then."""

    def __init__(self, kv: KeyValue, clock: Clock | None = None) -> None:
        self._store = AccountStore(kv, clock or SystemClock(), cache_ttl_s=0)

    def held(self, account: str) -> tuple[str, int]:
        geo = self._store.get(account).geo
        return geo.role, geo.epoch

    def demote(self, account: str, primary: str, epoch: int) -> None:
        self._store.set_role(account, SECONDARY, primary, epoch)
