"""The balancing policy (§4, issue 17): what the PM's balancing pass does now, and why.

Contract: a policy is a class named in the config (`partition_manager.policy`), built with the
PartitionManagerConfig; `decide` is a pure function of a LoadSnapshot (no clock, no I/O: the
snapshot carries the ages), returning at most `actions_per_pass_max` actions, each with a
one-line reason that carries the numbers, and the candidates it refused with why; no
partition appears in two actions of one pass. `split_key` names the key a split of one
partition should use: the load finder's (load_finder.py), else the key that halves its data,
always a partition name's first key strictly inside its range. The PM runs the actions
through its own split / merge / move (manager*.py); the policy only decides.

DefaultPolicy, in this order (each rule only on partitions served by a live PS, settled, and
not in an action already):
1. hot: a partition at or above split_ops_per_s_min or split_bytes_per_s_min is split at its
   load key (trigger "load");
2. balance: while a PS's load (ops/s) is above mean * balance_load_ratio_max (and above the
   least loaded by balance_ops_per_s_min), it gives the least loaded PS the partition whose
   move leaves both nearest the mean and within the ratio (a partition moved within the
   cooldown: within half of it, so noise does not move it back; one just split for this
   moves as soon as it settled); when no such move exists
   and its hottest partition carries more than half the gap, that partition is cut at the
   load key that gives one side half the gap (trigger "load": a half when the other PS is
   idle), and that side is moved by a later pass;
3. size: a partition of split_size_bytes_min or more is split at its size key ("size");
4. count: while there are more partitions than the low watermark, the coldest adjacent pair
   of cold partitions is merged ("count").
No split at or above the high watermark; no split or merge of a partition changed less than
cooldown_s ago (a range just split is not merged back, nor a merged one split again).
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from common.config import PartitionManagerConfig
from common.errors import InvalidArgument, StampError
from common.proto import partition_pb2 as pb
from partition_layer import keys
from partition_layer.load_finder import best_key, sample_of
from partition_layer.partition_map import PartitionMap


@dataclass(frozen=True)
class PartitionSnapshot:
    id: int
    low: bytes
    high: bytes | None
    server: str  # "" while unassigned
    ops_per_s: float = 0.0
    bytes_per_s: float = 0.0
    p99_ms: float = 0.0
    queue_ops: int = 0
    size_bytes: int = 0
    samples: tuple[tuple[bytes, int, int, int], ...] = ()  # (key, left, right, contained)
    requests_sampled: int = 0
    size_split_key: bytes | None = None
    changed_s_ago: float | None = None  # since a split/merge/move made or touched it
    moved_s_ago: float | None = None  # since a move (to another PS) last touched it
    # A split or merge of it is under way: its load counts on its server, it is left alone.
    pending: bool = False


@dataclass(frozen=True)
class LoadSnapshot:
    servers: tuple[str, ...]                   # live PSs
    partitions: tuple[PartitionSnapshot, ...]  # key order, covering the key space


@dataclass(frozen=True)
class Action:
    op: str                         # split | merge | move
    partition_ids: tuple[int, ...]  # split/move: (id,); merge: (left, right)
    key: bytes = b""                # split
    server: str = ""                # move: to
    trigger: str = ""               # load | size | count
    reason: str = ""                # one line with the numbers


@dataclass(frozen=True)
class Decision:
    actions: tuple[Action, ...]
    skipped: tuple[str, ...]


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


def key_name(key: bytes) -> str:
    """A split key as an operator types it: account/partition_name."""
    try:
        account, pname, _kind, _row = keys.decode_key(key)
    except StampError:
        return key.hex()
    return f"{account}/{pname}"


class DefaultPolicy:
    def __init__(self, config: PartitionManagerConfig) -> None:
        self.config = config

    def split_key(self, partition: PartitionSnapshot) -> tuple[bytes | None, str]:
        """(key, "load" | "size"), or (None, why not)."""
        key, why = self.load_key(partition)
        if key is not None:
            return key, "load"
        size_key, why_not = self.size_key(partition)
        if size_key is not None:
            return size_key, "size"
        return None, f"{why}; {why_not}"

    def size_key(self, partition: PartitionSnapshot) -> tuple[bytes | None, str]:
        """(the key that about halves its data, how), or (None, why not)."""
        key = partition.size_split_key
        if not key:
            return None, "no size key"
        if not (partition.low < key and (partition.high is None or key < partition.high)):
            return None, f"size key {key_name(key)} is outside the range"
        return key, f"size key halving {mib(partition.size_bytes)}"

    def load_key(self, partition: PartitionSnapshot, share: float = 0.5
                 ) -> tuple[bytes | None, str]:
        """The load finder's key giving one side about `share` of the partition's load."""
        c = self.config
        return best_key(partition.samples, partition.low, partition.high,
                        c.finder_requests_min, c.finder_balance_score_max,
                        c.finder_contained_score_max, share)

    def decide(self, snapshot: LoadSnapshot) -> Decision:
        if not snapshot.servers:
            return Decision((), ("no live partition server",))
        plan = _Pass(self, snapshot)
        plan.hot_splits()
        plan.balance()
        plan.size_splits()
        plan.merges()
        return Decision(tuple(plan.actions), tuple(plan.skipped))


@dataclass
class _Pass:
    """One decision in the making: the actions so far and what they change."""

    policy: DefaultPolicy
    snapshot: LoadSnapshot
    actions: list[Action] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    used: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.config = self.policy.config
        live = set(self.snapshot.servers)
        self.count = len(self.snapshot.partitions)
        servers = len(self.snapshot.servers)
        self.low_watermark = self.config.partitions_per_server_low * servers
        self.high_watermark = self.config.partitions_per_server_high * servers
        self.served = [p for p in self.snapshot.partitions if p.server in live]
        # Each live PS's load as the actions so far leave it (a split leaves it unchanged).
        self.load = {s: 0.0 for s in self.snapshot.servers}
        for p in self.served:
            self.load[p.server] += p.ops_per_s

    # ---- guards -------------------------------------------------------------------------------

    def room(self) -> bool:
        return len(self.actions) < self.config.actions_per_pass_max

    def settled(self, p: PartitionSnapshot) -> bool:
        """Measured since its last change, and not being changed now: every rule asks."""
        return not p.pending and (p.changed_s_ago is None
                                  or p.changed_s_ago >= self.config.settle_s)

    def cool(self, p: PartitionSnapshot, what: str) -> bool:
        if p.changed_s_ago is not None and p.changed_s_ago < self.config.cooldown_s:
            self.skipped.append(f"{what}: partition {p.id} changed {p.changed_s_ago:.1f} s "
                                f"ago, cooldown {self.config.cooldown_s:g} s")
            return False
        return True

    def split(self, p: PartitionSnapshot, trigger: str, why: str, share: float = 0.5) -> bool:
        """Plan a split of `p` (load: at its load key, giving one side `share` of the load;
        size: at its size key)."""
        if not self.room() or p.id in self.used or not self.cool(p, f"split {p.id} ({trigger})"):
            return False
        if self.count >= self.high_watermark:
            self.skipped.append(f"split {p.id} ({trigger}): {self.count} partitions, at the "
                                f"high watermark {self.high_watermark}")
            return False
        key, how = self.policy.load_key(p, share) if trigger == "load" else \
            self.policy.size_key(p)
        if key is None:
            self.skipped.append(f"split {p.id} ({trigger}): {how}")
            return False
        sample = sample_of(p.samples, key)
        sides = f" (left {sample[1]}, right {sample[2]})" if sample and trigger == "load" else ""
        self.actions.append(Action("split", (p.id,), key=key, trigger=trigger, reason=(
            f"partition {p.id} on {p.server}: {why} -> split at {key_name(key)}{sides}: "
            f"{how}")))
        self.used.add(p.id)
        self.count += 1
        return True

    # ---- the rules ------------------------------------------------------------------------------

    def hot_splits(self) -> None:
        c = self.config
        for p in sorted(self.served, key=lambda p: -p.ops_per_s):
            if not self.settled(p):
                continue
            if p.ops_per_s >= c.split_ops_per_s_min or p.bytes_per_s >= c.split_bytes_per_s_min:
                self.split(p, "load", f"{p.ops_per_s:.0f} ops/s, {mib(p.bytes_per_s)}/s, "
                                      f"over {c.split_ops_per_s_min:g} ops/s or "
                                      f"{mib(c.split_bytes_per_s_min)}/s")

    def balance(self) -> None:
        c = self.config
        exhausted: set[str] = set()
        while self.room() and len(self.load) > 1:
            mean = sum(self.load.values()) / len(self.load)
            sources = [s for s in self.load if s not in exhausted]
            if not sources:
                return
            src = max(sources, key=lambda s: (self.load[s], s))
            dst = min((s for s in self.load if s != src), key=lambda s: (self.load[s], s))
            gap = self.load[src] - self.load[dst]
            if self.load[src] <= mean * c.balance_load_ratio_max or gap < c.balance_ops_per_s_min:
                return
            if not self.relieve(src, dst, mean):
                exhausted.add(src)

    def recently_moved(self, p: PartitionSnapshot) -> bool:
        return p.moved_s_ago is not None and p.moved_s_ago < self.config.cooldown_s

    def relieve(self, src: str, dst: str, mean: float) -> bool:
        """Plan one move from `src` to `dst`, or a cut of src's hottest partition; True: a
        move (src may give more in this pass)."""
        gap = self.load[src] - self.load[dst]
        figures = f"{src} {self.load[src]:.0f} ops/s, mean {mean:.0f}, {dst} {self.load[dst]:.0f}"
        mine = [p for p in self.served if p.server == src and p.id not in self.used
                and self.settled(p)]
        if not mine:
            self.skipped.append(f"balance {src}: {figures}; no settled partition to give")
            return False
        # A move narrows the gap by something (a tenth) and does not reverse it. One that
        # leaves both within the tolerance is taken; a partition moved within the cooldown
        # only if it lands within half of it (so noise in the figures does not move it back
        # and forth). A half just cut off to be given away goes as soon as it settled: the
        # figures of a fresh split are rough (the cut follows sampled requests), and waiting
        # out the cooldown for them kept a PS idle for 20 s.
        tolerance = self.config.balance_load_ratio_max - 1.0
        movable = [p for p in mine if 0.1 * gap <= p.ops_per_s < gap]
        fitting = [p for p in movable
                   if max(self.load[src] - p.ops_per_s, self.load[dst] + p.ops_per_s)
                   <= mean * (1.0 + (tolerance / 2 if self.recently_moved(p) else tolerance))]
        hottest = max(mine, key=lambda p: p.ops_per_s)
        if fitting:
            self.move(min(fitting, key=lambda p: abs(p.ops_per_s - gap / 2)), src, dst, figures)
            return True
        if hottest.ops_per_s > gap / 2 and self.split(
                hottest, "load", f"{hottest.ops_per_s:.0f} ops/s; {figures}; no single move "
                                 f"balances: cut off about {gap / 2:.0f} ops/s",
                share=min(0.5, gap / 2 / hottest.ops_per_s)):
            return False  # the piece moves in a later pass
        closest = [p for p in movable if not self.recently_moved(p)]
        if closest:
            self.move(min(closest, key=lambda p: abs(p.ops_per_s - gap / 2)), src, dst,
                      figures + "; the closest move")
            return True
        self.skipped.append(f"balance {src}: {figures}; neither a move nor a split of "
                            f"partition {hottest.id} ({hottest.ops_per_s:.0f} ops/s) helps")
        return False

    def move(self, p: PartitionSnapshot, src: str, dst: str, figures: str) -> None:
        self.actions.append(Action("move", (p.id,), server=dst, trigger="load", reason=(
            f"partition {p.id}: {p.ops_per_s:.0f} ops/s from {src} to {dst} ({figures})")))
        self.used.add(p.id)
        self.load[src] -= p.ops_per_s
        self.load[dst] += p.ops_per_s

    def size_splits(self) -> None:
        c = self.config
        for p in sorted(self.served, key=lambda p: -p.size_bytes):
            if p.size_bytes >= c.split_size_bytes_min and self.settled(p):
                self.split(p, "size", f"{mib(p.size_bytes)}, over "
                                      f"{mib(c.split_size_bytes_min)}")

    def merges(self) -> None:
        c = self.config
        live = set(self.snapshot.servers)

        def cold(p: PartitionSnapshot) -> bool:
            return (p.server in live and p.id not in self.used and self.settled(p)
                    and p.ops_per_s <= c.merge_ops_per_s_max
                    and p.bytes_per_s <= c.merge_bytes_per_s_max)

        refused: set[tuple[int, int]] = set()
        while self.room() and self.count > self.low_watermark:
            parts = self.snapshot.partitions
            pairs = [(a, b) for a, b in itertools.pairwise(parts)
                     if cold(a) and cold(b) and a.size_bytes + b.size_bytes
                     <= c.merge_size_bytes_max]
            pairs.sort(key=lambda ab: (ab[0].ops_per_s + ab[1].ops_per_s, ab[0].low))
            for a, b in pairs:
                if (a.id, b.id) in refused:
                    continue
                what = f"merge {a.id}+{b.id}"
                if self.cool(a, what) and self.cool(b, what):
                    break
                refused.add((a.id, b.id))
            else:
                return
            self.actions.append(Action("merge", (a.id, b.id), trigger="count", reason=(
                f"partitions {a.id} and {b.id}: {a.ops_per_s:.1f} and {b.ops_per_s:.1f} "
                f"ops/s, {mib(a.size_bytes + b.size_bytes)} together; {self.count} "
                f"partitions, above the low watermark {self.low_watermark}")))
            self.used.update((a.id, b.id))
            self.count -= 1


def load_policy(config: PartitionManagerConfig) -> DefaultPolicy:
    """An instance of the class `config.policy` names ("package.module.Class")."""
    module_name, _, class_name = config.policy.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise InvalidArgument(f"partition_manager.policy {config.policy!r} cannot be "
                              f"imported: {exc}") from exc
    if not (isinstance(cls, type) and callable(getattr(cls, "decide", None))
            and callable(getattr(cls, "split_key", None))):
        raise InvalidArgument(f"partition_manager.policy {config.policy!r} is not a policy "
                              f"class (with decide and split_key)")
    policy: DefaultPolicy = cls(config)
    return policy


def snapshot_from(current: PartitionMap, loads: Mapping[int, pb.PartitionLoad],
                  live: Iterable[str], changed_at: Mapping[int, float], now: float,
                  pending: Iterable[int] = (), moved_at: Mapping[int, float] | None = None
                  ) -> LoadSnapshot:
    """The snapshot a policy decides on: the map's partitions in key order, each with the
    load its server's last heartbeat reported (zeros while it reports none or is not
    serving), the seconds since `changed_at` and `moved_at` (unix or monotonic, as `now`),
    and whether it is in `pending` (a split or merge of it under way)."""
    busy = set(pending)
    moved_at = moved_at or {}
    parts = []
    for entry in current.partitions:
        load = loads.get(entry.id)
        changed = changed_at.get(entry.id)
        ago = None if changed is None else max(0.0, now - changed)
        moved = moved_at.get(entry.id)
        moved_ago = None if moved is None else max(0.0, now - moved)
        if load is None or load.state != "serving":
            parts.append(PartitionSnapshot(entry.id, entry.low, entry.high, entry.server,
                                           changed_s_ago=ago, moved_s_ago=moved_ago,
                                           pending=entry.id in busy))
            continue
        parts.append(PartitionSnapshot(
            entry.id, entry.low, entry.high, entry.server, ops_per_s=load.ops_per_s,
            bytes_per_s=load.bytes_per_s, p99_ms=load.p99_ms, queue_ops=load.queue_ops,
            size_bytes=load.size_bytes,
            samples=tuple((s.key, s.left, s.right, s.contained) for s in load.samples),
            requests_sampled=load.requests_sampled,
            size_split_key=load.size_split_key or None, changed_s_ago=ago,
            moved_s_ago=moved_ago, pending=entry.id in busy))
    return LoadSnapshot(tuple(sorted(set(live))), tuple(parts))
