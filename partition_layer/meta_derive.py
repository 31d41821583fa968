"""Split and merge intents in a partition's metadata stream, and the metadata a loader
derives from them (issue 17, /work/notes/split17.md "Loading"). Pure: no I/O.

A split of B at key K into C, D appends to B's metadata stream B's (fully checkpointed) meta
carrying the intent {"op": "split", "key": K hex, "left": C, "right": D}; the stream
manager's multi-modify then makes C's and D's streams out of B's extents, so the newest
record of C's (and D's) metadata stream is B's intent record. A merge of C, D into E appends
to both metadata streams their meta carrying {"op": "merge", "left": C's meta as a dict,
"right": D's, "merged": E}; E's metadata stream ends with D's extents, so its newest record
is D's intent record.

Whoever loads partition P reads the newest record and `resolve`s it:
- a record of another partition whose intent names P as a split child: P's meta is the
  parent's, cut to P's side of the key (run views narrowed; replay point, LSN and geo mark
  unchanged: the child's commit log is its parent's);
- a record of another partition whose merge intent names P as the merged one: P's meta holds
  both sides' runs, renumbered; its geo mark (issue 30) says everything up to its LSN was
  shipped, from its replay point on: a merge begins only once both sides shipped all they
  committed (split_merge.py), as the merged partition reads neither side's log on;
- P's own record carrying an intent: the operation never committed (P's streams still exist,
  and the new owner's fence makes a late multi-modify fail): roll back, i.e. the same meta
  without the intent;
- else the record as it is.
Every derived or rolled-back meta must be appended to P's own metadata stream before P
serves, so the next load finds P's own record.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from common.errors import Internal
from partition_layer.keys import KeyRange
from partition_layer.partition_meta import GeoMark, PartitionMeta
from partition_layer.run_cache import physical_run
from partition_layer.runs import RunInfo

SPLIT, MERGE = "split", "merge"


def split_intent(key: bytes, left_id: int, right_id: int) -> dict[str, Any]:
    return {"op": SPLIT, "key": key.hex(), "left": left_id, "right": right_id}


def merge_intent(left: PartitionMeta, right: PartitionMeta, merged_id: int
                 ) -> dict[str, Any]:
    return {"op": MERGE, "left": without_intents(left).to_dict(),
            "right": without_intents(right).to_dict(), "merged": merged_id}


def without_intents(meta: PartitionMeta) -> PartitionMeta:
    return dataclasses.replace(meta, intents=[])


def with_intent(meta: PartitionMeta, intent: dict[str, Any]) -> PartitionMeta:
    return dataclasses.replace(meta, intents=[intent])


def narrow_view(run: RunInfo, key_range: KeyRange) -> RunInfo | None:
    """`run` with its view cut to `key_range`; None when no key of the run can be in it."""
    low = max(run.view_low, key_range.low)
    highs = [h for h in (run.view_high, key_range.high) if h is not None]
    high = min(highs) if highs else None
    if high is not None and low >= high:
        return None
    # The run's keys lie in [first_key, last_key]: a view missing them all is empty too.
    if run.last_key < low or (high is not None and run.first_key >= high):
        return None
    return dataclasses.replace(run, view_low=low, view_high=high)


def split_child_range(parent: KeyRange, key: bytes, left: bool) -> KeyRange:
    if not parent.contains(key) or key == parent.low:
        raise Internal(f"split key {key.hex()} is not strictly inside "
                       f"[{parent.low.hex()}, {parent.high.hex() if parent.high else 'end'})")
    return KeyRange(parent.low, key) if left else KeyRange(key, parent.high)


def derive_split_child(parent: PartitionMeta, child_id: int) -> PartitionMeta:
    """A split child's meta from its parent's meta carrying the split intent."""
    intent = _only_intent(parent, SPLIT)
    if child_id not in (intent["left"], intent["right"]):
        raise Internal(f"partition {parent.partition_id}'s split intent names "
                       f"{intent['left']} and {intent['right']}, not {child_id}")
    key_range = split_child_range(parent.key_range, bytes.fromhex(intent["key"]),
                                  left=child_id == intent["left"])
    runs = [r for r in (narrow_view(run, key_range) for run in parent.runs) if r is not None]
    return PartitionMeta(partition_id=child_id, key_range=key_range, runs=runs,
                         replay_from=parent.replay_from, applied_lsn=parent.applied_lsn,
                         next_run_id=parent.next_run_id, intents=[], geo=parent.geo,
                         version_floor=parent.version_floor)


def derive_merged(record: PartitionMeta, merged_id: int) -> PartitionMeta:
    """The merged partition's meta from a record carrying the merge intent (either side's:
    both carry the same one)."""
    intent = _only_intent(record, MERGE)
    if intent["merged"] != merged_id:
        raise Internal(f"partition {record.partition_id}'s merge intent makes "
                       f"{intent['merged']}, not {merged_id}")
    left = PartitionMeta.from_dict(intent["left"])
    right = PartitionMeta.from_dict(intent["right"])
    if left.key_range.high != right.key_range.low:
        raise Internal(f"merge of partitions {left.partition_id} and {right.partition_id}: "
                       "their ranges are not adjacent")
    runs = [dataclasses.replace(run, run_id=n)
            for n, run in enumerate(merged_runs(left.runs, right.runs), start=1)]
    replay_from = right.replay_from if right.replay_from is not None else left.replay_from
    applied_lsn = max(left.applied_lsn, right.applied_lsn)
    marks = [m for m in (left.geo, right.geo) if m is not None]
    geo = (GeoMark(applied_lsn, replay_from, min(m.synced_s for m in marks)) if marks
           else None)
    return PartitionMeta(partition_id=merged_id,
                         key_range=KeyRange(left.key_range.low, right.key_range.high),
                         runs=runs, replay_from=replay_from, applied_lsn=applied_lsn,
                         next_run_id=len(runs) + 1, intents=[], geo=geo,
                         version_floor=max(left.version_floor, right.version_floor))


def resolve(newest: PartitionMeta | None, own_id: int) -> tuple[PartitionMeta | None, bool]:
    """(the meta partition `own_id` loads with, whether it must be appended to its own
    metadata stream before serving) from the newest record of that stream."""
    if newest is None:
        return None, False
    if newest.partition_id == own_id:
        if newest.intents:
            return without_intents(newest), True  # the operation never committed
        return newest, False
    intent = newest.intents[0] if len(newest.intents) == 1 else None
    if intent is not None and intent["op"] == SPLIT and own_id in (intent["left"],
                                                                    intent["right"]):
        return derive_split_child(newest, own_id), True
    if intent is not None and intent["op"] == MERGE and intent["merged"] == own_id:
        return derive_merged(newest, own_id), True
    raise Internal(f"partition {own_id}'s metadata stream ends with a record of partition "
                   f"{newest.partition_id} that names no operation making {own_id} "
                   f"(intents {newest.intents})")


def _only_intent(meta: PartitionMeta, op: str) -> dict[str, Any]:
    if len(meta.intents) != 1 or meta.intents[0].get("op") != op:
        raise Internal(f"partition {meta.partition_id}'s meta carries intents "
                       f"{meta.intents}, not one {op}")
    return meta.intents[0]


def merged_runs(left: list[RunInfo], right: list[RunInfo]) -> list[RunInfo]:
    """The runs a merged partition lists, newest first, from its two sides' lists.

    The sides' views are disjoint, so any interleaving that keeps each side's own order
    reads the same. This one lists each side's runs ahead of the next run both sides list
    (a run of a common ancestor that a split cut in two), and that run once, its two views
    joined, when they meet at the split key. So a partition split and merged back lists its
    runs as before the split, not each of them twice: every run listed costs each read a
    bloom check, and a doubled list kept the size-tiered merges (merge_group takes the
    newest runs first) from ever reaching the older half."""
    shared = {physical_run(r) for r in left} & {physical_run(r) for r in right}
    runs: list[RunInfo] = []
    i = j = 0
    while True:
        while i < len(left) and physical_run(left[i]) not in shared:
            runs.append(left[i])
            i += 1
        while j < len(right) and physical_run(right[j]) not in shared:
            runs.append(right[j])
            j += 1
        if i == len(left) or j == len(right):
            return runs + left[i:] + right[j:]
        a, b = left[i], right[j]
        if physical_run(a) == physical_run(b) and a.view_high is not None \
                and a.view_high == b.view_low:
            runs.append(dataclasses.replace(a, view_high=b.view_high))
            j += 1
        else:  # listed in another order on each side: keep both pieces, each side in order
            runs.append(a)
        i += 1
