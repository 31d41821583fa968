"""Balancing policies for probe tests (named in a stamp's `partition_manager.policy`, so the
PM process imports them): each misbehaves in a way the balance pass must survive."""

from __future__ import annotations

from common.config import PartitionManagerConfig
from partition_layer.balance_policy import (
    Action,
    Decision,
    DefaultPolicy,
    LoadSnapshot,
    PartitionSnapshot,
)


class FailingPolicy(DefaultPolicy):
    """Odd passes: actions that fail at the manager (a split at a key that is not a
    partition name's first key, a move to a server that does not exist). Even passes: an
    exception, as a policy bug would throw."""

    def __init__(self, config: PartitionManagerConfig) -> None:
        super().__init__(config)
        self.passes = 0

    def decide(self, snapshot: LoadSnapshot) -> Decision:
        self.passes += 1
        if self.passes % 2 == 0:
            raise RuntimeError(f"policy bug on pass {self.passes}")
        first = snapshot.partitions[0]
        return Decision((
            Action("split", (first.id,), key=b"\x00\x07", trigger="load",
                   reason="test: not a partition name's first key"),
            Action("move", (first.id,), server="ps-nowhere", trigger="load",
                   reason="test: no such server")), ())

    def split_key(self, partition: PartitionSnapshot) -> tuple[bytes | None, str]:
        return None, "test policy"
