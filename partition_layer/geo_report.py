"""A stamp's sync reports to its location (issue 30; location/sync_report.py): the leading
partition manager tells the location, every REPORT_INTERVAL_S, each partition of its map with
the last sync time its server's latest heartbeat gave, so that the location can say an
account's last sync time even once this stamp is gone (an unplanned failover says how many
seconds of writes it puts at risk from it; SDKs reading the secondary are told it).

Contracts:
- Only the leader reports, and only while its stamp is in a location (`geo/stamp`, read at
  most geo_auth.SETTINGS_TTL_S ago) and it has a map.
- A report is signed with the location's replication secret (geo_auth.sign_report) and sent
  to the location's servers in turn until one takes it (each for at most REPORT_TIMEOUT_S).
- A report the location did not take is not retried: the next one, REPORT_INTERVAL_S later,
  says at least as much. Failures are logged when they start and when they end, not each time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from common.errors import StampError
from common.proto import location_internal_pb2 as internal_pb
from common.proto import partition_pb2 as pb
from location import geo_auth
from location.client import LocationClient
from location.geo_auth import GeoSettings
from location.sync_report import report_ranges
from partition_layer.partition_map import PartitionMap

log = logging.getLogger(__name__)

REPORT_INTERVAL_S = 2.0
REPORT_TIMEOUT_S = 2.0


class Manager(Protocol):
    """What the reporter reads of the partition manager (partition_layer/manager.py)."""

    @property
    def last_map(self) -> PartitionMap | None: ...

    def is_leader(self) -> bool: ...

    def partition_loads(self) -> dict[int, pb.PartitionLoad]: ...


class SyncReporter:
    """The leading manager's sync reports (module contract)."""

    def __init__(self, manager: Manager, settings: Callable[[], Awaitable[GeoSettings | None]],
                 wall: Callable[[], float] = time.time) -> None:
        self._manager = manager
        self._settings = settings
        self._wall = wall
        self._location = LocationClient()
        self._failing = False
        self.sent = 0  # reports the location took

    async def run_forever(self) -> None:
        while True:
            try:
                if await self.report_once():
                    self._failed(None)
            except StampError as exc:
                self._failed(exc)
            await asyncio.sleep(REPORT_INTERVAL_S)

    async def report_once(self) -> bool:
        """Send one report if this manager should (module contract); whether one was taken.
        Raises the last location server's error when none took it."""
        settings = await self._settings()
        current = self._manager.last_map
        if settings is None or current is None or not self._manager.is_leader():
            return False
        report = internal_pb.SyncReport(
            stamp=settings.stamp, timestamp_ms=int(self._wall() * 1000),
            ranges=report_ranges(current, self._manager.partition_loads()))
        report.signature = geo_auth.sign_report(settings.secret, report)
        await self._send(settings.location, report)
        self.sent += 1
        return True

    async def close(self) -> None:
        await self._location.close()

    async def _send(self, servers: tuple[str, ...], report: internal_pb.SyncReport) -> None:
        await self._location.report_sync(servers, report, REPORT_TIMEOUT_S)

    def _failed(self, error: StampError | None) -> None:
        if error is not None and not self._failing:
            log.warning("the location does not take this stamp's sync reports: %s", error)
        elif error is None and self._failing:
            log.info("the location takes this stamp's sync reports again")
        self._failing = error is not None
