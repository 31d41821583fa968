"""What issue 17's probe tests share: the PM's operator RPCs, a key at a partition name, and
a watcher that attacks the map's invariants while splits and merges run.

The watcher polls, every ~50 ms until stopped: the map from a live PM (`PartitionMap.from_pb`
validates it, so a map whose ranges overlap or leave a gap — §8 invariant 4 — is recorded as
a violation with its version), and each live PS's Status: the ranges of the partitions it
serves must be disjoint (a parent and its children serving at once is a violation)."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any

from common import rpc
from common.errors import StampError, Unavailable
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from partition_layer import keys
from partition_layer.partition_map import PartitionMap
from tools.local_stamp import LocalStamp

POLL_S = 0.05


def name_key(account: str, pname: str) -> bytes:
    """The first key of a partition name: where a split may cut."""
    return keys.encode_key(account, pname, keys.KIND_META, b"")


async def _pm_leader_call(stamp: LocalStamp, method: str, request: Any, timeout_s: float
                          ) -> Any:
    for rec in stamp.partition_managers():
        if not stamp.alive(rec.name):
            continue
        async with rpc.aio_channel(rec.address, 16 << 20) as channel:
            stub = pb_grpc.PartitionManagerStub(channel)
            try:
                status = await rpc.call(stub.Status(pb.ManagerStatusRequest(), timeout=2))
            except StampError:
                continue
            if status.leader:
                return await rpc.call(getattr(stub, method)(request, timeout=timeout_s))
    raise Unavailable("no partition manager leads")


def pm_call(stamp: LocalStamp, method: str, request: Any, timeout_s: float = 60) -> Any:
    """Call `method` on the leading PM (one attempt: the caller decides about retries)."""
    return asyncio.run(_pm_leader_call(stamp, method, request, timeout_s))


def pm_call_retrying(stamp: LocalStamp, method: str, request: Any, timeout_s: float = 60
                     ) -> Any:
    """`pm_call`, again while no PM leads (after a leader was killed), until `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return pm_call(stamp, method, request, max(1.0, deadline - time.monotonic()))
        except Unavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def current_map(stamp: LocalStamp) -> PartitionMap:
    return PartitionMap.from_pb(pm_call_retrying(stamp, "GetMap", pb.GetMapRequest(), 30))[0]


async def served_ranges(stamp: LocalStamp) -> dict[str, list[tuple[int, bytes, bytes | None]]]:
    """{PS name: [(id, low, high) of each partition it serves]} for every live PS."""
    found = {}
    for rec in stamp.partition_servers():
        if not stamp.alive(rec.name):
            continue
        try:
            async with rpc.aio_channel(rec.address, 16 << 20) as channel:
                load = await rpc.call(pb_grpc.PartitionServerStub(channel).Status(
                    pb.ServerStatusRequest(), timeout=2))
        except StampError:
            continue
        found[rec.name] = [(p.partition_id, p.range.low,
                            p.range.high if p.range.has_high else None)
                           for p in load.partitions if p.state == "serving"]
    return found


def overlapping(ranges: list[tuple[int, bytes, bytes | None]]) -> list[tuple[int, int]]:
    """Pairs of ids whose ranges overlap."""
    pairs = []
    ordered = sorted(ranges, key=lambda r: r[1])
    for (a, _, a_high), (b, b_low, _) in itertools.pairwise(ordered):
        if a_high is None or b_low < a_high:
            pairs.append((a, b))
    return pairs


def all_served(stamp: LocalStamp) -> bool:
    """Every partition of the current map is served by the PS the map names."""
    current = current_map(stamp)
    served = asyncio.run(served_ranges(stamp))
    return all(any(p.id == pid for pid, _, _ in served.get(p.server, []))
               for p in current.partitions)


class MapWatcher:
    """A thread attacking invariant 4 and "never both parent and children serving"."""

    def __init__(self, stamp: LocalStamp) -> None:
        self.stamp = stamp
        self.versions: dict[int, PartitionMap] = {}
        self.violations: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="map-watcher")

    def __enter__(self) -> MapWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            asyncio.run(self._poll())
            self._stop.wait(POLL_S)

    async def _poll(self) -> None:
        try:
            reply = await _pm_leader_call(self.stamp, "GetMap", pb.GetMapRequest(), 2)
        except StampError:
            reply = None
        if reply is not None:
            try:
                current, _ = PartitionMap.from_pb(reply)
                self.versions.setdefault(current.version, current)
            except StampError as exc:  # validate refused it: invariant 4 broken
                self.violations.append(f"map version {reply.version}: {exc}")
        served = await served_ranges(self.stamp)
        every = [r for ranges in served.values() for r in ranges]
        for a, b in overlapping(every):
            self.violations.append(f"partitions {a} and {b} served at once with overlapping "
                                   f"ranges: {served}")

    def check(self, versions_min: int = 1) -> None:
        assert not self.violations, self.violations[:3]
        assert len(self.versions) >= versions_min, \
            f"saw map versions {sorted(self.versions)}, expected at least {versions_min}"
