"""What one front-end hop costs (issue 16; DESIGN §6): the same appends of 1 KiB records,
alternately direct through the partition client and through a front end, in one run on one
stamp of its own. Targets: records/s through the front end >= 0.8 of direct for 32
appenders of 1 and of 100 records; added p50 <= 0.7 ms for one appender.

The front-end path signs every request as the SDK does (frontend/wire.py) and multiplexes
them on one Call stream (partition_layer/session.CallSession speaks the FrontEnd service's
Call too: the same messages). Until `stamp bench fe-append` runs the SDK itself:

    python -m tools.bench.fe_hop [--seconds 5] [--json]

Also reported: the front end's CPU time per request (from /proc), which the machine's other
load does not inflate the way it inflates latencies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvloop

from common import rpc
from common.clock import SystemClock
from common.config import KiB
from common.proto import frontend_pb2_grpc as fe_grpc
from common.proto import partition_pb2 as pb
from frontend import wire
from frontend.accounts import AccountStore
from lock_service.client import LockClient
from partition_layer.client import AsyncPartitionClient
from partition_layer.payload_crc import payload_crcs
from partition_layer.session import CallSession
from tools.bench.fresh_stamp import with_fresh_stamp
from tools.bench.measure import latency_metrics, row
from tools.local_stamp import LocalStamp

RECORD_BYTES = 1 * KiB
CASES = ((1, 1), (32, 1), (1, 100), (32, 100))  # (appenders, records per append)
Append = Callable[[str, list[bytes], str], Awaitable[None]]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def phase(append: Append, tag: str, clients: int, batch: int, seconds: float
                ) -> tuple[int, list[float]]:
    """Appends for `seconds`; (appends acknowledged, their latencies)."""
    records = [os.urandom(RECORD_BYTES) for _ in range(batch)]
    latencies: list[float] = []
    stop = time.monotonic() + seconds

    async def appender(index: int) -> None:
        n = 0
        while time.monotonic() < stop:
            started = time.perf_counter()
            await append(f"{tag}-{clients}-{batch}-{index}", records, f"{tag}{index}-{n}")
            latencies.append(time.perf_counter() - started)
            n += 1

    await asyncio.gather(*(appender(i) for i in range(clients)))
    return len(latencies), latencies


async def compare(stamp: LocalStamp, seconds: float) -> list[dict[str, Any]]:
    direct = AsyncPartitionClient([r.address for r in stamp.partition_managers()],
                                  stamp.config.partition)
    await direct.wait_served(30)
    with LockClient([r.address for r in stamp.lock_servers()], holder="bench") as locks:
        credentials = wire.Credentials(
            "bench", key=AccountStore(locks, SystemClock()).create("bench").keys[0])
    front_end = stamp.front_ends()[0]
    channels = rpc.ChannelCache(stamp.config.partition.rpc_message_bytes_max)
    session = CallSession(front_end.address, lambda: fe_grpc.FrontEndStub(  # type: ignore[arg-type, return-value]
        channels.get(front_end.address)))

    async def append_direct(log: str, records: list[bytes], token: str) -> None:
        await direct.append("bench", log, records, token=token)

    async def append_via_front_end(log: str, records: list[bytes], token: str) -> None:
        request = pb.Request(account="bench", pname=log, append=pb.AppendOp(
            records=records, crcs=payload_crcs(records), token=token))
        wire.sign_call(request, credentials, time.time())
        response = await session.call(request, 30.0, RECORD_BYTES * len(records) + 256)
        if response.error:
            raise RuntimeError(f"{response.error}: {response.message}")

    rows = []
    try:
        for clients, batch in CASES:
            params = {"clients": clients, "batch": batch, "record_bytes": RECORD_BYTES}
            count_d, latencies_d = await phase(append_direct, "d", clients, batch, seconds)
            cpu_before = cpu_seconds(front_end.pid)
            count_f, latencies_f = await phase(append_via_front_end, "f", clients, batch,
                                               seconds)
            cpu_us = (cpu_seconds(front_end.pid) - cpu_before) / max(1, count_f) * 1e6
            direct_m = {"records_per_s": round(count_d * batch / seconds),
                        **latency_metrics(latencies_d)}
            fe_m = {"records_per_s": round(count_f * batch / seconds),
                    **latency_metrics(latencies_f), "fe_cpu_us_per_request": round(cpu_us, 1)}
            rows += [row({**params, "path": "direct"}, direct_m),
                     row({**params, "path": "front-end"}, fe_m),
                     row({**params, "path": "front-end / direct"}, {
                         "ratio": round(fe_m["records_per_s"] / max(1, direct_m[
                             "records_per_s"]), 3),
                         "added_p50_ms": round(fe_m["p50_ms"] - direct_m["p50_ms"], 3)})]
    finally:
        await session.close()
        await channels.close()
        await direct.close()
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.fe_hop", description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0, help="per phase")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = with_fresh_stamp("", lambda stamp: uvloop.run(compare(stamp, args.seconds)),
                            lambda text: None, stream_layer_only=False)
    if args.json:
        print(json.dumps({"bench": "fe-hop", "results": rows}))
        return
    for result in rows:
        print(" ".join(f"{k}={v}" for k, v in {**result["params"], **result["metrics"]}.items()))


if __name__ == "__main__":
    main()
