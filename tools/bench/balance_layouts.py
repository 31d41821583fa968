"""`stamp bench balance`'s control: the uniform load of the balance benchmark (32 appenders of
1 KiB records over 256 logs) on the two layouts balancing moves between — one partition on
one PS, and its two halves on two PSs — taking turns on one fresh stamp with the PM's
balancing off (a split and a move make the second layout, a move back and a merge the
first). The two-PS figure is the most any balancing reaches on this machine: the target
"records/s after >= before" asks it to beat the one-PS figure.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import uvloop

from common.errors import StampError
from common.proto import partition_pb2 as pb
from partition_layer import keys
from tools.bench.balance_load import APPENDERS, LOGS, Load, Progress
from tools.bench.fresh_stamp import with_fresh_stamp
from tools.bench.measure import row
from tools.bench.partition import _client
from tools.bench.split import _pm_call
from tools.local_stamp import LocalStamp

TURNS = 3
WARM_S = 1.5
MEASURE_S = 5.0
ONE, TWO = "1 partition on 1 PS", "2 partitions on 2 PSs"


def run_layouts(progress: Progress = lambda _: None) -> list[dict[str, Any]]:
    return with_fresh_stamp("", lambda stamp: uvloop.run(_layouts(stamp, progress)),
                            progress, stream_layer_only=False)


async def _layouts(stamp: LocalStamp, progress: Progress) -> list[dict[str, Any]]:
    client = _client(stamp)
    load = Load()
    tasks = [asyncio.ensure_future(load.appender(client, i)) for i in range(APPENDERS)]
    rates: dict[str, list[float]] = {ONE: [], TWO: []}
    cut = keys.encode_key("bench", f"log-{LOGS // 2:03d}", keys.KIND_META, b"")
    partition_id = 1
    try:
        for turn in range(TURNS):
            for layout in (ONE, TWO):
                await load.rate(WARM_S)
                rates[layout].append(await load.rate(MEASURE_S))
                progress(f"layouts, turn {turn + 1}/{TURNS}: {layout}: "
                         f"{rates[layout][-1]:,.0f} records/s")
                if layout == ONE:
                    left, right = await _split_apart(stamp, client, partition_id, cut)
                else:
                    partition_id = await _merge_back(stamp, client, left, right)
    finally:
        load.stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()
    one, two = (statistics.median(rates[layout]) for layout in (ONE, TWO))
    return [row({"layout": layout, "appenders": APPENDERS, "logs": LOGS, "turns": TURNS},
                {"records_per_s_p50": round(statistics.median(rates[layout])),
                 "records_per_s_min": round(min(rates[layout])),
                 "records_per_s_max": round(max(rates[layout]))})
            for layout in (ONE, TWO)] + [
        row({"compare": f"{TWO} vs {ONE}"}, {"ratio": round(two / max(one, 1e-9), 3),
                                            "appender_errors": len(load.errors)})]


async def _split_apart(stamp: LocalStamp, client: Any, partition_id: int, cut: bytes
                       ) -> tuple[int, int]:
    reply = await _pm_call(stamp, "Split", pb.SplitPartitionRequest(
        partition_id=partition_id, key=cut, trigger="operator"))
    left, right = reply.done.to_ids
    await _move(stamp, client, right, away_from=await _server(client, left))
    return left, right


async def _merge_back(stamp: LocalStamp, client: Any, left: int, right: int) -> int:
    await _move(stamp, client, right, to=await _server(client, left))
    reply = await _pm_call(stamp, "Merge", pb.MergePartitionsRequest(
        left_id=left, right_id=right, trigger="operator"))
    (merged,) = reply.done.to_ids
    return int(merged)


async def _server(client: Any, partition_id: int) -> str:
    current, _ = await client.partition_map()
    return str(current.get(partition_id).server)


async def _move(stamp: LocalStamp, client: Any, partition_id: int, *, to: str = "",
                away_from: str = "") -> None:
    target = to or next(r.name for r in stamp.partition_servers() if r.name != away_from)
    await _pm_call(stamp, "Move", pb.MoveRequest(partition_id=partition_id, server=target))
    deadline = time.monotonic() + 30
    while await _server(client, partition_id) != target:
        if time.monotonic() > deadline:
            raise StampError(f"partition {partition_id} did not move to {target}")
        await client.refresh_map()
        await asyncio.sleep(0.1)
