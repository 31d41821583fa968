"""A geo bootstrap (issue 30): an account's secondary stamp made a true copy of its primary's,
and `live` (failovers go to it, last sync times are told). Needed by a secondary left
`unavailable` by an unplanned failover (the old primary: its copy may hold writes the new
primary never saw), and by a migration (a stamp that holds nothing of the account yet). The
partition layer's half is partition_layer/geo_copy.py; this drives it, on a location of this
machine (tools/local_location.py).

The steps, each safe to run again (`bootstrap` on an account left `bootstrapping` by one cut
short starts over, from step 1), under the account's operation lock (`operation`: one
bootstrap, migration or planned failover of an account at a time):
1. the secondary holds the account as the secondary of the primary at the placement's epoch
   (as a fenced old primary does already; adopted if it does not hold it), and its front
   ends are given their cache's TTL to see it: they take the primary's replicated calls
   from then on, and no user write;
2. every name the account has at the secondary is cleared (ReplicateOp.clear: replicated
   deletes, never shipped on nor taken for a tail). All before any copy starts: a name cleared
   after its copy would lose it; rows shipped before the clear come again with the copy;
3. the location marks the secondary `bootstrapping`, and SKIP_WINDOW_S passes: by then every
   partition server of the primary asked the location again about the account (an
   `unavailable` answer is kept UNAVAILABLE_TTL_S at a partition server and the location's
   cache adds its CACHE_TTL_S: partition_layer/geo_link.py), so from then on none skips the
   account's operations (counts them shipped without sending them): they ship to it;
4. every partition of the primary holding the account's keys copies them (GeoCopy; the
   snapshot at L covers whatever was skipped before, then shipping goes on from where it
   stood). A split, merge or move meanwhile gives partitions whose copy is not done: they
   copy too, until the partitions the primary's servers report serving cover the account's
   keys with no gap and each copied;
5. the drain: the account's last sync time passes the end of step 4 (every write
   acknowledged before is at the secondary, over the copy);
6. the location marks the secondary `live`, if the placement did not change meanwhile and
   the lock is still held.

What it does not do: remove a name's bookkeeping rows of an entity group that was empty at
the secondary (only rows the scans list are cleared: its entities and its logs' rows); wait
for a user write that the secondary's partition layer took just before it was demoted and
commits after the clear (a stamp demoted moments before the bootstrap: a row of it may
survive where the primary has none); the location's cache TTL is taken as its default
(`stamp serve location --cache-ttl-ms` larger makes step 3's window too short).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

from common import rpc
from common.errors import NotFound, NotOwner, PreconditionFailed, Unavailable
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from frontend.accounts import SECONDARY
from location.placement import AccountPlacement
from location.service import CACHE_TTL_S
from lock_service.client import Lease
from partition_layer import keys
from partition_layer.client import AsyncPartitionClient
from partition_layer.geo_link import UNAVAILABLE_TTL_S
from tools.geo_account import (
    POLL_S,
    accounts_at,
    drain,
    overlaps,
    server_loads,
    stamps_of,
)
from tools.local_location import LocalLocation
from tools.local_stamp import LocalStamp
from tools.progress import SILENT, Progress

COPY_TIMEOUT_S = 600.0  # one partition's copy; a 1 GB account copies in well under it
COPIES_TIMEOUT_S = 1800.0  # every partition's, splits and merges meanwhile included
DRAIN_TIMEOUT_S = 120.0
SKIP_WINDOW_S = UNAVAILABLE_TTL_S + CACHE_TTL_S + 0.5  # step 4
OPERATION_PREFIX = "geo-op/"  # + account: its operation lock (`operation`)
OPERATION_LEASE_S = 10.0


@dataclass(frozen=True)
class BootstrapReport:
    account: str
    primary: str
    secondary: str
    names_cleared: int
    partitions: int
    rows: int
    nbytes: int
    seconds: float


def bootstrap(location: LocalLocation, account: str, progress: Progress = SILENT
              ) -> BootstrapReport:
    """Make the account's secondary a copy of its primary, then live (module docstring),
    holding the account's operation lock (`operation`). PreconditionFailed if it is live
    already, or the placement changed meanwhile, or another operation holds the lock."""
    with operation(location, account) as lease:
        return bootstrap_held(location, account, lease, progress)


def bootstrap_held(location: LocalLocation, account: str, lease: Lease,
                   progress: Progress = SILENT) -> BootstrapReport:
    """`bootstrap`, its caller holding the account's operation lock as `lease`."""
    started = time.monotonic()
    with location.store_client() as store:
        placement, _ = store.resolve(account)
    if placement.secondary_state == "live":
        raise PreconditionFailed(f"account {account}'s secondary {placement.secondary} is "
                                 "live already: nothing to bootstrap")
    stamps = stamps_of(location)
    primary, secondary = stamps[placement.primary], stamps[placement.secondary]
    progress.phase(f"{placement.secondary} holds {account} as the secondary of "
                   f"{placement.primary} (epoch {placement.epoch})")
    hold_as_secondary(stamps, placement)
    time.sleep(secondary.config.front_end.account_cache_ttl_ms / 1000)
    progress.phase(f"clearing {account}'s copy at {placement.secondary}")
    cleared = asyncio.run(clear_account(secondary, account, progress))
    placement = _mark(location, placement, "bootstrapping", lease)
    progress.phase(f"waiting {SKIP_WINDOW_S:.1f} s for the primary's partition servers to "
                   "see it")
    time.sleep(SKIP_WINDOW_S)
    progress.phase(f"copying {account} from {placement.primary} to {placement.secondary}")
    copies = asyncio.run(copy_account(primary, account, progress))
    copied_s = time.time()
    progress.phase(f"waiting until every write {placement.primary} took is on "
                   f"{placement.secondary}")
    drain(primary, account, copied_s, DRAIN_TIMEOUT_S)
    _mark(location, placement, "live", lease)
    return BootstrapReport(account, placement.primary, placement.secondary, cleared,
                           len(copies), sum(c.rows for c in copies.values()),
                           sum(c.bytes for c in copies.values()), time.monotonic() - started)


@contextlib.contextmanager
def operation(location: LocalLocation, account: str) -> Iterator[Lease]:
    """The account's operation lock (`geo-op/NAME` in the location's lock service): one
    bootstrap, migration or planned failover of an account at a time, whoever runs it (an
    operator, the location's balancer). A lease, renewed while held: a run that dies lets
    go within OPERATION_LEASE_S. PreconditionFailed if another holds it."""
    with location.store_client() as store:
        lease = store.locks.acquire(OPERATION_PREFIX + account, ttl_s=OPERATION_LEASE_S)
        if lease is None:
            raise PreconditionFailed(
                f"another bootstrap, migration or failover of {account} is under way (or "
                f"one cut short less than {OPERATION_LEASE_S:.0f} s ago): try again later")
        try:
            yield lease
        finally:
            lease.release()


def hold_as_secondary(stamps: dict[str, LocalStamp], placement: AccountPlacement) -> None:
    """The placement's secondary holds the account as the secondary of its primary at its
    epoch (adopted from the primary's record if it does not hold it: a migration cut short
    between naming it and its adoption)."""
    account = placement.account
    with accounts_at(stamps[placement.secondary]) as at_secondary:
        try:
            at_secondary.set_role(account, SECONDARY, placement.primary, placement.epoch)
        except NotFound:
            with accounts_at(stamps[placement.primary]) as at_primary:
                held = at_primary.get(account)
            at_secondary.adopt(held, primary=placement.primary, epoch=placement.epoch)


def _mark(location: LocalLocation, expected: AccountPlacement, state: str, lease: Lease
          ) -> AccountPlacement:
    """The placement with the secondary in `state`; PreconditionFailed if its stamps or epoch
    moved since `expected` (a failover meanwhile: this bootstrap is void), or if `lease` (the
    operation lock) was lost: another run may be under way."""
    if not lease.valid():
        raise PreconditionFailed(f"the operation lock of {expected.account} was lost: run "
                                 "the bootstrap again")
    with location.store_client() as store:
        placement, version = store.resolve(expected.account)
        if (placement.primary, placement.secondary, placement.epoch) != \
                (expected.primary, expected.secondary, expected.epoch):
            raise PreconditionFailed(f"account {expected.account}'s placement changed during "
                                     "the bootstrap: run it again")
        if placement.secondary_state == state:
            return placement
        return store.replace(placement, version, secondary_state=state)


# ---- step 2: the secondary's copy cleared --------------------------------------------------

async def clear_account(stamp: LocalStamp, account: str, progress: Progress = SILENT) -> int:
    """Clear every name of `account` at `stamp` (its logs, its entity groups); how many."""
    client = AsyncPartitionClient([r.address for r in stamp.partition_managers()],
                                  stamp.config.partition)
    try:
        names = [log async for log in client.list_logs(account)]
        names += await _entity_groups(client, account)
        for number, pname in enumerate(dict.fromkeys(names), 1):
            request = pb.Request(account=account, pname=pname,
                                 replicate=pb.ReplicateOp(clear=True))
            await client.call(request, idempotent=True)
            progress.status(f"cleared {number} of {len(names)} names")
        return len(names)
    finally:
        await client.close()


async def _entity_groups(client: AsyncPartitionClient, account: str) -> list[str]:
    """The account's entity groups that hold entities, each once."""
    groups: list[str] = []
    async for (group, _row), _value in client.scan_all(account):
        if not groups or groups[-1] != group:
            groups.append(group)
    return groups


# ---- step 4: every partition of the primary copies ----------------------------------------

async def copy_account(stamp: LocalStamp, account: str, progress: Progress = SILENT
                       ) -> dict[int, pb.GeoCopyReply]:
    """Every partition of `stamp` holding the account's keys copies them (module docstring,
    step 4): done once the partitions serving, as the partition servers report them, cover
    the account's keys without a gap and each copied; their reports by partition id.
    Unavailable after COPIES_TIMEOUT_S; a partition's error other than a move is raised."""
    low = keys.account_prefix(account)
    high = keys.prefix_end(low)
    done: dict[int, pb.GeoCopyReply] = {}
    deadline = time.monotonic() + COPIES_TIMEOUT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        holding = await _holding(stamp, low, high)
        todo = [(pid, address) for pid, (address, _) in holding.items() if pid not in done]
        if not todo and covers([r for _, r in holding.values()], low, high):
            return {pid: done[pid] for pid in holding}
        for pid, address in todo:
            try:
                done[pid] = await _copy(address, pid, account)
            except (NotOwner, Unavailable) as exc:  # moved, or no shipper yet: look again
                last = exc
                continue
            progress.status(f"partition {pid}: {done[pid].rows} rows copied "
                            f"({len(done)} of {len(holding)} partitions)")
        await asyncio.sleep(POLL_S)
    raise Unavailable(f"the copy of {account} did not finish within {COPIES_TIMEOUT_S:.0f} s"
                      f" (last: {last})")


def covers(ranges: list[pb.KeyRange], low: bytes, high: bytes | None) -> bool:
    """Whether `ranges` cover [low, high) with no gap (a partition moving, or a server not
    answering, leaves one: its partitions are not known to have copied)."""
    reached = low
    for key_range in sorted(ranges, key=lambda r: r.low):
        if key_range.low > reached:
            return False
        if not key_range.has_high:
            return True
        reached = max(reached, key_range.high)
        if high is not None and reached >= high:
            return True
    return False


async def _holding(stamp: LocalStamp, low: bytes, high: bytes | None
                   ) -> dict[int, tuple[str, pb.KeyRange]]:
    """The partitions serving at `stamp` that hold keys of [low, high): their server and
    range. A server down is left out: its partitions move, and are found at the new one."""
    return {p.partition_id: (address, p.range)
            for address, load in await server_loads(stamp, skip_down=True)
            for p in load.partitions if p.state == "serving" and overlaps(p.range, low, high)}


async def _copy(address: str, partition_id: int, account: str) -> pb.GeoCopyReply:
    async with rpc.aio_channel(address, 16 << 20) as channel:
        return await rpc.call(pb_grpc.PartitionServerStub(channel).GeoCopy(
            pb.GeoCopyRequest(partition_id=partition_id, account=account),
            timeout=COPY_TIMEOUT_S))
