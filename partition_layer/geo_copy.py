"""A geo bootstrap's two halves in the partition layer (issue 30; the plan is in
geo_ship.py's docstring, the driver is tools/geo_bootstrap.py).

Contracts:
- **Clear** (at the secondary, `clear_name`): a ReplicateOp with `clear` set first deletes
  every row its name holds here, then writes its rows. The deletes are replicated operations
  (tombstones at each row's own version, CLEAR_ROWS_MAX a commit), so they are never shipped
  on nor taken for a deposed primary's tail, and a name emptied so is as if never written.
  The driver clears every name of the account at the secondary while nothing ships to it
  (its state `unavailable`): its copy, behind or diverged, goes before the primary's comes.
- **Copy** (at the primary, `Copier`): a partition's shipper, between two of its batches
  (geo_shipper.GeoShipper.between_batches), first asks the location where the account's secondary is
  now (past every cache: once it answered, each later batch goes there too), then takes a
  consistent snapshot of the account's rows in its range (scan_snapshot.Snapshot.of: one
  state, at the partition's applied LSN L, while the shipper stands at S <= L) and sends it
  to the secondary, key-ordered, as ReplicateOps: one per name and call, at most
  REPLICATE_ROWS_MAX rows, calls of at most COPY_CALL_BYTES as shipped (blob values inline;
  a single larger row alone), COPY_CALLS_IN_FLIGHT of them at once (each row is in one
  call: their order does not matter; a copy that fails waits for those in flight, so none
  lands after shipping resumed). Shipping waits meanwhile, so no
  operation past L lands before the copy of a row it changed; the operations in (S, L] are
  shipped after it, in order, and end where the snapshot stands. Copying again (a retry, a
  split's child) writes the same rows again. Memory: the calls in flight, one block per run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from common.errors import PreconditionFailed
from common.proto import partition_pb2 as pb
from partition_layer import keys
from partition_layer.geo_ship import REPLICATE_ROWS_MAX, replicate_request, shipped_bytes
from partition_layer.geo_tail import Deposed
from partition_layer.operations import Replicated
from partition_layer.partition import RangePartition
from partition_layer.rows import Row, row_version
from partition_layer.scan_snapshot import Snapshot

log = logging.getLogger(__name__)

CLEAR_ROWS_MAX = 4096
COPY_CALL_BYTES = 1024 * 1024
COPY_CALLS_IN_FLIGHT = 4


@dataclass(frozen=True)
class CopyReport:
    """What one partition copied: the account's rows as of `lsn`, to stamp `target`."""

    lsn: int
    rows: int
    nbytes: int
    target: str

    def to_pb(self) -> pb.GeoCopyReply:
        return pb.GeoCopyReply(lsn=self.lsn, rows=self.rows, bytes=self.nbytes,
                               target=self.target)


# ---- clear, at the secondary -------------------------------------------------------------

async def clear_name(partition: RangePartition, account: str, pname: str) -> int:
    """Delete every row of the name here as replicated operations (module contract); how
    many. The caller makes sure nothing else writes the name meanwhile."""
    low = keys.pname_prefix(account, pname)
    high = keys.prefix_end(low)
    assert high is not None  # a name's prefix ends in its terminator
    cleared = 0
    start = low
    while True:
        partition.check_serving()
        batch: list[tuple[bytes, Row]] = []
        # A fresh snapshot per commit, from past the last key deleted (nothing else writes
        # the name: every key before it is a tombstone now), until nothing is left.
        async for rows in Snapshot.of(partition, start, high).batches(start):
            batch += [(key, Row(row_version(encoded), tombstone=True))
                      for key, encoded in rows[:CLEAR_ROWS_MAX - len(batch)]]
            if len(batch) >= CLEAR_ROWS_MAX:
                break
        if not batch:
            return cleared
        await partition.submit(Replicated(account, pname, tuple(batch)), 32 * len(batch))
        cleared += len(batch)
        start = batch[-1][0] + b"\x00"  # the next key after it


# ---- copy, at the primary ----------------------------------------------------------------

Targets = Callable[[str], Awaitable[str | Deposed | None]]
Sender = Callable[[str, list[pb.Request]], Awaitable[None]]


class Copier:
    """Copies an account's rows in a partition to its secondary (module contract)."""

    def __init__(self, fresh_target: Targets, send: Sender) -> None:
        """`fresh_target(account)`: its secondary as the location says now (GeoLink);
        `send`: a call of requests to a stamp (GeoLink.send)."""
        self._fresh_target = fresh_target
        self._send = send

    async def __call__(self, site: RangePartition, account: str) -> CopyReport:
        target = await self._fresh_target(account)
        if target is None or isinstance(target, Deposed):
            raise PreconditionFailed(f"account {account} has no secondary this stamp ships "
                                     "to: nothing to copy")
        span = account_span(site, account)
        if span is None:
            return CopyReport(site.applied_lsn, 0, 0, target)
        lsn = site.applied_lsn
        snapshot = Snapshot.of(site, *span)  # no await since `lsn`: the rows as of it
        rows = nbytes = 0
        # Calls in flight at once: the snapshot's rows are each copied once, so their order
        # does not matter (and no batch ships meanwhile).
        sending: set[asyncio.Task[None]] = set()
        try:
            async for call in _calls(snapshot, account, site):
                if len(sending) >= COPY_CALLS_IN_FLIGHT:
                    done, sending = await asyncio.wait(sending,
                                                       return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        task.result()  # its error, if it failed
                sending.add(asyncio.ensure_future(self._send(target, call)))
                rows += sum(len(r.replicate.keys) for r in call)
                nbytes += sum(r.ByteSize() for r in call)
            await asyncio.gather(*sending)
        finally:
            # Not cancelled: a send cancelled here may still land at the secondary after
            # shipping resumed (the row copied over a later operation). Each is bounded by
            # its call's timeout.
            await asyncio.gather(*sending, return_exceptions=True)
        log.info("partition %d copied %d rows (%d bytes) of account %s as of LSN %d to %s",
                 site.id, rows, nbytes, account, lsn, target)
        return CopyReport(lsn, rows, nbytes, target)


def account_span(site: RangePartition, account: str) -> tuple[bytes, bytes] | None:
    """[low, high) of the account's keys within the partition's range; None if none."""
    low = keys.account_prefix(account)
    high = keys.prefix_end(low)
    assert high is not None
    low = max(low, site.range.low)
    if site.range.high is not None:
        high = min(high, site.range.high)
    return (low, high) if low < high else None


async def _calls(snapshot: Snapshot, account: str, site: RangePartition
                 ) -> AsyncIterator[list[pb.Request]]:
    """The snapshot's rows as calls (module contract): one ReplicateOp per name and call, a
    call ending once its rows as shipped (geo_ship.shipped_bytes: a value in blob data
    travels inline) reach COPY_CALL_BYTES, or REPLICATE_ROWS_MAX rows; a row alone may pass
    that (the largest legal value: the shipper's batches take it so too)."""
    call: list[pb.Request] = []
    size = 0  # shipped bytes of `call` and `held`
    name: str | None = None
    held: list[tuple[bytes, bytes]] = []

    async def flush_name() -> None:
        nonlocal held
        if held:
            assert name is not None
            call.append(await replicate_request(account, name, held, site.read_blob))
            held = []

    async for rows in snapshot.batches(snapshot.low):
        for key, encoded in rows:
            pname = keys.decode_key(key)[1]
            weight = shipped_bytes(key, encoded)
            if (call or held) and size + weight > COPY_CALL_BYTES:
                await flush_name()
                yield call
                call, size = [], 0
            elif pname != name or len(held) >= REPLICATE_ROWS_MAX:
                await flush_name()
                if any(r.pname == pname for r in call):  # one request per name and call
                    yield call
                    call, size = [], 0
            name = pname
            held.append((key, encoded))
            size += weight
    await flush_name()
    if call:
        yield call
