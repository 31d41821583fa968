"""What a partition server's ownership of a range partition rests on (§3, §4, §8 invariant 3),
and the decisions about it that need no I/O.

Contracts:
- A partition is owned through two leases: its own (`partition/<id>`, whose fencing token is
  the partition's epoch) and the server's session (which keeps `ps/<name>` registered: the
  partition manager's sign that the server lives). `Ownership.valid` holds only while both
  do: an owner that lost its session serves nothing (§3), and the PM, which reassigns the
  partitions of a server whose registration died, never races an owner that still serves.
- A server that loses its session ends every ownership taken under it at once (server.py
  `session_lost`): it stops the partitions and releases their leases, so that their new
  owners can load them.
- Taking a lease that another holds (`decide_wait`): the load waits out what is left of the
  holder's lease (a dead or frozen holder, or one dropping everything with its session, lets
  it run out), never longer, and never longer than the caller's bound. A lease still held
  after that was renewed: its holder is a live owner, and the load fails, naming it — the
  PM has it let go (heartbeat answers) and tries again, instead of a load waiting 30 s for
  a lease it can never get. (Whether a holder lives cannot be told sooner: a holder frozen
  a moment ago still has its session.)
- A partition lease whose holder has no session left in the lock service is an orphan
  (`orphaned`), and a loader ends it at once (`LockClient.end`) rather than wait out its
  TTL: the holder claimed the ownership only while the session it took the lease under was
  valid too, it took the lease after that session was granted, and a session the service no
  longer lists has ended there — past its time, after its holder stopped claiming it (the
  lease contract, lock_service/client.py), or released by a holder that stopped first. So
  nobody serves under an orphan. Any session of the holder in the listing (one whose time
  is up but whose expiry is not logged yet; one of a new incarnation, under which the lease
  may have been taken) counts as live, and its lease is waited out as above. A dead server's
  partitions are then free as soon as its session is: failover waits for one lease, not for
  the later of two renewed on their own schedules.
- Lock calls run on threads of their own (`LockCalls`), never on the default executor: a
  load waiting out a lease holds its thread for up to a lease's time, and heartbeats, reads
  of the map and anything else the process runs on the default executor must not queue
  behind it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from common.errors import Unavailable
from common.proto import lock_service_pb2 as lock_pb
from lock_service.client import Lease

if TYPE_CHECKING:
    from partition_layer.partition import RangePartition

T = TypeVar("T")

# A lease's end in the lock service's state can lag its holder's last renewal by a little
# (a renewal in flight, the leader's clock): a dead holder's lease is waited out this much
# past what the service says is left of it.
WAIT_MARGIN_S = 0.5


def lease_name(partition_id: int) -> str:
    return f"partition/{partition_id}"


@dataclass(eq=False)
class Ownership:
    """One partition's lease and the session it lives and dies with; `partition` is the one
    it guards, once its load has begun."""

    partition_id: int
    lease: Lease
    session: Lease
    partition: RangePartition | None = None

    def valid(self) -> bool:
        """Whether this server may act as the partition's owner now (answer a read,
        acknowledge a write)."""
        return self.lease.valid() and self.session.valid()


@dataclass(frozen=True)
class HeldBy:
    """Who holds a partition's lease, as the lock service's leader sees it."""

    holder: str
    token: int
    expires_in_s: float
    live: bool  # the holder has a live session


def held_by(leases: Iterable[lock_pb.LeaseInfo], lock: str) -> HeldBy | None:
    """The holder of `lock` among `leases` (LockClient.list_leases), or None if it is free."""
    leases = list(leases)
    found = next((info for info in leases if info.lock == lock), None)
    if found is None:
        return None
    live = any(not info.lock and info.holder == found.holder for info in leases)
    return HeldBy(found.holder, found.token, found.expires_in_s, live)


def orphaned(held: HeldBy) -> bool:
    """Whether a lease, held as `held`, is an orphan that a loader may end (module
    docstring): its holder has no session in the lock service's listing."""
    return not held.live


def decide_wait(held: HeldBy | None, bound_s: float) -> float:
    """How long a load may wait for a partition's lease, now held as `held` (None: free
    again): what is left of it, at most `bound_s` (module docstring)."""
    if held is None:
        return 0.0
    return max(0.0, min(bound_s, held.expires_in_s + WAIT_MARGIN_S))


def still_held(partition_id: int, held: HeldBy | None, waited_s: float) -> Unavailable:
    """The error of a load whose wait for the lease, held as `held`, ran out: it names the
    holder, which renewed the lease meanwhile (a live owner)."""
    if held is None:
        return Unavailable(f"partition {partition_id}: its lease was taken by another "
                           f"server meanwhile")
    live = "live, with its session" if held.live else "renewing it"
    return Unavailable(f"partition {partition_id}: its lease is held by {held.holder} "
                       f"(token {held.token}, {live}), still after {waited_s:.1f} s: it has "
                       f"to let go first")


class LockCalls:
    """Blocking lock-client calls on `threads` threads of their own (module docstring)."""

    def __init__(self, threads: int, name: str) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=f"{name}-locks")

    async def run(self, call: Callable[..., T], *args: object) -> T:
        """`call(*args)` on one of these threads. Cancelling the await abandons the answer,
        not the call (a blocking call cannot be interrupted)."""
        return await asyncio.get_running_loop().run_in_executor(self._pool,
                                                                 partial(call, *args))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
