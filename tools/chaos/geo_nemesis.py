"""The geo nemesis (`stamp chaos --geo`, issue 30): plays a geo schedule
(tools/chaos/geo_schedule.py) on a location of two stamps (tools/local_location.py) and
records every failover it made (the checker's geo rules need them: tools/chaos/geo_check.py).

It is the one-stamp Nemesis (tools/chaos/nemesis.py: a thread, the schedule's pace, one
fault at a time, each recorded and undone before the next, `stop()` cutting a hold short)
with a location's faults instead of a stamp's. Its contract on top of that one:
- a stamp is brought back by `LocalLocation.up`, as `stamp location up` does (it starts
  whatever is not running, then registers the stamp's front ends with the location), tried
  again until RESTART_TIMEOUT_S (a port may be slow to free);
- between faults, a process of the location (its service's or either stamp's) that died
  unasked is recorded (`crashes`) and started again;
- processes are handled by PID, through the records the location keeps, never by name;
- the link cut is an isolation (common/isolation.py) of every partition server of each
  stamp from the other stamp's front ends: shipping and its answers stop both ways, while
  SDK clients still reach both stamps;
- an unplanned failover is the `stamp location failover NAME --yes` path, programmatic:
  the risk read from the location (its last sync time) just before it acts, and nothing
  asked. Between the SIGKILL and the failover (nothing ships any more) the secondary's rows
  are read (`survey`): what the new primary holds when it takes over. Once the old primary
  is back, has made itself the secondary and set aside what it had not shipped
  (`until_set_aside`), it is bootstrapped (`stamp location bootstrap`) into a live
  secondary, as an operator would.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Mapping

from common import rpc
from common.errors import StampError
from frontend.accounts import SECONDARY
from location.placement import AccountPlacement
from tools.chaos.geo_check import Failover
from tools.chaos.geo_schedule import UNPLANNED_CUT_S
from tools.chaos.nemesis import RESTART_PAUSE_S, RESTART_TIMEOUT_S, FaultRecord, Nemesis
from tools.chaos.schedule import Fault
from tools.chaos.stamp_faults import Skipped
from tools.geo_account import (
    accounts_at,
    planned_failover,
    shipping_of,
    stamps_of,
    unplanned_failover,
    unplanned_risk,
)
from tools.geo_bootstrap import bootstrap
from tools.local_location import LocalLocation
from tools.local_stamp import LocalStamp
from tools.lossyfs.mount import LossyMount, power_cut

log = logging.getLogger(__name__)

SET_ASIDE_TIMEOUT_S = 60.0  # a deposed primary back is the secondary, its tail aside
POLL_S = 0.2
SERVICE = "service"  # the location service's part, in process names ("service/lock-1")


class GeoNemesis(Nemesis):
    def __init__(self, location: LocalLocation, faults: list[Fault], account: str,
                 started: float, wall_at_start: float, power: tuple[str, LossyMount] | None,
                 on_change: Callable[[FaultRecord], None],
                 survey: Callable[[], Mapping[tuple[str, int], str | None] | None]) -> None:
        """`started`: time 0 of the run (time.monotonic), the wall clock's `wall_at_start`
        (the location reports last sync times on it); `power`: the stamp on a lossy file
        system and its mount (None: no power cut); `survey`: what the account's secondary
        holds of each row, read there (None if it cannot be read), which an unplanned
        failover asks between the SIGKILL and the failover (Failover.held)."""
        # No one stamp: every fault acts on the location (the one-stamp kinds, which use
        # the base's stamp, are never dealt here).
        super().__init__(None, faults, account, started,  # type: ignore[arg-type]
                         power[1] if power else None, on_change)
        self.location = location
        self.wall_at_start = wall_at_start
        self.power_site = power[0] if power else None
        self.failovers: list[Failover] = []
        self._survey = survey

    def placement(self) -> AccountPlacement:
        with self.location.store_client() as store:
            return store.resolve(self.account)[0]

    # ---- faults ------------------------------------------------------------------------------

    def _cut_link(self, fault: Fault) -> str:
        stamps = stamps_of(self.location)
        cut = 0
        try:
            cut = cut_link(stamps)
            self._hold(fault.hold_s)
        finally:
            heal_link(stamps)
        return f"{cut} partition servers cut off from the other stamp's front ends, healed"

    def _kill_secondary(self, fault: Fault) -> str:
        name = self.placement().secondary
        stamp = stamps_of(self.location)[name]
        killed = len(stamp.pids())
        stamp.kill_all()
        self._hold(fault.hold_s)
        took = self._bring_back()
        return f"{name}: its {killed} processes SIGKILLed, started again in {took:.1f}s"

    def _power_cut(self, fault: Fault) -> str:
        if self.mount is None or self.power_site is None:
            raise Skipped("no stamp of the location is on a lossy file system")
        placement = self.placement()
        role = "primary" if placement.primary == self.power_site else "secondary"
        stamp = stamps_of(self.location)[self.power_site]
        report = power_cut(stamp.pids(), self.mount)
        took = self._bring_back()
        return (f"{self.power_site} (the {role}): dropped {report.get('bytes_dropped')} "
                f"unsynced bytes and {report.get('entries_dropped')} directory entries; "
                f"started again in {took:.1f}s")

    def _planned_failover(self, fault: Fault) -> str:
        begun = self.now()
        report = planned_failover(self.location, self.account)
        self.failovers.append(Failover(
            "planned", round(begun, 3), round(self.now(), 3), report.old_primary,
            report.new_primary, report.epoch,
            detail=f"front-end caches {report.fenced_wait_s:.1f}s, drain {report.drain_s:.1f}s"))
        return (f"{report.old_primary} -> {report.new_primary} at epoch {report.epoch} in "
                f"{report.total_s:.1f}s (front-end caches {report.fenced_wait_s:.1f}s, drain "
                f"{report.drain_s:.1f}s)")

    def _unplanned_failover(self, fault: Fault) -> str:
        placement = self.placement()
        old, new = placement.primary, placement.secondary
        stamps = stamps_of(self.location)
        try:
            cut_link(stamps)  # writes acknowledged from now on do not reach the secondary
            self._hold(UNPLANNED_CUT_S)
            killed = self.now()
            stamps[old].kill_all()
        finally:
            heal_link(stamps)  # the secondary's side: the primary's processes are gone
        try:
            held = self._survey()  # nothing ships any more: what the new primary will hold
            risk = unplanned_risk(self.location, self.account)
            report = unplanned_failover(self.location, self.account, risk)
            synced = risk.synced_s - self.wall_at_start if risk.synced_s else None
            self.failovers.append(Failover(
                "unplanned", round(killed, 3), round(self.now(), 3), old, new, report.epoch,
                None if synced is None else round(synced, 3), report.fenced, held))
            self._hold(fault.hold_s)
        finally:
            took = self._bring_back()
        until_set_aside(self.location, self.account, old)
        boot = bootstrap(self.location, self.account)
        at_risk = "unknown" if synced is None else f"{killed - synced:.1f}s"
        return (f"{old} SIGKILLed {UNPLANNED_CUT_S:g}s into a cut link; {new} primary at "
                f"epoch {report.epoch} ({at_risk} of writes at risk, {report.fenced}); {old} "
                f"back in {took:.1f}s, its tail set aside, bootstrapped in "
                f"{boot.seconds:.1f}s ({boot.rows:,} rows copied)")

    # ---- bringing stamps back --------------------------------------------------------------

    def _bring_back(self) -> float:
        """`LocalLocation.up` until it succeeds (RESTART_TIMEOUT_S at most); its seconds."""
        begun = time.monotonic()
        while True:
            try:
                self.location.up()
                return time.monotonic() - begun
            except StampError as exc:
                if time.monotonic() - begun > RESTART_TIMEOUT_S:
                    raise
                log.warning("bringing the location back failed (%s): again", exc)
                time.sleep(RESTART_PAUSE_S)

    def _restart_crashed(self) -> None:
        dead = [f"{part}/{name}" for part, stamp in parts(self.location)
                for name in stamp.forget_dead()]
        for name in dead:
            self.crashes.append((round(self.now(), 2), name))
            log.warning("%s died on its own: starting it again", name)
        if dead:
            try:
                self._bring_back()
            except StampError as exc:
                log.warning("the location could not be brought back: %s", exc)


def until_set_aside(location: LocalLocation, account: str, deposed: str,
                    timeout_s: float = SET_ASIDE_TIMEOUT_S) -> None:
    """Until stamp `deposed`, back after an unplanned failover, holds `account` as the
    secondary (it learns it was deposed from the location when it next ships, geo_link) and
    its shippers have nothing left of it: what they had not shipped is set aside (its
    tail). RuntimeError, saying where it stands, after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        stamp = stamps_of(location)[deposed]
        try:
            role = held_at(stamp, account)[0]
            shipping = asyncio.run(shipping_of(stamp, account))
            last = (role, shipping)
            if role == SECONDARY and shipping is not None and shipping.lag_ops == 0:
                return
        except StampError as exc:  # its lock service is still electing: asked again
            last = exc
        time.sleep(POLL_S)
    raise RuntimeError(f"{deposed}, deposed and back, has not made itself {account}'s "
                       f"secondary and set its unshipped writes aside within "
                       f"{timeout_s:.0f}s (role, shipping: {last})")


def parts(location: LocalLocation) -> Iterator[tuple[str, LocalStamp]]:
    """The location's service and stamps, each with its name, as recorded now."""
    yield SERVICE, location.service()
    for site, stamp in location.stamps():
        yield site.name, stamp


def held_at(stamp: LocalStamp, account: str) -> tuple[str, str]:
    """(role, primary) of `account` as `stamp` holds it."""
    with accounts_at(stamp) as accounts:
        geo = accounts.get(account).geo
    return geo.role, geo.primary


def cut_link(stamps: Mapping[str, LocalStamp]) -> int:
    """Cut every partition server of each stamp off from the other stamps' front ends (module
    docstring); how many were cut."""
    cut = 0
    for name, stamp in stamps.items():
        fronts = [r.address for other, s in stamps.items() if other != name
                  for r in s.front_ends()]
        for server in stamp.partition_servers():
            rpc.isolate_remote(server.address, fronts)
            cut += 1
    return cut


def heal_link(stamps: Mapping[str, LocalStamp]) -> None:
    """Lift every cut of `cut_link` (a server that is gone took its cut with it)."""
    for stamp in stamps.values():
        for server in stamp.partition_servers():
            if stamp.alive(server.name):
                try:
                    rpc.heal_remote(server.address)
                except StampError as exc:
                    log.warning("healing %s failed: %s", server.name, exc)
