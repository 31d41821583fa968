"""A deterministic in-process network for DurableReplica groups (common/raft.py): replicas
run without tick threads, every Raft message waits in a queue until the test delivers or
drops it, so a test can put several batches in flight and choose what arrives.

Messages are pickled on send (as the TCP transport does), and the sender's journal is synced
before a message is queued: the same promise DurableTransport keeps (nothing leaves a
replica before what it implies is durable).
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pysyncobj import SyncObj, replicated
from pysyncobj.transport import Transport

from common.raft import DurableReplica, RaftTuning
from common.raft_journal import DurableJournal


@dataclass
class Message:
    source: str
    target: str
    body: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body.get("type"))


class InProcessNetwork:
    def __init__(self) -> None:
        self.transports: dict[str, InProcessTransport] = {}
        self.queue: list[Message] = []

    def deliver(self, keep: Callable[[Message], bool] = lambda m: True) -> int:
        """Deliver, in order, the queued messages `keep` accepts; leave the others queued.
        Returns how many were delivered."""
        taken = [m for m in self.queue if keep(m)]
        self.queue = [m for m in self.queue if not keep(m)]
        for message in taken:
            target = self.transports.get(message.target)
            if target is not None:
                target.receive(message)
        return len(taken)

    def settle(self) -> None:
        """Deliver until nothing is queued (replies cause no further messages)."""
        while self.deliver():
            pass

    def drop(self, doomed: Callable[[Message], bool]) -> None:
        self.queue = [m for m in self.queue if not doomed(m)]

    def inject(self, source: str, target: str, body: dict[str, Any]) -> None:
        self.queue.append(Message(source, target, body))

    def disconnect(self, address: str) -> None:
        """`address` is gone (killed): its queued messages and everything sent to it later
        are lost."""
        self.transports.pop(address, None)
        self.drop(lambda m: address in (m.source, m.target))


class InProcessTransport(Transport):
    def __init__(self, sync_obj: SyncObj, self_node: Any, other_nodes: Any, *,
                 journal: DurableJournal, network: InProcessNetwork) -> None:
        super().__init__(sync_obj, self_node, other_nodes)
        self._journal = journal
        self._network = network
        self._address = str(self_node.id)
        self._nodes = {str(node.id): node for node in other_nodes}
        network.transports[self._address] = self

    def connect_all(self) -> None:
        for node in self._nodes.values():
            self._onNodeConnected(node)

    def send(self, node: Any, message: Any) -> bool:
        if self._address not in self._network.transports:
            return False
        self._journal.sync()
        self._network.queue.append(Message(self._address, str(node.id),
                                           pickle.loads(pickle.dumps(message))))
        return True

    def receive(self, message: Message) -> None:
        self._onMessageReceived(self._nodes[message.source], message.body)


class ValuesReplica(DurableReplica):
    """The smallest replicated state: the list of values applied, in log order."""

    def __init__(self, address: str, peers: list[str], raft_dir: Path, tuning: RaftTuning,
                 network: InProcessNetwork) -> None:
        self.values: list[bytes] = []

        def transport(sync_obj: SyncObj, self_node: Any, other_nodes: Any, *,
                      journal: DurableJournal) -> InProcessTransport:
            return InProcessTransport(sync_obj, self_node, other_nodes, journal=journal,
                                      network=network)
        super().__init__(address, peers, raft_dir, tuning, make_transport=transport)
        network.transports[address].connect_all()

    @replicated
    def add_value(self, value: bytes) -> int:
        self.values.append(value)
        return len(self.values)

    def snapshot_state(self) -> bytes:
        return pickle.dumps(self.values)

    def restore_state(self, blob: bytes) -> None:
        self.values = pickle.loads(blob)


def tuning(*, first_leader: bool) -> RaftTuning:
    """No tick thread; nobody but `first_leader` ever times out by itself (a test moves
    leadership with a timeout_now message), and no leader steps down for silence."""
    timeout_s = (0.05, 0.06) if first_leader else (10_000.0, 20_000.0)
    return RaftTuning(election_timeout_min_s=timeout_s[0], election_timeout_max_s=timeout_s[1],
                      heartbeat_interval_s=0.01, leader_fallback_s=100_000.0,
                      connection_timeout_s=100_000.0,
                      tick_thread=False)


def run_until(replicas: list[ValuesReplica], network: InProcessNetwork,
              done: Callable[[], bool], what: str, timeout_s: float = 30.0,
              keep: Callable[[Message], bool] = lambda m: True) -> None:
    """Tick every replica and deliver what `keep` accepts until `done()`, or fail."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        for replica in replicas:
            replica.doTick(0.001)
        network.deliver(keep)
