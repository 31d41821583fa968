"""Migrating an account to another stamp of its location (issue 30, WAS §2): the account's
primary becomes stamp `to`, its secondary a stamp of another region, and a stamp that held
it and is in neither role drops its copy. Built of the bootstrap (tools/geo_bootstrap.py) and
the planned failover (tools/geo_account.py); on a location of this machine.

`migrate` moves the account one step at a time, each decided from its placement as the
location holds it, under the account's operation lock (geo_bootstrap.operation: no other
bootstrap, migration or planned failover of it meanwhile, the location's balancer's
included), so a migration cut short anywhere (a crash, a kill -9, a failed drain) is
finished by running it again:
1. `to` is not yet the primary nor the secondary: `to` becomes the primary's secondary (the
   location names it, at the next epoch, `unavailable`; `to` holds the account as that, with
   the same keys), then a bootstrap copies the account to it and makes it live;
2. `to` is the live secondary: a planned failover makes it the primary (writers see a pause,
   not an error; nothing acknowledged is lost);
3. `to` is the primary, and its secondary is in `to`'s region (the old primary, when it
   shares `to`'s region): the secondary becomes the other stamp that held the account in
   another region (its old secondary), bootstrapped anew;
4. done: every other stamp of the location that still holds the account stops taking
   replicated calls for it, clears its copy (replicated deletes: never shipped, never a
   tail) and releases its record.
Geo-redundancy during it: while `to` is bootstrapped as the secondary (step 1) and while the
final secondary is (step 3), the primary's is the one live copy (the stamp it replaced keeps
a stale one until step 4). Shipping to two stamps at once would keep two live copies
throughout; that is not built.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from common.errors import InvalidArgument, NotFound, PreconditionFailed
from frontend.accounts import SECONDARY
from location.placement import AccountPlacement
from lock_service.client import Lease
from tools.geo_account import accounts_at, planned_failover, stamps_of
from tools.geo_bootstrap import bootstrap_held, clear_account, operation
from tools.local_location import LocalLocation
from tools.progress import SILENT, Progress

STEPS_MAX = 8  # four steps, a few of them again after a concurrent change


@dataclass
class MigrationReport:
    account: str
    old_primary: str
    primary: str = ""
    secondary: str = ""
    steps: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    copied_bytes: int = 0
    failover_s: float = 0.0  # the planned failover's own time (writers pause within it)
    seconds: float = 0.0


def migrate(location: LocalLocation, account: str, to: str, progress: Progress = SILENT
            ) -> MigrationReport:
    """Move `account`'s primary to stamp `to` (module docstring). InvalidArgument for a
    stamp the location does not have, or when no stamp of another region could be the
    secondary; PreconditionFailed when the secondary is not live (a failover that is not
    planned left it so: bootstrap it first)."""
    stamps = stamps_of(location)
    if to not in stamps:
        raise InvalidArgument(f"the location has no stamp {to!r} (it has: "
                              f"{', '.join(sorted(stamps))})")
    with operation(location, account) as lease:
        return _migrate(location, account, to, lease, progress)


def _migrate(location: LocalLocation, account: str, to: str, lease: Lease,
             progress: Progress) -> MigrationReport:
    started = time.monotonic()
    regions = {site.name: site.region for site, _ in location.stamps()}
    placement = _placement(location, account)
    report = MigrationReport(account, placement.primary)
    for _ in range(STEPS_MAX):
        if not lease.valid():
            raise PreconditionFailed(f"the operation lock of {account} was lost: run the "
                                     "migration again")
        placement = _placement(location, account)
        if placement.primary == to and regions[placement.secondary] != regions[to] \
                and placement.secondary_state == "live":
            break
        report.steps.append(_step(location, placement, to, regions, report, lease, progress))
    else:
        raise PreconditionFailed(f"account {account}'s placement kept changing: migration "
                                 "not finished, run it again")
    report.dropped = _drop_others(location, placement, progress)
    report.primary, report.secondary = placement.primary, placement.secondary
    report.seconds = time.monotonic() - started
    return report


def _placement(location: LocalLocation, account: str) -> AccountPlacement:
    with location.store_client() as store:
        return store.resolve(account)[0]


def _step(location: LocalLocation, placement: AccountPlacement, to: str,
          regions: dict[str, str], report: MigrationReport, lease: Lease,
          progress: Progress) -> str:
    """One step of the module docstring's, as the placement says; what it did."""
    account = placement.account
    if placement.primary != to and placement.secondary != to:
        if placement.secondary_state != "live":
            raise PreconditionFailed(f"account {account}'s secondary {placement.secondary} is "
                                     f"{placement.secondary_state}: bootstrap it first "
                                     "('stamp location bootstrap')")
        _make_secondary(location, placement, to, progress)
        return f"{to} is the secondary of {placement.primary}"
    if placement.secondary_state != "live":
        report.copied_bytes += bootstrap_held(location, account, lease, progress).nbytes
        return f"{placement.secondary} bootstrapped"
    if placement.secondary == to:
        report.failover_s = planned_failover(location, account, progress).total_s
        return f"{to} is the primary"
    other = _other_region_holder(location, placement, regions)
    _make_secondary(location, placement, other, progress)
    return f"{other} is the secondary of {to}"


def _make_secondary(location: LocalLocation, placement: AccountPlacement, stamp: str,
                    progress: Progress) -> None:
    """The location names `stamp` the account's secondary, `unavailable` (at the next
    epoch), and `stamp` holds the account as that: the bootstrap that follows copies it."""
    stamps = stamps_of(location)
    progress.phase(f"{stamp} becomes {placement.account}'s secondary")
    with accounts_at(stamps[placement.primary]) as at_primary:
        held = at_primary.get(placement.account)
    with location.store_client() as store:
        current, version = store.resolve(placement.account)
        if current != placement:
            return  # changed meanwhile: the next step looks again
        moved = store.replace(current, version, secondary=stamp,
                              secondary_state="unavailable")
    with accounts_at(stamps[stamp]) as at_stamp:
        try:
            at_stamp.get(placement.account)
        except NotFound:
            at_stamp.adopt(held, primary=moved.primary, epoch=moved.epoch)
        else:  # held there before (an old copy): as the secondary at the new epoch
            at_stamp.set_role(placement.account, SECONDARY, moved.primary, moved.epoch)


def _other_region_holder(location: LocalLocation, placement: AccountPlacement,
                         regions: dict[str, str]) -> str:
    """A stamp of another region than the primary's for the secondary: one that holds the
    account already (the old secondary: its copy is cleared anyway, but it is where the
    account was placed), else the first such stamp."""
    others = [name for name, region in sorted(regions.items())
              if region != regions[placement.primary]]
    if not others:
        raise InvalidArgument(f"no stamp of the location is in a region other than "
                              f"{regions[placement.primary]}: the account needs its "
                              "secondary there")
    stamps = stamps_of(location)
    for name in others:
        with accounts_at(stamps[name]) as at_stamp:
            try:
                at_stamp.get(placement.account)
                return name
            except NotFound:
                continue
    return others[0]


def _drop_others(location: LocalLocation, placement: AccountPlacement, progress: Progress
                 ) -> list[str]:
    """Every stamp holding the account that is neither its primary nor its secondary drops
    it (module docstring, step 4): first it holds it as the secondary of no stamp at the
    placement's epoch, so that no replicated call is taken there any more (a primary's answer
    of the placement may lag by seconds), then, once its front ends saw that, its copy is
    cleared and its record released. Their names."""
    dropped = []
    for site, stamp in location.stamps():
        if site.name in (placement.primary, placement.secondary):
            continue
        with accounts_at(stamp) as at_stamp:
            try:
                at_stamp.set_role(placement.account, SECONDARY, "", placement.epoch)
            except NotFound:
                continue
        progress.phase(f"{site.name} drops its copy of {placement.account}")
        time.sleep(stamp.config.front_end.account_cache_ttl_ms / 1000)
        asyncio.run(clear_account(stamp, placement.account, progress))
        with accounts_at(stamp) as at_stamp:
            at_stamp.release(placement.account, placement.epoch)
        dropped.append(site.name)
    return dropped
