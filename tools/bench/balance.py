"""`stamp bench balance`: does the partition manager balance load by itself? (issue 17)

A stamp of the default shape (2 PS) starts with one range partition. 32 appenders of 1 KiB
records write over 256 logs, first uniformly, then skewed (80% of the appends to 10% of the
logs). For each phase: records/s in its first `BEFORE_S` seconds (before the PM could act),
the seconds until every PS carries within 25% of the mean load (per-PS ops/s summed from the
PM leader's heartbeats, held for `STEADY_S`), records/s over `AFTER_S` seconds once
balanced, the splits, merges and moves the PM made (its history), and the errors the
appenders saw. Targets: balanced within 30 s; no appender error; records/s after >= before.
Then the control (balance_layouts.py): the uniform load on the two layouts themselves, one
partition on one PS and two on two PSs, taking turns with no balancing pass running.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import uvloop

from common import rpc
from common.config import MiB
from common.errors import StampError
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from tools.bench.balance_layouts import run_layouts
from tools.bench.balance_load import APPENDERS, LOGS, Load, Progress
from tools.bench.fresh_stamp import with_fresh_stamp
from tools.bench.measure import row
from tools.bench.partition import _client
from tools.local_stamp import LocalStamp

BEFORE_S = 4.0
STEADY_S = 3.0
AFTER_S = 10.0
BALANCE_DEADLINE_S = 90.0
WITHIN = 0.25


def run_balance(progress: Progress = lambda _: None) -> list[dict[str, Any]]:
    """The two phases, then the control (balance_layouts.py): the load on one partition and
    on two PSs, taking turns, on a stamp of its own."""
    rows: list[dict[str, Any]] = with_fresh_stamp(
        "", lambda stamp: uvloop.run(_balance(stamp, progress)), progress,
        stream_layer_only=False, balancing=True)
    return rows + run_layouts(progress)


async def _balance(stamp: LocalStamp, progress: Progress) -> list[dict[str, Any]]:
    client = _client(stamp)
    load = Load()
    tasks = [asyncio.ensure_future(load.appender(client, i)) for i in range(APPENDERS)]
    rows = []
    try:
        for phase in ("uniform", "skewed"):
            load.skewed = phase == "skewed"
            errors_before = len(load.errors)
            history_before = len(await _history(stamp))
            started = time.monotonic()
            before = await load.rate(BEFORE_S)
            progress(f"{phase}: {before:,.0f} records/s before balancing")
            balanced_s = await _until_balanced(stamp, started, progress, phase)
            after = await load.rate(AFTER_S)
            progress(f"{phase}: {after:,.0f} records/s after balancing")
            done = (await _history(stamp))[history_before:]
            rows.append(row({"phase": phase, "appenders": APPENDERS, "logs": LOGS}, {
                "records_per_s_before": round(before),
                "records_per_s_after": round(after),
                "balanced_after_s": None if balanced_s is None else round(balanced_s, 1),
                "splits": sum(e.op == "split" for e in done),
                "merges": sum(e.op == "merge" for e in done),
                "moves": sum(e.op == "move" for e in done),
                "appender_errors": len(load.errors) - errors_before}))
    finally:
        load.stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()
    return rows


async def _until_balanced(stamp: LocalStamp, started: float, progress: Progress, phase: str
                          ) -> float | None:
    """Seconds from `started` until every PS is within 25% of the mean load, held for
    STEADY_S (None: not within BALANCE_DEADLINE_S)."""
    since: float | None = None
    last_report = 0.0
    while time.monotonic() - started < BALANCE_DEADLINE_S:
        loads = await _server_loads(stamp)
        mean = sum(loads.values()) / len(loads) if loads else 0.0
        ok = mean > 0 and all(abs(v - mean) <= WITHIN * mean for v in loads.values())
        now = time.monotonic()
        if ok:
            since = since if since is not None else now
            if now - since >= STEADY_S:
                return since - started
        else:
            since = None
        if now - last_report >= 5:
            last_report = now
            shares = ", ".join(f"{name} {v:,.0f}" for name, v in sorted(loads.items()))
            progress(f"{phase}: {now - started:.0f} s, ops/s per PS: {shares}")
        await asyncio.sleep(0.5)
    return None


async def _leader(stamp: LocalStamp, channel_of: Callable[[str], Any]) -> Any:
    for manager in stamp.partition_managers():
        stub = pb_grpc.PartitionManagerStub(channel_of(manager.address))
        status = await rpc.call(stub.Status(pb.ManagerStatusRequest(), timeout=5))
        if status.leader:
            return stub, status
    raise StampError("no partition manager leads")


async def _server_loads(stamp: LocalStamp) -> dict[str, float]:
    """{PS: ops/s of the partitions it serves}, from the PM leader's latest heartbeats."""
    async with _Channels() as channels:
        _, status = await _leader(stamp, channels.get)
    return {s.name: sum(p.ops_per_s for p in s.partitions) for s in status.servers}


async def _history(stamp: LocalStamp) -> list[pb.HistoryEntry]:
    async with _Channels() as channels:
        stub, _ = await _leader(stamp, channels.get)
        return list((await rpc.call(stub.History(pb.HistoryRequest(), timeout=10))).entries)


class _Channels:
    """Channels opened for one question, closed after it."""

    def __init__(self) -> None:
        self._open: list[Any] = []

    def get(self, address: str) -> Any:
        channel = rpc.aio_channel(address, 16 * MiB)
        self._open.append(channel)
        return channel

    async def __aenter__(self) -> _Channels:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for channel in self._open:
            await channel.close()
