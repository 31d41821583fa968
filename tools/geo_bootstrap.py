"""A geo bootstrap (issue 30): an account's secondary stamp made a true copy of its primary's,
and `live` (failovers go to it, last sync times are told). Needed by a secondary left
`unavailable` by an unplanned failover (the old primary: its copy may hold writes the new
primary never saw), and by a migration (a stamp that holds nothing of the account yet). The
partition layer's half is partition_layer/geo_copy.py; this drives it, on a location of this
machine (tools/local_location.py).

The steps, each safe to run again (`bootstrap` on an account left `bootstrapping` by one cut
short starts over, from step 1):
1. the secondary holds the account as the secondary of the primary at the placement's epoch
   (as a fenced old primary does already), and its front ends are given their cache's TTL to
   see it: they take the primary's replicated calls from then on, and no user write;
2. every name the account has at the secondary is cleared (ReplicateOp.clear: replicated
   deletes, never shipped on nor taken for a tail). All before any copy starts: a name cleared
   after its copy would lose it; rows shipped before the clear come again with the copy;
3. the location marks the secondary `bootstrapping` (the primary's shippers ship to it from
   their next look, and each copy below asks the location first);
4. every partition of the primary holding the account's keys copies them (GeoCopy; the
   snapshot at L, then shipping goes on from where it stood). A split or merge meanwhile
   gives partitions whose copy is not done: they copy too, until every partition of the
   account, as the primary's partition servers report them, copied, and SKIP_WINDOW_S
   passed since step 3. A partition server that had the old answer may skip operations
   (count them shipped) until it asks the location again, within that window
   (partition_layer/geo_link.py keeps an `unavailable` answer UNAVAILABLE_TTL_S, the
   location its own CACHE_TTL_S): what a partition copied after the window started covers
   them, and a partition made by a split after the last copy ships them;
5. the drain: the account's last sync time passes the end of step 4 (every write
   acknowledged before is at the secondary, over the copy);
6. the location marks the secondary `live`, if the placement did not change meanwhile.

What it does not do: remove a name's bookkeeping rows of an entity group that was empty at
the secondary (only rows the scans list are cleared: its entities and its logs' rows).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from common import rpc
from common.errors import NotOwner, PreconditionFailed, StampError, Unavailable
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from frontend.accounts import SECONDARY
from location.placement import AccountPlacement
from location.service import CACHE_TTL_S
from partition_layer import keys
from partition_layer.client import AsyncPartitionClient
from partition_layer.geo_link import UNAVAILABLE_TTL_S
from tools.geo_account import POLL_S, _drain, accounts_at, overlaps, stamps_of
from tools.local_location import LocalLocation
from tools.local_stamp import LocalStamp
from tools.progress import SILENT, Progress

COPY_TIMEOUT_S = 600.0  # one partition's copy; a 1 GB account copies in well under it
COPIES_TIMEOUT_S = 1800.0  # every partition's, splits and merges meanwhile included
DRAIN_TIMEOUT_S = 120.0
STATUS_TIMEOUT_S = 5.0
SKIP_WINDOW_S = UNAVAILABLE_TTL_S + CACHE_TTL_S + 0.5  # step 4


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
    """Make the account's secondary a copy of its primary, then live (module docstring).
    PreconditionFailed if it is live already, or the placement changed meanwhile."""
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
    with accounts_at(secondary) as at_secondary:
        at_secondary.set_role(account, SECONDARY, placement.primary, placement.epoch)
    time.sleep(secondary.config.front_end.account_cache_ttl_ms / 1000)
    progress.phase(f"clearing {account}'s copy at {placement.secondary}")
    cleared = asyncio.run(clear_account(secondary, account, progress))
    placement = _mark(location, placement, "bootstrapping")
    marked = time.monotonic()
    progress.phase(f"copying {account} from {placement.primary} to {placement.secondary}")
    copies = asyncio.run(copy_account(primary, account, progress,
                                      not_before=marked + SKIP_WINDOW_S))
    copied_s = time.time()
    progress.phase(f"waiting until every write {placement.primary} took is on "
                   f"{placement.secondary}")
    _drain(primary, account, copied_s, DRAIN_TIMEOUT_S)
    _mark(location, placement, "live")
    return BootstrapReport(account, placement.primary, placement.secondary, cleared,
                           len(copies), sum(c.rows for c in copies.values()),
                           sum(c.bytes for c in copies.values()), time.monotonic() - started)


def _mark(location: LocalLocation, expected: AccountPlacement, state: str) -> AccountPlacement:
    """The placement with the secondary in `state`; PreconditionFailed if its stamps or epoch
    moved since `expected` (a failover meanwhile: this bootstrap is void)."""
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

async def copy_account(stamp: LocalStamp, account: str, progress: Progress = SILENT,
                       not_before: float = 0.0) -> dict[int, pb.GeoCopyReply]:
    """Every partition of `stamp` holding the account's keys copies them (module docstring,
    step 4), the last look at which they are no sooner than `not_before` (monotonic); their
    reports by partition id. Unavailable after COPIES_TIMEOUT_S."""
    low = keys.account_prefix(account)
    high = keys.prefix_end(low)
    done: dict[int, pb.GeoCopyReply] = {}
    deadline = time.monotonic() + COPIES_TIMEOUT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        holding = await _holding(stamp, low, high)
        todo = [(pid, address) for pid, address in holding.items() if pid not in done]
        if holding and not todo and time.monotonic() >= not_before:
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


async def _holding(stamp: LocalStamp, low: bytes, high: bytes | None) -> dict[int, str]:
    """The partitions serving at `stamp` that hold keys of [low, high), with their server."""
    found: dict[int, str] = {}
    for record in stamp.partition_servers():
        try:
            async with rpc.aio_channel(record.address, 16 << 20) as channel:
                load = await rpc.call(pb_grpc.PartitionServerStub(channel).Status(
                    pb.ServerStatusRequest(), timeout=STATUS_TIMEOUT_S))
        except StampError:
            continue  # down: its partitions move, and are found at their new server
        found.update((p.partition_id, record.address) for p in load.partitions
                     if p.state == "serving" and overlaps(p.range, low, high))
    return found


async def _copy(address: str, partition_id: int, account: str) -> pb.GeoCopyReply:
    async with rpc.aio_channel(address, 16 << 20) as channel:
        return await rpc.call(pb_grpc.PartitionServerStub(channel).GeoCopy(
            pb.GeoCopyRequest(partition_id=partition_id, account=account),
            timeout=COPY_TIMEOUT_S))
