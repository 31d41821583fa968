"""The location service's state (issue 30): its stamps and where each account lives, kept in
a lock-service group of its own (lock_service/: Raft-replicated, linearizable KV with
compare-and-set), as `stamps/<name>` and `accounts/<name>` (JSON: location/placement.py).

Contracts:
- A stamp is registered (or its endpoints, capacity and use updated) by a plain write of its
  record: the stamp is the only writer of its own record.
- An account is created at most once: its record is written with compare-and-set on "absent",
  so two concurrent creates of one name leave one placement and the other gets AlreadyExists.
- Changing an account's placement (failover, migration: later steps of issue 30) is a
  compare-and-set on the version read; moving a role bumps its epoch.
- Placement counts the accounts each stamp is primary for from one listing of `accounts/`
  (at most lock_service.limits.LIST_KEYS_MAX of them are counted: a larger location needs
  counts kept per stamp, which the stamps' reports of their use will give).
- A stamp's latest sync report (location/sync_report.py) is `sync/<name>`, replaced by each
  new one (plain writes: only that stamp's partition manager, through a location server,
  writes it)."""

from __future__ import annotations

import dataclasses
from collections import Counter

from common.errors import AlreadyExists, NotFound, PreconditionFailed
from common.proto import location_internal_pb2 as internal_pb
from frontend.names import check_account
from location.placement import (
    AccountPlacement,
    StampInfo,
    check_stamp_name,
    choose_stamps,
)
from lock_service.client import LockClient

STAMP_PREFIX = "stamps/"
ACCOUNT_PREFIX = "accounts/"
SYNC_PREFIX = "sync/"


class LocationStore:
    def __init__(self, locks: LockClient) -> None:
        self.locks = locks

    # ---- stamps -----------------------------------------------------------------------------

    def register_stamp(self, stamp: StampInfo) -> None:
        self.locks.put(STAMP_PREFIX + stamp.name, stamp.to_json())

    def stamps(self) -> dict[str, StampInfo]:
        return {key[len(STAMP_PREFIX):]: StampInfo.from_json(value)
                for key, (value, _) in self.locks.list_values(STAMP_PREFIX).items()}

    def stamp(self, name: str) -> StampInfo:
        found = self.locks.get(STAMP_PREFIX + check_stamp_name(name))
        if found is None:
            raise NotFound(f"no stamp {name} in this location")
        return StampInfo.from_json(found[0])

    # ---- accounts ---------------------------------------------------------------------------

    def create_account(self, account: str) -> AccountPlacement:
        """Place a new account: primary by load, secondary in another region (placement.py).
        AlreadyExists if the name is placed already."""
        check_account(account)
        if self.locks.get(ACCOUNT_PREFIX + account) is not None:
            raise AlreadyExists(f"account {account} exists in this location")
        primary, secondary = choose_stamps(self.stamps().values(), self.primaries())
        # A new account has no data to copy first: its secondary is live from the start.
        placement = AccountPlacement(account, primary.name, secondary.name, "live")
        if self.locks.compare_and_set(ACCOUNT_PREFIX + account, 0, placement.to_json()) is None:
            raise AlreadyExists(f"account {account} exists in this location")
        return placement

    def resolve(self, account: str) -> tuple[AccountPlacement, int]:
        """The account's placement and the version of its record (for `replace`)."""
        found = self.locks.get(ACCOUNT_PREFIX + check_account(account))
        if found is None:
            raise NotFound(f"no account {account} in this location")
        return AccountPlacement.from_json(found[0]), found[1]

    def replace(self, current: AccountPlacement, version: int, **changes: str
                ) -> AccountPlacement:
        """Write `current` with `changes` (primary, secondary, secondary_state) if the record
        is still at `version`, the epoch one more when a role moves; PreconditionFailed if
        someone changed it meanwhile."""
        new = dataclasses.replace(current, **changes)  # type: ignore[arg-type]
        if (new.primary, new.secondary) != (current.primary, current.secondary):
            new = dataclasses.replace(new, epoch=current.epoch + 1)
        written = self.locks.compare_and_set(ACCOUNT_PREFIX + new.account, version,
                                             new.to_json())
        if written is None:
            raise PreconditionFailed(f"account {new.account}'s placement changed meanwhile")
        return new

    def placements(self) -> list[AccountPlacement]:
        """Every account's placement (at most LIST_KEYS_MAX: module docstring)."""
        return [AccountPlacement.from_json(value)
                for value, _ in self.locks.list_values(ACCOUNT_PREFIX).values()]

    def primaries(self) -> Counter[str]:
        """How many accounts each stamp is primary for."""
        return Counter(placement.primary for placement in self.placements())

    # ---- sync reports -----------------------------------------------------------------------

    def put_sync_report(self, report: internal_pb.SyncReport) -> None:
        self.locks.put(SYNC_PREFIX + check_stamp_name(report.stamp),
                       report.SerializeToString())

    def sync_report(self, stamp: str) -> internal_pb.SyncReport | None:
        """The stamp's latest sync report (None: it never reported)."""
        found = self.locks.get(SYNC_PREFIX + check_stamp_name(stamp))
        return None if found is None else internal_pb.SyncReport.FromString(found[0])
