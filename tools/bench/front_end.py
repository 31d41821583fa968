"""Front-end benchmarks on a stamp of their own (3 lock, 3 SM, 9 EN, 2 PM, 2 PS, 2 FE):

- `fe-append`: the `log-append` loads (1 KiB records: one appender of single records, 32
  appenders of single records, 32 appenders of batches of 100) through the SDK and a front
  end, and direct through the partition client, taking turns in the same run (this machine's
  speed drifts). Targets (issue 16): ratio SDK/direct >= 0.8 for 32x1 and 32x100; added p50
  <= 0.7 ms for one appender. Each path's row also gives the CPU it cost per request: this
  process (the SDK or the partition client), the front ends, and the rest of the stamp
  (from /proc); the compare row, what the front-end hop adds in all. On a loaded machine
  these move far less than the rates and latencies do. And what the servers did per
  request (tools/bench/stamp_counts.py): the partition servers' Call messages in and out,
  the extent nodes' journal group commits, and records per group commit.
- `scan`: rows/s scanning 1,000,000 entities of 100 bytes spread over 4 range partitions
  (made at bootstrap: splitting comes later), through the SDK. Target: >= 100,000 rows/s.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop
from stampsdk.aio import Client as AsyncClient

from common.config import KiB
from partition_layer.client import AsyncPartitionClient
from tools.bench.fresh_stamp import with_fresh_stamp
from tools.bench.measure import latency_metrics, row
from tools.bench.stamp_counts import StampCounts
from tools.local_stamp import LocalStamp

Progress = Callable[[str], None]
Append = Callable[[str, Sequence[bytes]], Awaitable[int]]
RECORD_BYTES = 1 * KiB
LOADS = ((1, 1), (32, 1), (32, 100))  # (appenders, records per append)
# Each path runs in turns of about PHASE_S, alternating, at least TURNS_MIN of each: this
# machine's speed drifts within seconds (other processes come and go), and short turns put
# both paths under the same conditions. The logs are the same from turn to turn (a new log
# costs its first append more).
PHASE_S = 1.0
TURNS_MIN = 2


def turns_for(seconds: float) -> int:
    """How many turns each path gets in `seconds` of its own."""
    return max(TURNS_MIN, round(seconds / PHASE_S))


ADMIN_FILE = "admin-connection-string"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc): what a front end costs, which the
    machine's other load does not inflate the way it inflates latencies."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def admin_sdk(stamp: LocalStamp) -> AsyncClient:
    """The SDK as the stamp's admin account (its connection string from `stamp up`)."""
    text = (Path(stamp.data_dir) / ADMIN_FILE).read_text().strip()
    return AsyncClient.from_connection_string(text)


def _direct(stamp: LocalStamp) -> AsyncPartitionClient:
    return AsyncPartitionClient([r.address for r in stamp.partition_managers()],
                                stamp.config.partition)


# ---- fe-append -------------------------------------------------------------------------------

def run_fe_append(seconds: float = 5.0, progress: Progress = lambda _: None
                  ) -> list[dict[str, Any]]:
    return with_fresh_stamp("", lambda stamp: uvloop.run(_fe_append(stamp, seconds, progress)),
                            progress, stream_layer_only=False)


async def _fe_append(stamp: LocalStamp, seconds: float, progress: Progress
                     ) -> list[dict[str, Any]]:
    sdk, direct = admin_sdk(stamp), _direct(stamp)
    account = sdk.account
    paths: dict[str, Append] = {
        "direct": lambda log, records: direct.append(account, log, records),
        "sdk": lambda log, records: sdk.append(log, records),
    }
    pids = stamp_pids(stamp)
    try:
        return await run_loads(paths, lambda _: pids, seconds, progress,
                               lambda name: {"path": name}, ("sdk", "direct"), stamp)
    finally:
        await sdk.close()
        await direct.close()


def stamp_pids(stamp: LocalStamp) -> tuple[list[int], list[int]]:
    """The front ends' pids, and every other process's of `stamp` (for CpuUse)."""
    fe_pids = [stamp.record(r.name).pid for r in stamp.front_ends()]
    return fe_pids, [pid for pid in stamp.pids() if pid not in fe_pids]


async def run_loads(paths: dict[str, Append],
                    pids_of: Callable[[str], tuple[list[int], list[int]]], seconds: float,
                    progress: Progress, params_of: Callable[[str], dict[str, Any]],
                    pair: tuple[str, str], stamp: LocalStamp | None = None
                    ) -> list[dict[str, Any]]:
    """Each of LOADS through each path, the paths taking turns (`turns_for(seconds)` of
    each, warmed first; which goes first alternates from turn to turn), with the CPU each
    path's stamp spent (`pids_of(path)`: its front ends' pids, the others') and, given the
    `stamp` both paths use, what its servers did per request (stamp_counts.py);
    `compare_rows` of each load."""
    rows: list[dict[str, Any]] = []
    for name, append in paths.items():
        await append(f"warm-{name}", [b"x"])
    for clients, batch in LOADS:
        found: dict[str, list[Phase]] = {p: [] for p in paths}
        cpu = {p: CpuUse() for p in paths}
        counts = {p: StampCounts() for p in paths}
        turns = turns_for(seconds)
        for turn in range(turns):
            # Each path goes first in every other turn: the second one of a turn runs on a
            # stamp the first one just warmed (and a path always first would flatter the
            # other).
            order = list(paths.items())
            for name, append in order if turn % 2 == 0 else reversed(order):
                progress(f"{clients}x{batch} via {name}, turn {turn + 1}/{turns}, "
                         f"{seconds / turns:g} s")
                fe_pids, other_pids = pids_of(name)
                # Scraped outside the CPU's window: a scrape costs the servers CPU too.
                counted = await StampCounts.now(stamp) if stamp is not None else None
                before = CpuUse.now(fe_pids, other_pids)
                found[name].append(await phase(append, name, clients, batch, seconds / turns))
                cpu[name].add(CpuUse.now(fe_pids, other_pids), before)
                if stamp is not None and counted is not None:
                    counts[name].add(await StampCounts.now(stamp), counted)
        rows.extend(compare_rows(found, cpu, clients, batch, params_of, pair,
                                 counts if stamp is not None else None))
    return rows


Phase = tuple[int, list[float], float]  # records appended, latency per call (s), elapsed s


@dataclass
class CpuUse:
    """CPU seconds spent by this process (the client: SDK or partition client), the front
    ends, and every other process of the stamp. Per request, they say where a path's cost
    goes, and they are not inflated by the machine's other load the way latencies are."""

    client_s: float = 0.0
    front_ends_s: float = 0.0
    stamp_s: float = 0.0

    @classmethod
    def now(cls, fe_pids: Sequence[int], other_pids: Sequence[int]) -> CpuUse:
        return cls(time.process_time(), sum(cpu_seconds(pid) for pid in fe_pids),
                   sum(cpu_seconds(pid) for pid in other_pids))

    def add(self, after: CpuUse, before: CpuUse) -> None:
        self.client_s += after.client_s - before.client_s
        self.front_ends_s += after.front_ends_s - before.front_ends_s
        self.stamp_s += after.stamp_s - before.stamp_s

    def per_request_us(self, requests: int) -> dict[str, float]:
        n = max(1, requests)
        return {"client_cpu_us_per_request": round(self.client_s * 1e6 / n, 1),
                "fe_cpu_us_per_request": round(self.front_ends_s * 1e6 / n, 1),
                "stamp_cpu_us_per_request": round(self.stamp_s * 1e6 / n, 1),
                "total_cpu_us_per_request": round(
                    (self.client_s + self.front_ends_s + self.stamp_s) * 1e6 / n, 1)}


async def phase(append: Append, tag: str, clients: int, batch: int, seconds: float) -> Phase:
    """(records appended, latency per call in s, elapsed s) of `clients` appenders."""
    records = [os.urandom(RECORD_BYTES) for _ in range(batch)]
    latencies: list[float] = []
    stop_at = time.monotonic() + seconds

    async def appender(index: int) -> None:
        log = f"bench-{tag}-{clients}-{batch}-{index}"
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            await append(log, records)
            latencies.append(time.perf_counter() - started)

    started = time.monotonic()
    await asyncio.gather(*(appender(i) for i in range(clients)))
    return len(latencies) * batch, latencies, time.monotonic() - started


def compare_rows(found: dict[str, list[Phase]], cpu: dict[str, CpuUse], clients: int,
                 batch: int, params_of: Callable[[str], dict[str, Any]],
                 pair: tuple[str, str], counts: dict[str, StampCounts] | None = None
                 ) -> list[dict[str, Any]]:
    """A row per path of one load (`params_of(path)` names it, with its `counts` per
    request if given), then the row comparing the two paths of `pair`: the first's
    records/s over the second's, and what it adds."""
    rows = []
    figures: dict[str, dict[str, Any]] = {}
    for name, phases in found.items():
        total = sum(p[0] for p in phases)
        elapsed = sum(p[2] for p in phases)
        latencies = [latency for p in phases for latency in p[1]]
        figures[name] = {"records_per_s": round(total / elapsed, 1),
                         "mb_per_s": round(total * RECORD_BYTES / elapsed / 1e6, 2),
                         **latency_metrics(latencies),
                         **cpu[name].per_request_us(len(latencies)),
                         **(counts[name].per_request(len(latencies)) if counts else {})}
        rows.append(row({**params_of(name), "clients": clients, "batch": batch,
                         "record_bytes": RECORD_BYTES, "turns": len(phases)}, figures[name]))
    first, second = figures[pair[0]], figures[pair[1]]
    rows.append(row({"compare": f"{pair[0]} vs {pair[1]}, {clients}x{batch}"},
                    {"ratio": round(first["records_per_s"]
                                    / max(second["records_per_s"], 1e-9), 3),
                     "added_p50_ms": round(first["p50_ms"] - second["p50_ms"], 3),
                     "fe_cpu_us_per_request": first["fe_cpu_us_per_request"],
                     "added_cpu_us_per_request": round(first["total_cpu_us_per_request"]
                                                       - second["total_cpu_us_per_request"],
                                                       1)}))
    return rows


# ---- scan ------------------------------------------------------------------------------------

SCAN_ACCOUNT_ROWS = 1_000_000
SCAN_VALUE_BYTES = 100
SCAN_PNAMES = 1000
SCAN_PARTITIONS = 4
PUTS_PER_BATCH = 100
LOAD_WRITERS = 32


def scan_config(account: str = "admin") -> str:
    """TOML for a stamp whose map starts with SCAN_PARTITIONS partitions, cut between the
    partition names of `account` the bench writes (pname_of)."""
    cuts = [f'"{account}/{pname_of(i * SCAN_PNAMES // SCAN_PARTITIONS)}"'
            for i in range(1, SCAN_PARTITIONS)]
    return f"[partition]\nbootstrap_split_keys = [{', '.join(cuts)}]\n"


def pname_of(index: int) -> str:
    return f"part-{index:04d}"


def run_scan(rows: int = SCAN_ACCOUNT_ROWS, trials: int = 3, progress: Progress = lambda _: None
             ) -> list[dict[str, Any]]:
    return with_fresh_stamp(scan_config(), lambda stamp: uvloop.run(
        _scan(stamp, rows, trials, progress)), progress, stream_layer_only=False)


async def _scan(stamp: LocalStamp, total: int, trials: int, progress: Progress
                ) -> list[dict[str, Any]]:
    sdk, direct = admin_sdk(stamp), _direct(stamp)
    try:
        current, _ = await direct.partition_map()
        progress(f"loading {total:,} entities of {SCAN_VALUE_BYTES} bytes over "
                 f"{len(current.partitions)} range partitions")
        await _load(direct, sdk.account, total, progress)
        results = []
        for trial in range(trials):
            started = time.perf_counter()
            count, last = 0, None
            async for page in sdk.scan().pages():
                for item in page.items:
                    key = (item.pname, item.row)
                    if last is not None and key <= last:
                        raise AssertionError(f"scan out of order: {key} after {last}")
                    last = key
                count += len(page.items)
            elapsed = time.perf_counter() - started
            if count != total:
                raise AssertionError(f"the scan returned {count} rows, not {total}")
            results.append(count / elapsed)
            progress(f"scan {trial + 1}/{trials}: {count:,} rows in {elapsed:.2f} s")
        return [row({"rows": total, "value_bytes": SCAN_VALUE_BYTES,
                     "partitions": len(current.partitions), "trials": trials},
                    {"rows_per_s_median": round(statistics.median(results)),
                     "rows_per_s_max": round(max(results))})]
    finally:
        await sdk.close()
        await direct.close()


async def _load(client: AsyncPartitionClient, account: str, total: int, progress: Progress
                ) -> None:
    """`total` rows, SCAN_PNAMES partition names with total / SCAN_PNAMES rows each, put in
    batches through the partition client (loading is not what is measured)."""
    per_pname = total // SCAN_PNAMES
    jobs = [(p, start) for p in range(SCAN_PNAMES) for start in range(0, per_pname,
                                                                      PUTS_PER_BATCH)]
    value = os.urandom(SCAN_VALUE_BYTES)
    done = 0

    async def writer(index: int) -> None:
        nonlocal done
        for p, start in jobs[index::LOAD_WRITERS]:
            ops = [("put", f"row-{r:08d}", value)
                   for r in range(start, min(start + PUTS_PER_BATCH, per_pname))]
            await client.batch(account, pname_of(p), ops)
            done += len(ops)
            if done % 100_000 < len(ops):
                progress(f"  {done:,} rows loaded")
    await asyncio.gather(*(writer(i) for i in range(LOAD_WRITERS)))
