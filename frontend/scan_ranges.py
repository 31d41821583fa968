"""What the front end's `ScanRanges` RPC answers (frontend.proto; issue 18): the range
partitions that hold an account's names, each as the bounds a Scan takes, so a reader can
plan one parallel scan per range partition (the Spark data source, spark/datasource.py).

Contract of `account_ranges(current, account, name_prefix)` (pure):
- the account's part of the key space, cut to `name_prefix` (a shared access token's; ""
  for a key), is cut where the map's partitions meet; each piece is an AccountRange: the
  first has no start (the account's, or the prefix's, first key: the Scan cuts it to the
  token), the last no end, and each other bound is the partition bound as (pname, row);
- the ranges are adjacent and in key order, so scanning each of them and concatenating the
  results is the same as one scan of the whole account;
- a partition bound that is no key of a well-formed name (it cannot be, for split keys are
  names' first keys: partition_map.bootstrap_split_keys, size_split.py) is dropped, joining
  the two ranges beside it: the plan is coarser, never wrong;
- with `loads` (the partition servers' PartitionLoad by partition id), each range carries
  its partition's size_bytes and, when the partition's size split key is a name's start
  strictly inside the range, that name (`middle_pname`): hints for cutting, no more.
"""

from __future__ import annotations

from collections.abc import Mapping

from common.errors import InvalidArgument
from common.proto import frontend_pb2 as fe_pb
from common.proto import partition_pb2 as pb
from frontend import names
from partition_layer import keys
from partition_layer.partition_map import PartitionMap


def entity_bound(account: str, key: bytes) -> tuple[str, bytes] | None:
    """The Scan bound (pname, row) that orders every entity key of `account` as `key` does:
    an entity's key is below it exactly when it is below `key`. None when `key` is not a key
    of a well-formed name of `account`."""
    try:
        owner, pname, kind, row = keys.decode_key(key)
        names.check_partition(pname)
    except InvalidArgument:
        return None
    if owner != account:
        return None
    # Below KIND_ENTITY, every entity of `pname` sorts after `key`: the name's start orders
    # them alike. At KIND_ENTITY the key is an entity's own key.
    return (pname, row if kind == keys.KIND_ENTITY else b"")


def account_ranges(current: PartitionMap, account: str, name_prefix: str,
                   loads: Mapping[int, pb.PartitionLoad] | None = None
                   ) -> list[fe_pb.AccountRange]:
    """The account's ranges, one per range partition it spans (module contract)."""
    low, high = keys.name_range(account, name_prefix)
    cuts: list[tuple[int, tuple[str, bytes]]] = []  # (id of the partition starting there, bound)
    first_id: int | None = None
    for entry in current.partitions:
        if entry.high is not None and entry.high <= low:
            continue
        if entry.low >= high:
            break
        if entry.low <= low:
            first_id = entry.id
            continue
        bound = entity_bound(account, entry.low)
        if bound is None or (cuts and cuts[-1][1] >= bound):
            continue  # not a name's key: joined with the range before it
        cuts.append((entry.id, bound))
    if first_id is None:  # the map covers the key space (invariant 4): never here
        return []
    ranges = []
    start: tuple[str, bytes] | None = None
    ids = [first_id] + [partition_id for partition_id, _ in cuts]
    ends: list[tuple[str, bytes] | None] = [bound for _, bound in cuts] + [None]
    for partition_id, end in zip(ids, ends, strict=True):
        piece = fe_pb.AccountRange(partition_id=partition_id)
        if start is not None:
            piece.start_pname, piece.start_row = start
        if end is not None:
            piece.has_end = True
            piece.end_pname, piece.end_row = end
        load = (loads or {}).get(partition_id)
        if load is not None:
            piece.size_bytes = load.size_bytes
            piece.middle_pname = _middle(account, load.size_split_key, start, end)
        ranges.append(piece)
        start = end
    return ranges


def _middle(account: str, key: bytes, start: tuple[str, bytes] | None,
            end: tuple[str, bytes] | None) -> str:
    """The name whose start is `key` if it lies strictly inside [start, end), else ""."""
    bound = entity_bound(account, key) if key else None
    if bound is None or bound[1]:
        return ""
    if (start is not None and bound <= start) or (end is not None and bound >= end):
        return ""
    return bound[0]
