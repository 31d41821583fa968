"""The faults of `stamp chaos` that need the running stamp's state, not just a process: split,
merge and move a partition through the leading partition manager (as `stamp partition`
does), flip a byte of a sealed replica on an extent node's disk, and find the extent nodes
whose journals are written (`commit_log_nodes`).

Each returns a one-line description of what it did, or raises `Skipped` when the stamp's
state leaves nothing to do (one partition: nothing to merge; no sealed extent on the node:
nothing to flip) — a skipped fault is reported, not an error.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from common.errors import InvalidArgument, Unavailable
from common.proto import partition_pb2 as pb
from partition_layer import keys
from partition_layer.client import PartitionClient
from partition_layer.requests import route_key
from stream_layer.extent_node.replica import replica_paths
from stream_layer.sm_client import AsyncStreamManagerClient
from tools.cmd_partition_ops import OP_TIMEOUT_S, call_leader
from tools.local_stamp import LocalStamp

FLIP_MASK = 0x20
COMMIT_LOG_SUFFIX = "/log"  # partition_layer.partition_streams.stream_name(id, "log")
# How long a fault waits for the stamp to answer (a partition manager or stream manager
# leader elected again after the fault before this one) before it counts as failed.
LEADER_WAIT_S = 60.0
LEADER_RETRY_S = 0.5

T = TypeVar("T")


class Skipped(Exception):
    """Nothing to do for this fault in the stamp's current state (the message says why)."""


def retrying(action: Callable[[], T]) -> T:
    """`action()`, again while the stamp answers Unavailable (no leader yet), until
    LEADER_WAIT_S: the fault before may have been the leader's death."""
    deadline = time.monotonic() + LEADER_WAIT_S
    while True:
        try:
            return action()
        except Unavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(LEADER_RETRY_S)


def partition_op(stamp: LocalStamp, kind: str, account: str, log: str, pick: int) -> str:
    """Split the partition serving `log` at `log`'s first key, merge it with a neighbour, or
    move it to another partition server (retried while no partition manager leads)."""
    return retrying(lambda: _partition_op(stamp, kind, account, log, pick))


def _partition_op(stamp: LocalStamp, kind: str, account: str, log: str, pick: int) -> str:
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        current, _ = pc.partition_map()
    entry = current.lookup(route_key(account, log))
    data_dir = str(stamp.data_dir)
    if kind == "split":
        key = keys.encode_key(account, log, keys.KIND_META, b"")
        if entry.low == key:
            raise Skipped(f"partition {entry.id} already starts at {log}")
        reply = _leader(data_dir, "Split", pb.SplitPartitionRequest(
            partition_id=entry.id, key=key, trigger="operator"))
        return f"split {entry.id} at {log} into {list(reply.done.to_ids)}"
    if kind == "merge":
        parts = current.partitions
        if len(parts) < 2:
            raise Skipped("one partition: nothing to merge")
        at = current.index(entry.id)
        left = parts[at] if at + 1 < len(parts) else parts[at - 1]
        if pick % 2 and at > 0:  # the left neighbour now and then, seeded
            left = parts[at - 1]
        reply = _leader(data_dir, "Merge", pb.MergePartitionsRequest(
            left_id=left.id, right_id=0, trigger="operator"))
        return f"merged {list(reply.done.from_ids)} into {list(reply.done.to_ids)}"
    servers = sorted(r.name for r in stamp.partition_servers()
                     if r.name != entry.server and stamp.alive(r.name))
    if not servers:
        raise Skipped(f"no other partition server for partition {entry.id}")
    target = servers[pick % len(servers)]
    _leader(data_dir, "Move", pb.MoveRequest(partition_id=entry.id, server=target))
    return f"moved {entry.id} from {entry.server or '-'} to {target}"


def _leader(data_dir: str, method: str, request: object) -> pb.PartitionOpReply:
    try:
        reply = call_leader(data_dir, method, request, OP_TIMEOUT_S)
    except InvalidArgument as exc:  # the map changed under us (a split of the balancer...)
        raise Skipped(str(exc)) from None
    done = getattr(reply, "done", None)
    if done is not None and done.result != "ok":
        raise Skipped(f"{method}: {done.result}")
    return reply


def commit_log_nodes(stamp: LocalStamp) -> list[str]:
    """The extent nodes (sorted) holding a replica of an open extent of a partition's commit
    log: the ones whose journal the workload writes all the time, so that a journal fault
    point armed there fires."""

    async def open_log_extents() -> list[str]:
        client = AsyncStreamManagerClient([r.address for r in stamp.stream_managers()],
                                          stamp.config.stream_manager)
        try:
            extents = await client.list_extents()
        finally:
            await client.close()
        return sorted({node for e in extents if e.state == "open"
                       and any(s.endswith(COMMIT_LOG_SUFFIX) for s in e.streams)
                       for node in e.replicas})
    return retrying(lambda: asyncio.run(open_log_extents()))


def flip_sealed_replica(stamp: LocalStamp, node: str, pick: int, flipped: set[int]) -> str:
    """Flip one byte of a sealed replica on `node`'s disk, of an extent none of whose
    replicas was flipped before (`flipped`, updated): the stamp promises to survive one bad
    copy (readers pass it over, §8 invariant 6), not two."""
    address = stamp.address(node)

    async def sealed_here() -> list[tuple[int, int]]:
        client = AsyncStreamManagerClient([r.address for r in stamp.stream_managers()],
                                          stamp.config.stream_manager)
        try:
            extents = await client.list_extents()
        finally:
            await client.close()
        return sorted((e.extent_id, e.sealed_length) for e in extents
                      if e.state == "sealed" and e.sealed_length > 0
                      and address in e.addresses and e.extent_id not in flipped)
    candidates = retrying(lambda: asyncio.run(sealed_here()))
    for i in range(len(candidates)):
        extent_id, sealed_length = candidates[(pick + i) % len(candidates)]
        path = replica_paths(Path(stamp.record(node).dir) / "extents", extent_id)[0]
        try:
            size = min(path.stat().st_size, sealed_length)
        except FileNotFoundError:
            continue
        if size == 0:
            continue
        offset = pick % size
        fd = os.open(path, os.O_RDWR)
        try:
            byte = os.pread(fd, 1, offset)
            os.pwrite(fd, bytes((byte[0] ^ FLIP_MASK,)), offset)
            os.fsync(fd)
        finally:
            os.close(fd)
        flipped.add(extent_id)
        return f"extent {extent_id} byte {offset} of {size}"
    raise Skipped(f"no sealed replica on {node} to flip")
