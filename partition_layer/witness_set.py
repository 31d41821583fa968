"""A range partition's CURP witnesses (issue 32, partition_layer/curp.py steps 2 and 7): which
three extent nodes an owner picks, how the set is kept in the partition's metadata record, and
the owner's calls to them (fence, clear, drop).

Contracts:
- `pick(nodes, partition_id, avoid)`: three live, unsuspected nodes in three different
  fault domains, or None when the stamp has fewer such domains (the partition then has no
  witnesses: every write takes the sync path). Spread by partition id: the domains are
  rotated by it, and within each domain a node is chosen by it — among those not in
  `avoid` where the domain has any — so partitions land on different nodes. Pure.
- `WitnessSet` is what a metadata record keeps: the set's epoch (`set_epoch`: the owner's
  and which of its sets; the epoch front ends name in `Request.curp_epoch`, and witnesses
  fence by) and the nodes' addresses.
- `OwnerCalls.fence()` fences every witness of a set with the loading owner's epoch and
  returns the records held (all of them: any one witness holds every acknowledged write),
  deduplicated by token; Unavailable unless at least one witness answered (an acknowledged
  write could otherwise be missed). `clear()` drops the records of older owners wherever it
  can (a witness that missed it is cleared by a later owner's fence and clear).
  `drop(tokens)` tells every witness, without waiting, that those writes are durable: one
  Drop per witness in flight, the tokens of the blocks made durable meanwhile in the next.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from common import rpc
from common.errors import StampError, Unavailable
from common.proto import witness_pb2 as wpb
from common.proto import witness_pb2_grpc as wpb_grpc

log = logging.getLogger(__name__)

WITNESSES = 3
# A set's epoch: its owner's epoch in the high bits and, in the low ones, which of that
# owner's sets it is (an owner picks another when a member is lost: witness_repick.py). So
# every set of a newer owner is above every set of an older one, which fences compare, and
# an owner's later set above its earlier ones.
GENERATION_BITS = 16
CALL_TIMEOUT_S = 2.0
MESSAGE_BYTES_MAX = 64 << 20  # a Fence answers a whole partition's records
DROP_TOKENS_MAX = 1024  # per Drop call (the witnesses' ExtentNodeLimits.witness_call_records_max)
DROPPING_MAX = 64 * DROP_TOKENS_MAX  # tokens waiting per witness (OwnerCalls.drop)


def set_epoch(owner: int, generation: int = 0) -> int:
    assert 0 <= generation < 1 << GENERATION_BITS, generation
    return owner << GENERATION_BITS | generation


def owner_epoch(epoch: int) -> int:
    """The owner epoch of a set's epoch (`set_epoch`)."""
    return epoch >> GENERATION_BITS


def generation(epoch: int) -> int:
    return epoch & ((1 << GENERATION_BITS) - 1)


class Node(Protocol):
    """What `pick` reads of a stream manager's NodeInfo."""

    name: str
    address: str
    fault_domain: str
    state: str
    suspect: bool


@dataclass(frozen=True)
class WitnessSet:
    epoch: int  # set_epoch(the owner epoch that picked it, which of its sets)
    addresses: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "addresses": list(self.addresses)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WitnessSet:
        return cls(int(d["epoch"]), tuple(str(a) for a in d["addresses"]))


def pick(nodes: Iterable[Node], partition_id: int, avoid: Collection[str] = ()
         ) -> tuple[str, ...] | None:
    """Three witnesses for `partition_id` (module contract), in each domain among the nodes
    not in `avoid` if it has any (the partition's commit-log replicas: a node that is both
    handles each fast write twice at once, its record and the block's append)."""
    domains: dict[str, list[Node]] = {}
    for node in nodes:
        if node.state == "alive" and not node.suspect:
            domains.setdefault(node.fault_domain, []).append(node)
    if len(domains) < WITNESSES:
        return None
    names = sorted(domains)
    start = partition_id % len(names)
    chosen = []
    for i in range(WITNESSES):
        members = sorted(domains[names[(start + i) % len(names)]], key=lambda n: n.name)
        members = [n for n in members if n.address not in avoid] or members
        chosen.append(members[(partition_id // len(names)) % len(members)].address)
    return tuple(chosen)


class OwnerCalls:
    """The calls an owner makes to the witnesses of one set (module contract)."""

    def __init__(self, channels: rpc.ChannelCache, witnesses: WitnessSet, partition_id: int,
                 epoch: int) -> None:
        self.channels = channels
        self.members = witnesses
        self.partition_id = partition_id
        self.epoch = epoch
        # Per witness: tokens to drop, not yet sent (`drop`), and the task sending them.
        self._dropping: dict[str, list[bytes]] = {a: [] for a in witnesses.addresses}
        self._droppers: dict[str, asyncio.Task[None]] = {}
        # Set by the owner's sweep of this set (witness_sweep.py), which runs among `tasks`;
        # `abandoned` once a newer set was fenced over some of its members (its List and
        # Drop see nothing there any more: witness_repick.py).
        self.swept_at: float | None = None
        self.abandoned = False
        self.safe_versions: Any = None  # witness_sweep.SafeVersions
        self.tasks: set[asyncio.Task[None]] = set()

    def _stub(self, address: str) -> wpb_grpc.WitnessStub:
        return wpb_grpc.WitnessStub(self.channels.get(address))

    async def fence(self, every: bool = False) -> list[wpb.WitnessRecord]:
        """`every`: Unavailable unless every witness answered (a set about to be used)."""
        request = wpb.FenceRequest(partition_id=self.partition_id, epoch=self.epoch)
        answers = await self._each("Fence", request, every)
        records: dict[bytes, wpb.WitnessRecord] = {}
        for answer in answers:
            for record in answer.records:
                records.setdefault(record.token, record)
        return list(records.values())

    async def clear(self, every: bool = False) -> None:
        await self._each("Clear", wpb.ClearRequest(partition_id=self.partition_id,
                                                   epoch=self.epoch), every)

    async def _each(self, method: str, request: Any, every: bool) -> list[Any]:
        """`method` at every witness at once: the answers of those that answered;
        Unavailable if none did (or, `every`, if one did not)."""
        calls = [rpc.call(getattr(self._stub(a), method)(request, timeout=CALL_TIMEOUT_S))
                 for a in self.members.addresses]
        answers = await asyncio.gather(*calls, return_exceptions=True)
        got = []
        for address, answer in zip(self.members.addresses, answers, strict=True):
            if isinstance(answer, BaseException):
                log.warning("partition %d: witness %s: %s failed: %s", self.partition_id,
                            address, method, answer)
            else:
                got.append(answer)
        if not got or (every and len(got) < len(answers)):
            raise Unavailable(f"partition {self.partition_id}: {method} answered by "
                              f"{len(got)} of its witnesses {list(self.members.addresses)}")
        return got

    def drop(self, tokens: Sequence[bytes]) -> None:
        """Queue `tokens` for dropping. One Drop per witness is in flight at a time, each
        witness on its own (a slow one holds up no other's): what blocks make durable
        meanwhile goes in the next one (a Drop per block and witness would be three RPCs for
        every block). At most DROPPING_MAX wait per witness, the oldest given up past it:
        the owner's sweep drops what these miss."""
        if not tokens:
            return
        for address, queue in self._dropping.items():
            queue += tokens
            if len(queue) > DROPPING_MAX:
                del queue[:len(queue) - DROPPING_MAX]
            if address not in self._droppers:
                self._droppers[address] = asyncio.get_running_loop().create_task(
                    self._drop_queued(address))

    async def _drop_queued(self, address: str) -> None:
        queue = self._dropping[address]
        try:
            while queue:
                tokens = queue[:DROP_TOKENS_MAX]
                del queue[:DROP_TOKENS_MAX]
                await self._drop(address, wpb.DropRequest(
                    partition_id=self.partition_id, epoch=self.epoch, tokens=tokens))
        finally:
            del self._droppers[address]

    async def _drop(self, address: str, request: wpb.DropRequest) -> None:
        try:
            await rpc.call(self._stub(address).Drop(request, timeout=CALL_TIMEOUT_S))
        except StampError as exc:  # its records come back to a recovery, deduplicated there
            log.debug("partition %d: drop at witness %s: %s", self.partition_id, address, exc)

    async def close(self) -> None:
        """Its drops and sweep end (but the task calling this, a sweep that moved on)."""
        tasks = [task for task in (*self.tasks, *self._droppers.values())
                 if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
