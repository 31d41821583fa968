"""A split or merge under way, as the partition map records it (split17 design, "Ids and
the map"): written into the map before the PS is asked, so whoever leads next finds it and
publishes or rolls it back (manager_ops.py). Also the rule a split key obeys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from common.errors import InvalidArgument
from partition_layer import keys

if TYPE_CHECKING:
    from partition_layer.partition_map import PartitionEntry

OP_SPLIT = "split"
OP_MERGE = "merge"


@dataclass(frozen=True)
class PendingOp:
    """A split (parent -> left, right at key) or merge (left, right -> merged) under way on
    `server`. `attempts`: PS calls that failed so far (the roll-back bound counts them across
    leader changes, so it is stored)."""
    op: str
    server: str
    left: int
    right: int
    parent: int = 0      # split
    key: bytes = b""     # split: the right child's first key
    merged: int = 0      # merge
    trigger: str = ""
    started_at: float = 0.0
    attempts: int = 0

    def __post_init__(self) -> None:
        if self.op == OP_SPLIT:
            ok = self.parent > 0 and self.key != b"" and self.merged == 0
        elif self.op == OP_MERGE:
            ok = self.merged > 0 and self.parent == 0 and not self.key
        else:
            ok = False
        if not ok or self.left <= 0 or self.right <= 0 or self.left == self.right:
            raise InvalidArgument(f"not a valid pending operation: {self}")

    @property
    def sources(self) -> tuple[int, ...]:
        """The partitions the op consumes: they stay in the map until it is published."""
        return (self.parent,) if self.op == OP_SPLIT else (self.left, self.right)

    @property
    def results(self) -> tuple[int, ...]:
        """The new ids it makes (allocated, not yet in the map)."""
        return (self.left, self.right) if self.op == OP_SPLIT else (self.merged,)

    def to_dict(self) -> dict[str, Any]:
        common = {"op": self.op, "left": self.left, "right": self.right,
                  "server": self.server, "trigger": self.trigger,
                  "started_at": self.started_at, "attempts": self.attempts}
        if self.op == OP_SPLIT:
            return {**common, "parent": self.parent, "key": self.key.hex()}
        return {**common, "merged": self.merged}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PendingOp:
        return cls(op=data["op"], server=data.get("server", ""), left=data["left"],
                   right=data["right"], parent=data.get("parent", 0),
                   key=bytes.fromhex(data.get("key", "")), merged=data.get("merged", 0),
                   trigger=data.get("trigger", ""), started_at=data.get("started_at", 0.0),
                   attempts=data.get("attempts", 0))


def split_key_problem(entry: PartitionEntry, key: bytes) -> str | None:
    """Why `key` cannot split `entry` (None: it can). A split key is strictly inside the
    range and is the first key of a partition name, so a split never cuts a name (a log, or
    an entity group whose batches are atomic)."""
    if not (entry.low < key and (entry.high is None or key < entry.high)):
        return (f"key {show_key(key)} is not strictly inside partition {entry.id}'s range "
                f"[{show_key(entry.low)}, {show_key(entry.high)})")
    try:
        account, pname, _, _ = keys.decode_key(key)
    except InvalidArgument:
        return f"key {key.hex()} is not an encoded key"
    if key != keys.encode_key(account, pname, keys.KIND_META, b""):
        return (f"key {key.hex()} is not the first key of a partition name "
                f"({account}/{pname}): a split never cuts a name")
    return None


def show_key(key: bytes | None) -> str:
    """A range bound as an operator reads it: account/partition_name when it is a name's
    first key, else hex; -inf and +inf for the ends."""
    if key is None:
        return "+inf"
    if not key:
        return "-inf"
    try:
        account, pname, _, _ = keys.decode_key(key)
    except InvalidArgument:
        return key.hex()
    if key == keys.encode_key(account, pname, keys.KIND_META, b""):
        return f"{account}/{pname}"
    return key.hex()
