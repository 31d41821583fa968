"""The balance pass (split17 design, "Load and policy"): every
`partition_manager.balance_interval_s` the leading partition manager builds a load snapshot
from the heartbeats and the map, asks the policy (`partition_manager.policy`, one class,
balance_policy.py) what to do, and runs at most `actions_per_pass_max` of its actions
through the manager's own split, merge and move, each with the action's trigger.

Contract: a failed action is logged and recorded in the history ("failed: why"), never ends
the loop; the policy is a pure function of the snapshot, so `stamp partition balance
--dry-run` shows exactly what a pass would do now, and why.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from common.clock import Clock
from common.config import PartitionManagerConfig
from common.errors import InvalidArgument, StampError
from common.proto import partition_pb2 as pb
from partition_layer.balance_policy import Action, LoadSnapshot, load_policy, snapshot_from
from partition_layer.history import HistoryEntry, HistoryStore, changed_at, moved_at
from partition_layer.manager_ops import SplitMergeCoordinator
from partition_layer.map_store import LeaderMap
from partition_layer.partition_map import PartitionMap

log = logging.getLogger(__name__)


class BalanceSite(Protocol):
    """What the balance pass needs of its partition manager besides the map (`LeaderMap`,
    passed on its own) — manager.PartitionManager is one: this module does not import the
    manager, which imports it. Its actions run through the manager's own split, merge
    (`ops`) and move."""

    name: str
    history: HistoryStore
    ops: SplitMergeCoordinator

    def is_leader(self) -> bool: ...

    async def require_leader(self) -> None: ...

    async def live(self) -> dict[str, str]: ...

    def partition_loads(self) -> dict[int, pb.PartitionLoad]:
        """The latest heartbeat's load of every partition served."""

    async def move(self, partition_id: int, server: str, trigger: str) -> object: ...

    async def record(self, entry: HistoryEntry) -> None: ...


class Balancer:
    def __init__(self, manager: BalanceSite, maps: LeaderMap,
                 config: PartitionManagerConfig, clock: Clock) -> None:
        self.manager = manager
        self.maps = maps
        self.config = config
        self.clock = clock
        self.policy = load_policy(config)

    async def snapshot(self, current: PartitionMap | None = None) -> LoadSnapshot:
        m = self.manager
        if current is None:
            current, _ = await self.maps.current()
        live = await m.live()
        history = await asyncio.to_thread(m.history.read)
        busy = {i for op in current.pending for i in op.sources} | m.ops.busy
        return snapshot_from(current, m.partition_loads(), live, changed_at(history),
                             self.clock.wall(), pending=busy, moved_at=moved_at(history))

    async def split_key(self, partition_id: int, current: PartitionMap) -> bytes:
        """The policy's split key for the partition, from its latest heartbeat."""
        if partition_id not in self.manager.partition_loads():
            raise InvalidArgument(f"no heartbeat has reported partition {partition_id} yet: "
                                  f"give --key ACCOUNT/PARTITION_NAME, or try again in a moment")
        snapshot = await self.snapshot(current)
        part = next(p for p in snapshot.partitions if p.id == partition_id)
        key, why = self.policy.split_key(part)
        if key is None:
            raise InvalidArgument(f"the policy has no split key for partition {partition_id}: "
                                  f"{why}; give --key ACCOUNT/PARTITION_NAME")
        return key

    async def balance(self, dry_run: bool) -> pb.BalanceReply:
        """The policy's decision for the current snapshot; unless `dry_run`, run it (at most
        actions_per_pass_max actions)."""
        await self.manager.require_leader()
        current, _ = await self.maps.current()
        decision = self.policy.decide(await self.snapshot(current))
        actions, skipped = [], list(decision.skipped)
        for action in decision.actions[:self.config.actions_per_pass_max]:
            busy = [i for i in action.partition_ids
                    if current.pending_for(i) is not None or i in self.manager.ops.busy]
            if busy:
                skipped.append(f"{action.op} {action.partition_ids}: a split or merge of "
                               f"{busy} is under way")
            else:
                actions.append(action)
        reply = pb.BalanceReply(skipped=skipped, actions=[
            pb.BalanceAction(op=a.op, partition_ids=a.partition_ids, key=a.key, server=a.server,
                             trigger=a.trigger, reason=a.reason) for a in actions])
        if not dry_run:
            for action in actions:
                await self.run_action(action)
        return reply

    async def run_action(self, action: Action) -> bool:
        """Run one action through the manager; a failure is logged and recorded."""
        m = self.manager
        log.info("%s: balance: %s %s (%s)", m.name, action.op, action.partition_ids,
                 action.reason)
        started_at = self.clock.wall()
        try:
            if action.op == "split":
                await m.ops.split(action.partition_ids[0], action.key or None, action.trigger)
            elif action.op == "merge":
                await m.ops.merge(action.partition_ids[0], action.partition_ids[1],
                                  action.trigger)
            elif action.op == "move":
                await m.move(action.partition_ids[0], action.server, trigger=action.trigger)
            else:
                raise InvalidArgument(f"the policy asked for an unknown action {action.op!r}")
            return True
        except StampError as exc:
            log.warning("%s: balance: %s %s failed: %s", m.name, action.op,
                        action.partition_ids, exc)
            await m.record(HistoryEntry(action.op, action.trigger, action.partition_ids, (),
                                        started_at, seconds=self.clock.wall() - started_at,
                                        result=f"failed: {exc}", key=action.key,
                                        server=action.server))
            return False

    async def run_forever(self) -> None:
        """The pass, on the leader only. Nothing it meets ends it: an unexpected exception is
        logged with its traceback and the next pass runs."""
        if self.config.balance_interval_s <= 0:
            return  # turned off (the Balance RPC still answers)
        while True:
            await asyncio.sleep(self.config.balance_interval_s)
            if not self.manager.is_leader():
                continue
            try:
                await self.balance(dry_run=False)
            except StampError as exc:
                log.warning("%s: balance pass failed: %s", self.manager.name, exc)
            except Exception:  # a policy bug must not stop balancing for good
                log.exception("%s: balance pass failed unexpectedly", self.manager.name)

