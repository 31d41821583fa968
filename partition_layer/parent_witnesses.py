"""CURP step 8 (issue 32, partition_layer/curp.py): once a split or merge committed, its
parents' records leave the witnesses for good — `DropPartition(parent id)` at the extent
nodes, which forget the id's records and refuse everything sent for it from then on (a
tombstone: stream_layer/extent_node/witness_table.py).

Who sends it, and when: the partition manager, in `SplitMergeCoordinator._publish`
(manager_ops.py), before it writes the map that publishes the children and forgets the
pending op. Why there and not on the parent's owner, the server that runs the split's steps:
- Only after the commit. `_publish` runs only for an op known committed: its server answered
  Split / Merge (split_merge.py answers once the multi-modify is done), or the stream
  manager holds the op's first new stream (manager_ops.committed). An op rolled back never
  gets there, so a parent that serves on keeps its records (they may be writes it answered
  early and has not synced).
- Only once the parent drained: a commit implies it. The server writes the intent only after
  `_quiesce` stopped the parent admitting, settled its committer (no block in flight: every
  write answered early is durable, or the parent stopped and the split failed) and
  checkpointed it fully (split_merge.py asserts both), and the multi-modify that commits
  fences the parent's streams at its epoch (no newer owner of the parent can exist). So
  every acknowledged write of the parent is in the children's runs, and each record left
  is garbage: a write durable already (its Drop not yet done), or one the parent never
  executed (sent to it after it stopped admitting, or lost on the way: never acknowledged,
  and a retry of it goes to a child under the child's id).
- It survives a crash between the commit and the call: the pending op stays in the map (the
  lock service) until after the call, so a manager that dies first is succeeded by a leader
  whose pass finds the op pending and committed and publishes it (pending_resolution
  PUBLISH), calling again; DropPartition is idempotent. The parent's owner could not be
  relied on to redo it: after its server dies past the commit the manager publishes without
  calling any server again, and nobody ever loads the parent again. Nor could an owner's
  sweep (step 6) cover it: no owner sweeps an id that is gone.
- A failed call does not fail the op: each failure is logged and the publish goes on. A node
  missed (down, or cut off for CALL_TIMEOUT_S) keeps the parent's records — the leak this
  step closes, now only for a node away at that moment.

Whom: every extent node the stream manager lists, not only the three the parent's newest
metadata names. The manager reads no partition metadata; and the parent's records may also
sit at witnesses of an older set, since a recovering owner clears the set it fenced only as
best it can (witness_replay.py step 3), and a witness it missed is cleared by no one once
the id is gone. The cost: one small durable call per node and parent, all at once, per
split or merge; the tombstone is one int per node.

When nothing is sent: CURP off (`[partition] curp` false: no owner picks witnesses, so no
partition's metadata names a set; a set named before CURP went off is cleared by the first
owner that loads it since), or no stream manager to list the nodes (a manager started
without one: logged).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from typing import Protocol

from common import rpc
from common.errors import StampError
from common.proto import witness_pb2 as wpb
from common.proto import witness_pb2_grpc as wpb_grpc
from partition_layer.witness_set import CALL_TIMEOUT_S
from stream_layer.sm_client import AsyncStreamManagerClient

log = logging.getLogger(__name__)

MESSAGE_BYTES_MAX = 1 << 20  # a DropPartition and its answer are a few bytes


class Node(Protocol):
    """What `targets` reads of a stream manager's NodeInfo."""

    address: str


def targets(nodes: Iterable[Node]) -> list[str]:
    """The addresses a parent's DropPartition goes to: every node listed, whatever its
    state (one down now may answer: the call costs it at most CALL_TIMEOUT_S, in parallel),
    each once."""
    return sorted({node.address for node in nodes if node.address})


class ParentWitnesses:
    """The partition manager's DropPartition calls (module docstring)."""

    def __init__(self, channels: rpc.ChannelCache | None = None) -> None:
        self.channels = channels or rpc.ChannelCache(MESSAGE_BYTES_MAX)

    async def drop(self, sm: AsyncStreamManagerClient | None, parent_ids: Sequence[int], *,
                   curp: bool) -> list[str]:
        """Tell every extent node to drop each of `parent_ids` for good (with `curp`, the
        stamp's `[partition] curp`; without, nothing); the addresses that took them all.
        Never raises a StampError: a failure is logged (module docstring)."""
        if not curp or not parent_ids:
            return []
        if sm is None:
            log.warning("partitions %s: no stream manager to list the witnesses: their "
                        "records stay", list(parent_ids))
            return []
        try:
            addresses = targets(await sm.list_nodes())
        except StampError as exc:
            log.warning("partitions %s: the witnesses were not told to drop them (listing "
                        "the extent nodes failed: %s): their records stay", list(parent_ids),
                        exc)
            return []
        told = await asyncio.gather(*(self._drop_at(a, parent_ids) for a in addresses))
        dropped = [a for a, ok in zip(addresses, told, strict=True) if ok]
        log.info("partitions %s dropped at %d of %d witnesses", list(parent_ids),
                 len(dropped), len(addresses))
        return dropped

    async def _drop_at(self, address: str, parent_ids: Sequence[int]) -> bool:
        """Whether the node at `address` dropped every one of `parent_ids` (all at once: each
        call waits for the witness's journal)."""
        stub = wpb_grpc.WitnessStub(self.channels.get(address))
        answers = await asyncio.gather(*(rpc.call(stub.DropPartition(
            wpb.DropPartitionRequest(partition_id=parent_id), timeout=CALL_TIMEOUT_S))
            for parent_id in parent_ids), return_exceptions=True)
        failed = [a for a in answers if isinstance(a, BaseException)]
        for failure in failed:
            if not isinstance(failure, StampError):
                raise failure  # a bug, or cancelled: not a witness's answer
        if failed:
            log.warning("partitions %s: witness %s did not drop them all: %s: their records "
                        "stay there", list(parent_ids), address, failed[0])
        return not failed

    async def close(self) -> None:
        await self.channels.close()
