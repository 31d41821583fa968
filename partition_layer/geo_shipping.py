"""Inter-stamp replication in a partition server (issue 30): a GeoShipper
(partition_layer/geo_shipper.py) for each partition it serves, while its stamp is in a
location; none on a stand-alone stamp (the commit path then pays nothing for it).

Contracts:
- A partition gets its shipper when it is loaded here (`loaded`), or, for one serving since
  before its stamp joined a location, at the next look (every ATTACH_INTERVAL_S).
- A shipper starts where the partition's metadata says shipping stood (its geo mark, left by
  the previous owner's last checkpoint); without a mark, from the last checkpoint's replay
  point: operations since are read back from the commit log and shipped, later ones are
  handed over as they commit. (What the runs held before, the account had before it was in
  the location: a migration's bootstrap copies that, not the shipper.)
- Never an operation written here before one applied from another stamp (`replicated_lsn`,
  seen by this load's replay): it was written in an earlier tenure as the account's primary,
  and was shipped then (a planned failover drains) or is a deposed primary's tail. Shipped
  again now, with none of the replicated operations after it, it would take the new
  secondary back to an old state (a stamp that was primary, then secondary, then primary
  again, restarted with a mark older than those operations: `stamp chaos --geo` found it).
  Not covered: replicated operations before the load's replay point that the mark is older
  than (the shipper stuck behind them at the last checkpoint).
- It ships for as long as the partition serves here, and stops with it.
- `copy(partition_id, account)` has the partition's shipper copy the account's rows to its
  secondary between two batches (a geo bootstrap: geo_copy.py); NotOwner unless the
  partition serves here, Unavailable while it has no shipper yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from common.errors import NotOwner, Unavailable
from partition_layer.geo_copy import Copier, CopyReport
from partition_layer.geo_link import GeoLink
from partition_layer.geo_shipper import GeoShipper, Position
from partition_layer.partition import SERVING, RangePartition

log = logging.getLogger(__name__)

ATTACH_INTERVAL_S = 5.0


def start_position(partition: RangePartition) -> tuple[Position, float]:
    """Where `partition`'s shipper starts, and the last sync time known then: the mark, or
    past the last operation applied from another stamp if that is later (module contract)."""
    meta = partition.meta
    assert meta is not None
    if meta.geo is not None:
        position, synced_s = Position(meta.geo.lsn, meta.geo.read_from), meta.geo.synced_s
    else:
        position, synced_s = Position(meta.applied_lsn, meta.replay_from), 0.0
    if partition.replicated_lsn > position.lsn:
        position = Position(partition.replicated_lsn, position.resume_from)
    return position, synced_s


class Shipping:
    """A partition server's shippers (module contract)."""

    def __init__(self, link: GeoLink, partitions: Callable[[], Iterable[RangePartition]],
                 pace_s: float = 0.0) -> None:
        """`pace_s`: the least time between two batches of a shipper (geo_shipper.py)."""
        self.link = link
        self._pace_s = pace_s
        self._partitions = partitions
        self._tasks: dict[RangePartition, asyncio.Task[None]] = {}
        self._looking: asyncio.Task[None] | None = None
        self._in_location = False
        self._copier = Copier(link.fresh_targets, link.send)

    def start(self) -> None:
        self._looking = asyncio.get_running_loop().create_task(self._look_forever())

    def loaded(self, partition: RangePartition) -> None:
        """A partition now serves here (PartitionServer's load hook)."""
        if self._in_location:
            self._attach(partition)

    def shippers(self) -> list[GeoShipper]:
        return [p.shipper for p in self._tasks if p.shipper is not None]

    async def copy(self, partition_id: int, account: str) -> CopyReport:
        """The partition's copy of the account to its secondary (module contract)."""
        partition = next((p for p in self._partitions() if p.id == partition_id), None)
        if partition is None or partition.state != SERVING:
            raise NotOwner(f"partition {partition_id} is not served here")
        shipper = partition.shipper
        if shipper is None:
            raise Unavailable(f"partition {partition_id} does not ship yet: its stamp joined "
                              "a location less than a few seconds ago")
        report: CopyReport = await shipper.between_batches(
            lambda: self._copier(partition, account))
        return report

    async def close(self) -> None:
        tasks = [t for t in (self._looking, *self._tasks.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.link.close()

    async def _look_forever(self) -> None:
        while True:
            self._in_location = await self.link.settings() is not None
            if self._in_location:
                for partition in list(self._partitions()):
                    if partition.shipper is None and partition.state == SERVING:
                        self._attach(partition)
            await asyncio.sleep(ATTACH_INTERVAL_S)

    def _attach(self, partition: RangePartition) -> None:
        if partition in self._tasks:
            return
        start, synced_s = start_position(partition)
        shipper = GeoShipper(partition, self.link.targets, self.link.send, start,
                             synced_s=synced_s, set_aside=self.link.set_aside,
                             pace_s=self._pace_s)
        partition.shipper = shipper
        task = asyncio.get_running_loop().create_task(self._ship(partition, shipper))
        self._tasks[partition] = task
        task.add_done_callback(lambda _: self._tasks.pop(partition, None))
        log.info("partition %d ships to secondary stamps from LSN %d", partition.id,
                 start.lsn)

    async def _ship(self, partition: RangePartition, shipper: GeoShipper) -> None:
        running = asyncio.get_running_loop().create_task(shipper.run())
        try:
            await partition.stopped.wait()
        finally:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
            if running.done() and not running.cancelled() and running.exception():
                log.error("partition %d: its shipper failed: %r", partition.id,
                          running.exception())
