"""An owner's witness sets (issue 32, curp.py step 2): the set it picks, fences and clears
(at load, after the recovery, and again when a member is lost), and how it starts serving
with one.

Contracts:
- `fenced_set(p, epoch)`: three witnesses for `p` (witness_set.pick over the stream
  manager's nodes), fenced and cleared below `epoch` on every member; None when the stamp
  has no three fault domains alive or a member did not answer (every write then takes the
  sync path). Never named anywhere yet: the caller records it.
- `serve_with(p, calls)`: from now on `p` answers early the writes recorded at `calls`
  (Speculation.epoch), has them drop durable writes' records, and sweeps them
  (witness_sweep.py), which calls `repick` when a member stays silent.
- `pick_later(p)`: started when CURP is on and no set could be fenced at load (a member
  silent, fewer than three fault domains): every sweep interval it tries again with the
  owner's next set epoch, and once one is fenced and cleared, names it and serves with it.
  Nothing was answered early before (Speculation.epoch 0), so nothing rests on a set yet.
- `repick(p, old, silent)`: a member of `old` has not answered the sweep for a while. If the
  stream manager's nodes now give a set without the silent members, the owner moves to it,
  the way a lost replica is replaced, in this order:
  1. it answers nothing early any more (`Speculation.epoch` 0) and waits until every write
     it answered early is durable: from then on no acknowledgement rests on `old`;
  2. it fences and clears the new set with the next set epoch of its own
     (witness_set.set_epoch: above `old`'s, below any later owner's), and names it in a
     metadata record (so a recovery fences it, not `old`);
  3. it serves with the new set, and closes `old` (whose silent member keeps its records
     until a later set that includes it is fenced and cleared: nobody reads them).
  A failure on the way (a member of the new set silent too, the lease gone) leaves `old` in
  force as it was, and the next sweep tries again. True when it moved.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import TYPE_CHECKING

from common.errors import StampError, Unavailable
from partition_layer.witness_set import (
    GENERATION_BITS,
    OwnerCalls,
    WitnessSet,
    generation,
    pick,
    set_epoch,
)
from partition_layer.witness_sweep import Sweeper

if TYPE_CHECKING:
    from partition_layer.partition import RangePartition

log = logging.getLogger(__name__)


async def fenced_set(p: RangePartition, epoch: int, quiet: bool = False
                     ) -> OwnerCalls | None:
    """The module's `fenced_set` (`quiet`: a failure is logged at debug level)."""
    assert p.witness_channels is not None
    # Front ends send curp_epoch 0 for "no witnesses known": a set's never is (its owner's
    # is a lease token), or a write recorded nowhere could be answered early.
    assert epoch > 0 and p.epoch > 0, (epoch, p.epoch)
    addresses = pick(await p.client.sm.list_nodes(), p.id, log_replicas(p))
    if addresses is None:
        return None
    calls = OwnerCalls(p.witness_channels, WitnessSet(epoch, addresses), p.id, epoch)
    try:
        await calls.fence(every=True)
        await calls.clear(every=True)
    except Unavailable as exc:
        log.log(logging.DEBUG if quiet else logging.WARNING,
                "partition %d: no witnesses (%s): every write takes the sync path", p.id, exc)
        await calls.close()
        return None
    return calls


def log_replicas(p: RangePartition) -> frozenset[str]:
    """The nodes of its commit log's last extent, which witnesses are picked away from."""
    extents = p.streams["log"].extents if "log" in p.streams else []
    return frozenset(extents[-1].addresses) if extents else frozenset()


def serve_with(p: RangePartition, calls: OwnerCalls) -> None:
    """The module's `serve_with`."""
    p.witnesses = calls
    speculation = p.committer.speculation
    speculation.drop = calls.drop
    speculation.epoch = calls.epoch
    Sweeper(p, calls, lambda silent: repick(p, calls, silent)).start()


def pick_later(p: RangePartition) -> None:
    """The module's `pick_later`."""
    p.curp_tasks.add(asyncio.get_running_loop().create_task(_pick_later(p)))


async def _pick_later(p: RangePartition) -> None:
    epoch = set_epoch(p.epoch, 1)  # the load's own attempt may have fenced some members
    while not p.gone() and p.witnesses is None:
        await asyncio.sleep(p.limits.curp_sweep_interval_ms / 1000)
        if p.gone() or not p.lease_valid():
            continue
        try:
            calls = await fenced_set(p, epoch, quiet=True)
            if calls is None:
                continue
            if p.gone() or not p.lease_valid():
                await calls.close()
                continue
            await p.checkpointer.record_witnesses(calls.members)
        except StampError as exc:  # the stream manager unreachable, the meta append failed
            log.warning("partition %d: naming witnesses failed: %s", p.id, exc)
            continue
        serve_with(p, calls)
        log.info("partition %d: witnesses at last: %s (set epoch %d)", p.id,
                 list(calls.members.addresses), epoch)


async def repick(p: RangePartition, old: OwnerCalls, silent: Collection[str]) -> bool:
    """The module's `repick`."""
    if p.witnesses is not old or p.gone():
        return False
    addresses = pick(await p.client.sm.list_nodes(), p.id, log_replicas(p))
    if addresses is None or not set(addresses).isdisjoint(silent):
        log.debug("partition %d: witnesses %s silent, and no set without them yet: %s",
                  p.id, sorted(silent), addresses)
        return False  # the stream manager still counts them alive: wait, as for a replica
    next_generation = generation(old.epoch) + 1
    if next_generation >= 1 << GENERATION_BITS:
        log.warning("partition %d: no witness set left to pick until it is loaded again",
                    p.id)
        return False
    speculation = p.committer.speculation
    speculation.epoch = 0
    new: OwnerCalls | None = None
    try:
        await speculation.until_all_durable()
        new = await fenced_set(p, set_epoch(p.epoch, next_generation))
        if new is None or set(new.members.addresses) & set(silent):
            raise Unavailable("no set of three answering witnesses")
        if not p.lease_valid() or p.witnesses is not old:
            raise Unavailable("it is no longer the owner")
        await p.checkpointer.record_witnesses(new.members)
    except StampError as exc:
        log.warning("partition %d: witnesses %s silent, and no other set yet: %s", p.id,
                    sorted(silent), exc)
        if new is not None:
            await new.close()
        if p.witnesses is old:
            speculation.epoch = old.epoch
        return False
    serve_with(p, new)
    log.info("partition %d: witnesses %s silent: moved to %s (set epoch %d)", p.id,
             sorted(silent), list(new.members.addresses), new.epoch)
    await old.close()  # its sweep, which called this, ends as it sees the new set
    return True
