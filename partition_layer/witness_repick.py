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
- `repick(p, old, silent)`: a member of `old` has not answered the sweep for a while (it
  is left out of the new set whatever the stream manager says of it). If the stamp has a
  set without the silent members, the owner moves to it, the way a lost replica is
  replaced, in this order:
  1. it gives `old` up for good (`OwnerCalls.abandoned`: the new set's fence may reach
     some of its members, whose List and Drop at `old`'s epoch see nothing from then on,
     so none of its rounds counts), answers nothing early any more (`Speculation.epoch`
     0), and waits until every write it answered early is durable: from then on no
     acknowledgement rests on `old`;
  2. it fences and clears the new set with its next set epoch (witness_set.set_epoch:
     above `old`'s, below any later owner's), and names it in a metadata record (so a
     recovery fences it, not `old`) — in turn with the checkpoints' records, and only
     while the partition serves (a split's or merge's intent follows its last checkpoint);
  3. it serves with the new set, and closes `old` (whose silent member keeps its records
     until a later set that includes it is fenced and cleared: nobody reads them).
  A failure at 2 (a member of the new set silent too) leaves the partition with no set in
  use, answering nothing early, and the next sweep of `old` tries again; a metadata append
  that failed may or may not have landed, so the partition stops (its next load fences
  whichever set the metadata names). True when it moved.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from common.errors import PreconditionFailed, StampError, Unavailable
from partition_layer.partition_states import SERVING
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


async def fenced_set(p: RangePartition, epoch: int, quiet: bool = False,
                     exclude: Collection[str] = ()) -> OwnerCalls | None:
    """The module's `fenced_set` (`quiet`: a failure is logged at debug level; no node of
    `exclude`: witnesses silent to this owner, whatever the stream manager says)."""
    assert p.witness_channels is not None
    # Front ends send curp_epoch 0 for "no witnesses known": a set's never is (its owner's
    # is a lease token), or a write recorded nowhere could be answered early.
    assert epoch > 0 and p.epoch > 0, (epoch, p.epoch)
    nodes = [n for n in await p.client.sm.list_nodes() if n.address not in exclude]
    addresses = pick(nodes, p.id, log_replicas(p))
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
    extents = p.streams["log"].extents
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
        if p.gone() or not p.lease_valid() or p.state != SERVING:
            continue
        try:
            calls = await fenced_set(p, epoch, quiet=True)
        except StampError as exc:  # the stream manager unreachable
            log.debug("partition %d: no witnesses yet: %s", p.id, exc)
            continue
        if calls is not None and await _name(p, calls, lambda: p.witnesses is None):
            log.info("partition %d: witnesses at last: %s (set epoch %d)", p.id,
                     list(calls.members.addresses), epoch)


async def _name(p: RangePartition, calls: OwnerCalls, still: Callable[[], bool]) -> bool:
    """Name `calls`' set in a metadata record and serve with it; False (and `calls` closed)
    if the partition is no longer in a state to (`still`, serving, its lease). An append
    that failed may or may not have landed, so which set the metadata names is unknown: the
    partition stops, and its next load fences whichever it names."""
    def in_turn() -> bool:
        return p.state == SERVING and p.lease_valid() and still()
    try:
        await p.checkpointer.record_witnesses(calls.members, in_turn)
    except PreconditionFailed:
        await calls.close()
        return False
    except StampError as exc:
        await calls.close()
        await p.stop(f"naming its witnesses failed, and may or may not have happened: {exc}")
        return False
    serve_with(p, calls)
    return True


async def repick(p: RangePartition, old: OwnerCalls, silent: Collection[str]) -> bool:
    """The module's `repick`."""
    if p.witnesses is not old or p.gone() or p.state != SERVING:
        return False
    next_generation = generation(old.epoch) + 1
    if next_generation >= 1 << GENERATION_BITS:
        log.warning("partition %d: no witness set left to pick until it is loaded again",
                    p.id)
        return False
    if not old.abandoned:
        nodes = [n for n in await p.client.sm.list_nodes() if n.address not in silent]
        if pick(nodes, p.id, log_replicas(p)) is None:
            log.debug("partition %d: witnesses %s silent, and no set without them", p.id,
                      sorted(silent))
            return False
        # From here on the old set is given up for good: the new one's fence may reach some
        # of its members, whose List and Drop at the old epoch then see nothing.
        old.abandoned = True
        p.committer.speculation.epoch = 0
        log.warning("partition %d: witnesses %s silent: moving to another set", p.id,
                    sorted(silent))
    try:
        await p.committer.speculation.until_all_durable()
        new = await fenced_set(p, set_epoch(p.epoch, next_generation), exclude=silent)
    except StampError as exc:
        log.info("partition %d: no other witness set yet: %s", p.id, exc)
        return False
    if new is None:
        return False
    if not await _name(p, new, lambda: p.witnesses is old):
        return False
    log.info("partition %d: moved to witnesses %s (set epoch %d)", p.id,
             list(new.members.addresses), new.epoch)
    await old.close()  # its sweep, which called this, ends as it sees the new set
    return True
