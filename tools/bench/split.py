"""`stamp bench split`: split and then merge a range partition of 10 MB and one of 1 GB
(`sizes_mb`), under a steady appender load on that partition (issue 17).

For each size, on a stamp of its own (3 lock, 3 SM, 9 EN, 2 PM, 2 PS): fill the partition
with rows (the partition-load bench's filler), move it once so that everything is in
checkpoints (each size starts from the same state), start `LOAD_APPENDERS` appenders of
1 KiB records on logs inside it, then `trials` times: split it at the name that halves the
filled data, then merge the two children back. Reported per operation and size:
- duration: the PM's Split/Merge RPC, from the request to the new map published;
- unavailable: the longest gap between two acknowledged appends of the load around the
  operation (the appenders see every pause, retries and map refreshes included), and the
  PS's own figure (from the parent refusing writes to the children serving).
Targets: duration ratio 1 GB / 10 MB <= 1.5 (cost does not grow with data); unavailable p50
<= 100 ms for split and for merge.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any

import uvloop

from common import rpc
from common.config import KiB, MiB
from common.errors import StampError, Unavailable
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from partition_layer import keys
from tools.bench.fresh_stamp import with_fresh_stamp
from tools.bench.measure import row
from tools.bench.partition import _client, _fill, _move
from tools.local_stamp import LocalStamp

Progress = Callable[[str], None]
LOAD_APPENDERS = 8
RECORD = b"x" * KiB
FILL_WRITERS = 4  # the filler writes names fill-0 .. fill-3: the split cuts at fill-2
SETTLE_S = 1.0  # load before and after each operation, so its gaps are seen whole


def run_split(sizes_mb: tuple[int, ...] = (10, 1000), trials: int = 3,
              progress: Progress = lambda _: None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for size_mb in sizes_mb:
        rows += with_fresh_stamp("", lambda stamp, s=size_mb: uvloop.run(
            _split_and_merge(stamp, s, trials, progress)), progress, stream_layer_only=False)
    by = {(r["params"]["op"], r["params"]["data_mb"]): r["metrics"] for r in rows}
    if len(sizes_mb) >= 2:
        small, large = sizes_mb[0], sizes_mb[-1]
        for op in ("split", "merge"):
            rows.append(row({"op": op, "compare": f"{large} MB vs {small} MB"}, {
                "duration_ratio": round(by[op, large]["duration_p50_s"]
                                        / max(by[op, small]["duration_p50_s"], 1e-6), 3)}))
    return rows


async def _split_and_merge(stamp: LocalStamp, size_mb: int, trials: int, progress: Progress
                           ) -> list[dict[str, Any]]:
    client = _client(stamp)
    acks: list[float] = []
    stop = asyncio.Event()
    errors: list[str] = []
    measured: dict[str, list[tuple[float, float, float]]] = {"split": [], "merge": []}
    try:
        written: list[tuple[str, str, int]] = []
        progress(f"writing {size_mb} MB of rows into one partition")
        await _fill(client, written, size_mb * 1_000_000, progress)
        await _move(stamp, client, written[0])  # everything into checkpoints
        load = [asyncio.ensure_future(_appender(client, i, stop, acks, errors))
                for i in range(LOAD_APPENDERS)]
        partition_id = 1
        cut = keys.encode_key("bench", f"fill-{FILL_WRITERS // 2}", keys.KIND_META, b"")
        for trial in range(trials):
            await _wait_acks(acks, 200)
            reply = await _timed(stamp, acks, measured["split"], "Split",
                                 pb.SplitPartitionRequest(partition_id=partition_id, key=cut,
                                                          trigger="operator"))
            left, right = reply.done.to_ids
            progress(f"{size_mb} MB: split {trial + 1}/{trials}: "
                     f"{_say(measured['split'][-1])}")
            reply = await _timed(stamp, acks, measured["merge"], "Merge",
                                 pb.MergePartitionsRequest(left_id=left, right_id=right,
                                                           trigger="operator"))
            (partition_id,) = reply.done.to_ids
            progress(f"{size_mb} MB: merge {trial + 1}/{trials}: "
                     f"{_say(measured['merge'][-1])}")
        stop.set()
        await asyncio.gather(*load)
    finally:
        stop.set()
        await client.close()
    rows = []
    for op, results in measured.items():
        durations = [d for d, _, _ in results]
        gaps = [g for _, g, _ in results]
        reported = [u for _, _, u in results]
        rows.append(row({"op": op, "data_mb": size_mb, "trials": trials}, {
            "duration_p50_s": round(statistics.median(durations), 3),
            "duration_max_s": round(max(durations), 3),
            "unavailable_p50_ms": round(statistics.median(gaps) * 1000, 1),
            "unavailable_max_ms": round(max(gaps) * 1000, 1),
            "ps_unavailable_p50_ms": round(statistics.median(reported) * 1000, 1),
            "appender_errors": len(errors)}))
    return rows


def _say(result: tuple[float, float, float]) -> str:
    duration, gap, reported = result
    return (f"{duration:.3f} s, longest gap between acknowledged appends {gap * 1000:.0f} ms "
            f"(PS: {reported * 1000:.0f} ms unavailable)")


async def _appender(client: Any, index: int, stop: asyncio.Event, acks: list[float],
                    errors: list[str]) -> None:
    """Appends of one 1 KiB record to log load-INDEX (after fill-*, in the split's right
    child) until `stop`; the time of each acknowledgement."""
    while not stop.is_set():
        try:
            await client.append("bench", f"load-{index}", [RECORD])
        except StampError as exc:  # reported: the target is no error at all
            errors.append(str(exc))
            continue
        acks.append(time.monotonic())


async def _wait_acks(acks: list[float], count: int, timeout_s: float = 60) -> None:
    target, deadline = len(acks) + count, time.monotonic() + timeout_s
    while len(acks) < target:
        if time.monotonic() > deadline:
            raise StampError(f"the appender load stalled: {len(acks)} acknowledged")
        await asyncio.sleep(0.01)


async def _timed(stamp: LocalStamp, acks: list[float],
                 results: list[tuple[float, float, float]], method: str, request: Any
                 ) -> pb.PartitionOpReply:
    """Run one PM operation with the load going; append (duration, longest gap between
    acknowledged appends around it, the PS's unavailable time) to `results`."""
    await asyncio.sleep(SETTLE_S)
    started = time.monotonic()
    reply = await _pm_call(stamp, method, request)
    finished = time.monotonic()
    if reply.done.result != "ok":
        raise StampError(f"{method} did not succeed: {reply.done.result}")
    await asyncio.sleep(SETTLE_S)
    window = [t for t in list(acks) if started - SETTLE_S <= t <= finished + SETTLE_S]
    gaps = [b - a for a, b in itertools.pairwise(window)]
    results.append((finished - started, max(gaps, default=finished - started),
                    reply.done.unavailable_s))
    return reply


async def _pm_call(stamp: LocalStamp, method: str, request: Any) -> Any:
    """`method` on the leading PM."""
    for manager in stamp.partition_managers():
        async with rpc.aio_channel(manager.address, 16 * MiB) as channel:
            stub = pb_grpc.PartitionManagerStub(channel)
            status = await rpc.call(stub.Status(pb.ManagerStatusRequest(), timeout=5))
            if status.leader:
                return await rpc.call(getattr(stub, method)(request, timeout=300))
    raise Unavailable("no partition manager leads")
