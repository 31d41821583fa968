"""A loaded partition's CURP recovery and its own witnesses (issue 32, curp.py steps 2 and 7),
run by its server right after `RangePartition.load` and before anyone else is let in.

`recover(partition)`:
1. Executes the records the witnesses of the newest metadata held (fenced by the load,
   before the commit log was replayed), in any order — they commute — each as its request
   would be (partition_layer/requests.py), with the version its hint gives
   (speculation.replay_version). A write already in the commit log is answered from its
   token and writes nothing; a refusal writes nothing either. Each is answered only once
   durable (a recovered write is never answered early), so when the last answer is in,
   every acknowledged write the witnesses held is in the commit log.
2. Picks this owner's witnesses (witness_repick.fenced_set; none while CURP is off or the
   stamp has fewer than three fault domains alive), fences and clears them with its first
   set epoch (witness_set.set_epoch; stale records of older owners there would refuse new
   ones), and records them in a metadata
   record: only now, since that record stops the next owner from fencing the old set.
3. Clears the old set (records below this epoch: all durable now), serves with its own
   (witness_repick.serve_with: early answers, drops, the sweep) and lets requests in.

A failure at any step — a record that could not be executed (any error but the write's own
refusal, FINAL_REFUSALS), the lease running out — leaves the partition to be stopped by its
server and loaded again: nothing is lost, since the newest metadata still names the set
that holds the records.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from common.errors import Unavailable
from common.proto import partition_pb2 as pb
from partition_layer.requests import handle, route_key
from partition_layer.speculation import replaying
from partition_layer.witness_repick import fenced_set, pick_later, serve_with
from partition_layer.witness_set import set_epoch

if TYPE_CHECKING:
    from partition_layer.partition import RangePartition

log = logging.getLogger(__name__)

# Answers to a witnessed write that are its own, for good (the fast path takes only writes
# whose refusals never flip: curp.py step 3). Any other error (NotOwner as the lease runs
# out, Unavailable, a checksum error reading a checkpoint...) means it was not executed: the
# recovery fails rather than go on and name another set without it.
FINAL_REFUSALS = frozenset({"Sealed", "InvalidArgument"})


async def recover(p: RangePartition) -> None:
    """The module's steps 1-3 for `p`, loaded and `recovering`."""
    if not p.recovering:
        return
    executed = await _execute(p)
    if not p.lease_valid():  # before the old set is named no more, and cleared
        raise Unavailable(f"partition {p.id}: its lease ran out while it recovered")
    own = await fenced_set(p, set_epoch(p.epoch)) if p.limits.curp else None
    assert p.meta is not None
    if own is not None or p.meta.witnesses is not None:  # CURP off: no record to write
        await p.checkpointer.record_witnesses(None if own is None else own.members)
    if p.fenced_witnesses is not None:
        # Best effort: what they hold is durable now; a witness missed keeps it until
        # another owner of a set it is in fences and clears it.
        with contextlib.suppress(Unavailable):
            await p.fenced_witnesses.clear()
    if own is not None:
        serve_with(p, own)
    elif p.limits.curp:
        pick_later(p)
    p.recovering = False
    if executed or own is not None:
        log.info("partition %d: %d writes executed from its witnesses; its own: %s", p.id,
                 executed, "none" if own is None else list(own.members.addresses))


async def _execute(p: RangePartition) -> int:
    records, p.witnessed = p.witnessed, []
    token = replaying.set(True)
    try:
        for record in records:
            request = pb.Request.FromString(record.payload)
            if not p.range.contains(route_key(request.account, request.pname)):
                log.warning("partition %d: a witness held a write outside its range, for %r",
                            p.id, request.pname)
                continue
            response = await handle(request, lambda _key: p, p.limits)
            if response.error in FINAL_REFUSALS:  # an answer like any other: refused
                log.debug("partition %d: a witnessed write was refused: %s %s", p.id,
                          response.error, response.message)
            elif response.error:  # not executed, for now: the load fails, the set stays
                raise Unavailable(f"partition {p.id}: a write its witnesses held could not "
                                  f"be executed ({response.error}: {response.message})")
    finally:
        replaying.reset(token)
    if p.gone():
        raise Unavailable(f"partition {p.id} stopped while it executed its witnesses' writes")
    return len(records)
