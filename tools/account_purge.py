"""Removing a deleted account's data (issue 28, item 6), through the partition layer itself:
the account's tombstone (frontend/accounts.py) revoked its keys and retired its name; this
removes what it owned, so that nothing of it stays readable by anyone, operators included.

Contracts:
- `purge` runs passes until one finds nothing to remove (that pass is the proof; at most
  PURGE_PASSES_MAX). A pass: every log of the account (SCAN_LOG_NAMES) is sealed, then
  trimmed to its end (`empty_log`: sealed first, so no append lands past the trim); every
  entity of the account is deleted as one entity scan (SCAN_ENTITIES) reads it, in batches
  of one entity group (`empty_entity_group` does one group). Internal names are the
  account's too: the blob endpoint's '$containers' and '$c/CONTAINER/GEN' groups go with the
  rest (the partition layer knows no public/internal cut; the front end makes it).
- Idempotent: every step is (a seal or trim only moves forward; a deleted entity is not
  listed again), so a purge cut short anywhere — a crash, a kill -9 — is finished by running
  it again, and running it on a purged account removes nothing.
- Start it only once no front end can accept a request of the account any more:
  `settle_s` after the tombstone (front ends keep keys `account_cache_ttl_ms`, and a request
  accepted just before is retried by a front end for up to the partition client's
  `client_timeout_ms`). `remaining_settle_s` says how long that still is.
- What stays, by design: each name's bookkeeping row — a log's sealed, empty LogMeta, an
  entity group's mark (the partition layer cannot drop a name: hence retired names) — and,
  until checkpoints merge them away (partition_layer/merge.py drops trimmed records and, at
  the oldest run, tombstones), the old rows in older runs, and large values in blob data;
  `stamp job gc` then releases their extents. None of it is readable: a trimmed record's
  read fails as trimmed, a deleted row is gone to every read and scan.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from common.config import StampConfig
from common.errors import NotFound, Unavailable
from common.proto import partition_pb2 as pb
from frontend.accounts import Tombstone
from partition_layer import keys, scan_client
from partition_layer.client import AsyncPartitionClient
from tools.progress import SILENT, Progress

# A pass that removed something is followed by one that must find nothing; more passes mean
# something keeps writing to the account (it should not: its keys are gone).
PURGE_PASSES_MAX = 4


@dataclass
class Removed:
    """What a purge removed: records readable in logs, and entities."""

    logs: int = 0  # logs that had readable records
    records: int = 0
    groups: int = 0  # entity groups that had entities
    entities: int = 0

    def add(self, other: Removed) -> None:
        self.logs += other.logs
        self.records += other.records
        self.groups += other.groups
        self.entities += other.entities

    def nothing(self) -> bool:
        return not (self.records or self.entities)

    def summary(self) -> str:
        return (f"removed {self.records} records from {self.logs} logs (every log now "
                f"sealed and empty) and {self.entities} entities from {self.groups} entity "
                f"groups (blob containers and blobs included)")


def settle_s(config: StampConfig) -> float:
    """How long after an account's tombstone no front end accepts or retries a request of
    it (module docstring)."""
    return (config.front_end.account_cache_ttl_ms + config.partition.client_timeout_ms) / 1000


def remaining_settle_s(tombstone: Tombstone, config: StampConfig, now_s: float) -> float:
    """How much longer to wait before purging `tombstone`'s account (0: no more). At most
    `settle_s`, whatever the clocks: a tombstone dated in the future (another host's clock
    ahead of ours) costs one settle time, not more."""
    settle = settle_s(config)
    return max(0.0, min(settle, tombstone.deleted_s + settle - now_s))


async def empty_log(client: AsyncPartitionClient, account: str, log: str) -> int:
    """Seal `log`, then trim it to its end; the records that were readable (0: none)."""
    await client.seal(account, log)
    first, end = await client.peek(account, log)
    if end > first:
        await client.trim(account, log, end)
    return end - first


class _BatchDeleter:
    """Deletes the entities it is given, in batches of one entity group of at most
    `batch_ops_max` (each atomic, retried under its token by the client)."""

    def __init__(self, client: AsyncPartitionClient, account: str, progress: Progress
                 ) -> None:
        self.client = client
        self.account = account
        self.progress = progress
        self.group: str | None = None
        self.rows: list[bytes] = []
        self.deleted = 0
        self.groups = 0

    async def add(self, item: pb.ScanItem) -> None:
        if item.pname != self.group or len(self.rows) >= self.client.limits.batch_ops_max:
            await self.flush()
        if item.pname != self.group:
            self.group = item.pname
            self.groups += 1
            self.progress.advance(0, text=f"deleting the entities of {item.pname}")
        self.rows.append(item.row)

    async def flush(self) -> None:
        if not self.rows:
            return
        assert self.group is not None
        deleted = len(self.rows)
        try:
            await self.client.batch(self.account, self.group,
                                    [("delete", row) for row in self.rows])
        except NotFound:
            # Another purge of the account (an operator re-running it while it runs) took
            # a row first, failing the whole batch: the rest one at a time.
            deleted = 0
            for row in self.rows:
                with contextlib.suppress(NotFound):
                    await self.client.delete(self.account, self.group, row)
                    deleted += 1
        self.deleted += deleted
        self.progress.advance(deleted)
        self.rows = []


async def _delete_entities(client: AsyncPartitionClient, account: str, low: bytes,
                           high: bytes | None, progress: Progress) -> _BatchDeleter:
    """Delete every entity of `account` in [low, high), read by one scan (a snapshot per
    partition: the deletes behind it change nothing it reads)."""
    deleter = _BatchDeleter(client, account, progress)
    pages = scan_client.scan(client, account, low, high)
    async with contextlib.aclosing(pages):
        async for page in pages:
            for item in page.items:
                await deleter.add(item)
    await deleter.flush()
    return deleter


async def empty_entity_group(client: AsyncPartitionClient, account: str, group: str,
                             progress: Progress = SILENT) -> int:
    """Delete every entity of `group`; how many were deleted."""
    low = keys.pname_prefix(account, group)
    return (await _delete_entities(client, account, low, keys.prefix_end(low),
                                   progress)).deleted


async def purge_pass(client: AsyncPartitionClient, account: str,
                     progress: Progress = SILENT) -> Removed:
    """One pass over the account's logs, then its entities (module docstring)."""
    removed = Removed()
    progress.phase(f"sealing and emptying the logs of {account}")
    async for log in client.list_logs(account):  # internal names included
        records = await empty_log(client, account, log)
        removed.logs += int(records > 0)
        removed.records += records
        progress.advance(text=f"log {log}")
    progress.phase(f"deleting the entities of {account}")
    deleted = await _delete_entities(client, account, keys.account_prefix(account), None,
                                     progress)
    removed.entities, removed.groups = deleted.deleted, deleted.groups
    return removed


async def purge(client: AsyncPartitionClient, account: str, progress: Progress = SILENT,
                passes_max: int = PURGE_PASSES_MAX) -> Removed:
    """Passes until one removes nothing (module docstring); what they removed in all.
    Unavailable if data was still found after `passes_max` passes."""
    total = Removed()
    for number in range(1, passes_max + 1):
        found = await purge_pass(client, account, progress)
        total.add(found)
        if found.nothing():
            return total
        progress.status(f"pass {number} removed data; checking that none is left")
    raise Unavailable(f"account {account!r} still had data after {passes_max} purge "
                      f"passes: something keeps writing to it")
