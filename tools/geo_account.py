"""An account's geo-replication, operated on a location of this machine (issue 30;
tools/local_location.py): where it stands (`status`) and a planned failover (`planned_failover`).

Status: the placement (primary, secondary, the secondary's state, epoch) and, from the
primary stamp's partition servers, the partitions that hold the account's keys and ship:
the operations not yet on the secondary and the last sync time (every write acknowledged
before it is on the secondary: the oldest of those partitions').

A planned failover swaps the roles with nothing acknowledged lost:
0. first, with writes still taken, it waits (at most CATCH_UP_S) until the secondary is
   less than CAUGHT_UP_LAG_S behind: the writers' pause below then holds no backlog's drain
   (a 32x100 burst's had held them 9.3 s);
1. the primary is told it is now the secondary of the other stamp at the next epoch: its
   front ends refuse the account's writes with Moved (within their account cache's TTL,
   which the failover then waits out: from then on no write is taken there);
2. the primary's shippers drain: its last sync time passes that moment, so every write it
   acknowledged is on the secondary (else, after `drain_timeout_s`, the old roles are put
   back at the epoch after: the failover did not happen, and it says so);
3. the secondary is told it is the primary at that epoch (it takes writes; the old
   primary's shippers are refused there from now on: frontend/geo_door.py);
4. the location names the new primary and secondary (the placement's epoch moves to the same
   one): clients that were told Moved ask again and go on there. The new primary ships to
   the old one, now its secondary, from then on.
Writers through the SDK see a pause (Moved, asked again, retried within their call's time),
not an error: about the two front ends' cache TTLs plus the drain.

An unplanned failover (`unplanned_failover`: the primary stamp is gone) makes the secondary
the primary at once. What that puts at risk (`unplanned_risk`, said before it acts): the
writes the primary acknowledged after the account's last sync time as it last reported it
to the location (location/sync_report.py; 0, unknown, if it never did). Then:
1. the old primary is told it is the secondary at the next epoch, if it answers within
   FENCE_TIMEOUT_S (an operator may fail over from a stamp that is only partly gone: it must
   not go on taking writes); a stamp that is gone is told when it comes back (geo_shipper);
2. the secondary is told it is the primary at that epoch;
3. the location names it, the old primary its secondary, "unavailable" (until a bootstrap
   copies the account to it anew: its own copy may hold writes the new primary never saw).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import rpc
from common.clock import SystemClock
from common.errors import PreconditionFailed, StampError, Unavailable
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from frontend.accounts import PRIMARY, SECONDARY, AccountStore
from location.placement import AccountPlacement
from lock_service.client import LockClient
from partition_layer import keys
from tools.local_location import LocalLocation
from tools.local_stamp import LocalStamp
from tools.progress import SILENT, Progress

DRAIN_TIMEOUT_S = 60.0
FENCE_TIMEOUT_S = 2.0
CATCH_UP_S = 60.0
CAUGHT_UP_LAG_S = 0.5
POLL_S = 0.1
STATUS_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Shipping:
    """What the primary stamp's shippers say of an account's partitions."""

    partitions: int  # partitions holding its keys that ship
    lag_ops: int
    synced_s: float  # the oldest last sync time among them


@dataclass(frozen=True)
class GeoStatus:
    placement: AccountPlacement
    shipping: Shipping | None  # None: no partition of the primary ships it (yet)
    error: str = ""  # why the primary's figures could not be read
    reported_synced_s: float = 0.0  # the last sync time the location has (0: none)

    def lines(self, now_s: float) -> list[str]:
        p = self.placement
        out = [f"account {p.account}: primary {p.primary}, secondary {p.secondary} "
               f"({p.secondary_state}), epoch {p.epoch}"]
        if p.secondary_state == "unavailable":
            out.append(f"replication: none ({p.secondary} is unavailable: its copy is behind "
                       "or diverged, and nothing ships to it until a bootstrap)")
        elif self.error:
            out.append(f"replication: unknown ({self.error})")
            if self.reported_synced_s:
                out.append(f"the location's last report: last sync "
                           f"{_clock(self.reported_synced_s)} "
                           f"(lag {max(0.0, now_s - self.reported_synced_s):.1f} s)")
        elif self.shipping is None:
            out.append("replication: not shipping yet (its partitions start within 5 s)")
        else:
            s = self.shipping
            synced = ("unknown (not caught up since its shipping started)" if not s.synced_s
                      else f"{_clock(s.synced_s)} (lag {max(0.0, now_s - s.synced_s):.1f} s)")
            out.append(f"replication: {s.partitions} partitions, {s.lag_ops} operations not "
                       f"yet on {p.secondary}, last sync {synced}")
        return out


@dataclass(frozen=True)
class FailoverReport:
    old_primary: str
    new_primary: str
    epoch: int
    fenced_wait_s: float  # waiting out the old primary's front-end caches
    drain_s: float  # then, until its last sync time passed the fence
    total_s: float


def stamps_of(location: LocalLocation) -> dict[str, LocalStamp]:
    return {site.name: stamp for site, stamp in location.stamps()}


@contextlib.contextmanager
def accounts_at(stamp: LocalStamp, **client: Any) -> Iterator[AccountStore]:
    """The account store of a local stamp (no cache), its lock client (LockClient's keyword
    arguments `client`) closed afterwards."""
    with LockClient.from_stamp(stamp.data_dir, holder="location-cli", **client) as locks:
        yield AccountStore(locks, SystemClock(), cache_ttl_s=0)


def status(location: LocalLocation, account: str) -> GeoStatus:
    with location.store_client() as store:
        placement, _ = store.resolve(account)
    stamp = stamps_of(location)[placement.primary]
    try:
        shipping = asyncio.run(shipping_of(stamp, account))
    except StampError as exc:  # the primary is gone: what the location knows
        return GeoStatus(placement, None, str(exc),
                         unplanned_risk(location, account).synced_s)
    return GeoStatus(placement, shipping)


async def shipping_of(stamp: LocalStamp, account: str) -> Shipping | None:
    """The shipping figures of the partitions of `stamp` that hold `account`'s keys."""
    return shipping_in([load for _, load in await server_loads(stamp)], account)


async def server_loads(stamp: LocalStamp, skip_down: bool = False
                       ) -> list[tuple[str, pb.ServerLoad]]:
    """Each partition server's Status (address, load), one after the other; a server that
    does not answer raises its error, or with `skip_down` is left out."""
    loads = []
    for record in stamp.partition_servers():
        try:
            async with rpc.aio_channel(record.address, 16 << 20) as channel:
                loads.append((record.address, await rpc.call(
                    pb_grpc.PartitionServerStub(channel).Status(
                        pb.ServerStatusRequest(), timeout=STATUS_TIMEOUT_S))))
        except StampError:
            if not skip_down:
                raise
    return loads


def shipping_in(loads: Iterable[pb.ServerLoad], account: str) -> Shipping | None:
    """The shipping figures of the partitions in `loads` (partition servers' Status) that
    hold `account`'s keys; None unless every one of them ships (one that does not yet has
    figures of nothing: a drain or a status taken over the others would leave its writes
    out)."""
    low = keys.account_prefix(account)
    high = keys.prefix_end(low)
    found = [p for load in loads for p in load.partitions if overlaps(p.range, low, high)]
    if not found or not all(p.geo for p in found):
        return None
    return Shipping(len(found), sum(p.geo_lag_ops for p in found),
                    min(p.geo_synced_s for p in found))


def overlaps(key_range: pb.KeyRange, low: bytes, high: bytes | None) -> bool:
    """Whether a partition's range holds keys of [low, high)."""
    below_high = high is None or key_range.low < high
    above_low = not key_range.has_high or key_range.high > low
    return below_high and above_low


def planned_failover(location: LocalLocation, account: str, progress: Progress = SILENT,
                     drain_timeout_s: float = DRAIN_TIMEOUT_S) -> FailoverReport:
    """Swap the account's roles with nothing acknowledged lost (module docstring)."""
    with location.store_client() as store:
        placement, version = store.resolve(account)
    check_failover_target(placement)
    old, new = placement.primary, placement.secondary
    epoch = placement.epoch + 1
    stamps = stamps_of(location)
    ttl_s = stamps[old].config.front_end.account_cache_ttl_ms / 1000
    progress.phase(f"waiting until {new} is less than {CAUGHT_UP_LAG_S:g} s behind {old}")
    with contextlib.suppress(Unavailable):  # still behind: the drain below waits for it
        drain(stamps[old], account, time.time() - CAUGHT_UP_LAG_S, CATCH_UP_S)
    started = time.monotonic()  # the failover proper: from here writers may pause
    progress.phase(f"{old} stops taking {account}'s writes (epoch {epoch})")
    with accounts_at(stamps[old]) as at_old:
        at_old.set_role(account, SECONDARY, new, epoch)
    fenced_s = time.time() + ttl_s
    progress.phase(f"waiting {ttl_s:.1f} s for {old}'s front ends to see it")
    time.sleep(ttl_s)
    fenced_wait_s = time.monotonic() - started
    progress.phase(f"waiting until every write {old} took is on {new}")
    try:
        drain(stamps[old], account, fenced_s, drain_timeout_s)
    except Unavailable:
        with accounts_at(stamps[old]) as at_old:
            at_old.set_role(account, PRIMARY, old, epoch + 1)
        raise
    drain_s = time.monotonic() - started - fenced_wait_s
    progress.phase(f"{new} takes {account}'s writes; the location names it")
    with accounts_at(stamps[new]) as at_new:
        at_new.set_role(account, PRIMARY, new, epoch)
    with location.store_client() as store:
        moved = store.replace(placement, version, primary=new, secondary=old)
    assert moved.epoch == epoch, (moved, epoch)
    return FailoverReport(old, new, epoch, fenced_wait_s, drain_s,
                          time.monotonic() - started)


def check_failover_target(placement: AccountPlacement) -> None:
    """PreconditionFailed unless the secondary is live: one that is not holds a copy behind
    or diverged (an old primary's after an unplanned failover), which must not become the
    account's primary (location/placement.py)."""
    if placement.secondary_state != "live":
        raise PreconditionFailed(
            f"account {placement.account}'s secondary {placement.secondary} is "
            f"{placement.secondary_state}, not live: its copy is not the account's, so no "
            "failover goes to it ('stamp location bootstrap' makes it live again)")


def drain(stamp: LocalStamp, account: str, fenced_s: float, timeout_s: float) -> None:
    """Until the account's last sync time at `stamp` passed `fenced_s`; Unavailable after
    `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = asyncio.run(shipping_of(stamp, account))
        except StampError as exc:
            last = exc
        if isinstance(last, Shipping) and last.synced_s >= fenced_s:
            return
        time.sleep(POLL_S)
    raise Unavailable(f"{stamp.data_dir.name} did not ship {account}'s writes within "
                      f"{timeout_s:.0f} s ({last}); the failover did not happen: it stays the "
                      "primary")


@dataclass(frozen=True)
class Risk:
    """What an unplanned failover of an account puts at risk (module docstring)."""

    placement: AccountPlacement
    synced_s: float  # the account's last sync time as the primary last reported it; 0: unknown
    reported_s: float  # when it last reported (0: never)

    def lines(self, now_s: float) -> list[str]:
        p = self.placement
        if not self.synced_s:
            return [f"{p.primary} never said which of {p.account}'s writes are on {p.secondary}:"
                    f" any write it acknowledged may be lost"]
        return [f"writes {p.primary} acknowledged after {_clock(self.synced_s)} may be lost: "
                f"{max(0.0, now_s - self.synced_s):.1f} s of writes at risk (its last report "
                f"was at {_clock(self.reported_s)})"]


@dataclass(frozen=True)
class UnplannedReport:
    old_primary: str
    new_primary: str
    epoch: int
    risk: Risk
    fenced: str  # whether the old primary was told: "fenced" or why not
    total_s: float


def _clock(wall_s: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(wall_s)) + f".{int(wall_s * 10) % 10}"


def unplanned_risk(location: LocalLocation, account: str) -> Risk:
    """What failing `account` over now would put at risk (from the location alone: the
    primary stamp need not answer)."""
    from location.sync_report import account_synced_ms

    with location.store_client() as store:
        placement, _ = store.resolve(account)
        report = store.sync_report(placement.primary)
    if report is None:
        return Risk(placement, 0.0, 0.0)
    return Risk(placement, account_synced_ms(report.ranges, account) / 1000,
                report.timestamp_ms / 1000)


def unplanned_failover(location: LocalLocation, account: str, risk: Risk,
                       progress: Progress = SILENT) -> UnplannedReport:
    """Make the secondary the primary at once (module docstring), `risk` (unplanned_risk)
    accepted; PreconditionFailed, nothing changed, if the placement moved since."""
    started = time.monotonic()
    with location.store_client() as store:
        placement, version = store.resolve(account)
    if placement != risk.placement:
        raise PreconditionFailed(f"account {account}'s placement changed meanwhile: ask again")
    check_failover_target(placement)
    old, new, epoch = placement.primary, placement.secondary, placement.epoch + 1
    stamps = stamps_of(location)
    progress.phase(f"telling {old} it no longer takes {account}'s writes (if it answers)")
    fenced = _fence(stamps[old], account, new, epoch)
    progress.phase(f"{new} takes {account}'s writes (epoch {epoch}); the location names it")
    with accounts_at(stamps[new]) as at_new:
        at_new.set_role(account, PRIMARY, new, epoch)
    with location.store_client() as store:
        moved = store.replace(placement, version, primary=new, secondary=old,
                              secondary_state="unavailable")
    assert moved.epoch == epoch, (moved, epoch)
    return UnplannedReport(old, new, epoch, risk, fenced, time.monotonic() - started)


def _fence(stamp: LocalStamp, account: str, new: str, epoch: int) -> str:
    """Tell `stamp` it is `account`'s secondary at `epoch`, within FENCE_TIMEOUT_S: "fenced",
    or why not (a stamp that is gone does not answer)."""
    outcome: list[str] = []

    def fence() -> None:
        try:
            with accounts_at(stamp, call_timeout_s=FENCE_TIMEOUT_S / 2) as at_old:
                at_old.set_role(account, SECONDARY, new, epoch)
            outcome.append("fenced")
        except StampError as exc:
            outcome.append(f"not reached ({type(exc).__name__})")

    worker = threading.Thread(target=fence, name="fence", daemon=True)
    worker.start()
    worker.join(FENCE_TIMEOUT_S)
    return outcome[0] if outcome else f"not reached within {FENCE_TIMEOUT_S:.0f} s"


@dataclass(frozen=True)
class Tail:
    """What one stamp set aside of an account (partition_layer/geo_tail.py)."""

    stamp: str
    path: Path
    lines: list[dict[str, Any]]

    def summary(self) -> str:
        names = sorted({str(line["pname"]) for line in self.lines})
        rows = sum(int(line["rows"]) for line in self.lines)
        first = self.lines[0]
        return (f"{self.stamp}: {rows} rows of {len(names)} names set aside "
                f"({', '.join(names[:8])}{', ...' if len(names) > 8 else ''}), deposed by "
                f"{first['primary']} at epoch {first['epoch']}, from "
                f"{_clock(float(first['at_s']))}; {self.path}")


def tails(location: LocalLocation, account: str) -> list[Tail]:
    """The account's operations each stamp of the location set aside when an unplanned
    failover deposed it (none: nothing was lost there)."""
    from partition_layer.geo_tail import read_tail, tail_path

    found = []
    for site, stamp in location.stamps():
        for record in stamp.partition_servers():
            lines = read_tail(Path(record.dir), account)
            if lines:
                found.append(Tail(site.name, tail_path(Path(record.dir), account), lines))
    return found
