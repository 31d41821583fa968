"""`stamp bench curp` (issue 32, DESIGN §11): what CURP's fast path does for writes through
the SDK. Two stamps of the default shape run side by side for the whole bench, one with CURP
on (`[partition] curp` and `[front_end] curp`) and one with it off, both on this tree. For
each load, the two take turns of about a second (`turns_for`, as `stamp bench fe-append`:
this machine's speed drifts within seconds), which goes first alternating from turn to turn.
The stamp not being measured idles meanwhile: each side pays the same for the other's
background work.

Loads (one SDK client per stamp, its admin account, warmed first):
1. one appender, one record (1 KiB) per append, round robin over 64 logs: appends commute;
2. one client putting 1 KiB values, each to a new row of one entity group: puts commute;
3. one appender on one log: each append conflicts with the one before it until that is
   synced (its witnesses refuse, or the owner answers synced);
4. 32 appenders, each on a log of its own, one record per append;
5. 32 appenders, 100 records per append.

Per load and side: the rate (`records_per_s`, `ops_per_s` for puts), `p50_ms`, `p99_ms`; the
fast path's share of the writes it answered (`fast_share_ratio`: fast / (fast + synced +
fallback_acked + fallback_failed), from the front ends' counters, frontend/curp_path.py's
`CurpCounters.fast_share`; 0 with CURP off), and the writes acknowledged fast of all the
load's writes (`fast_per_write_ratio`: the share above leaves out the writes a front end sent
down the plain path, as it does a write to a key it recorded moments ago); and what the
witnesses cost the disk: the bytes their journals wrote over all 9 extent nodes per write
(`witness_bytes_per_write`, its garbage drops included) and the records the front ends sent
them per write (`witness_records_per_write`: 3 for a write recorded at all three). A compare
row per load:
`ratio` (CURP on over off, of the rate) and `added_p50_ms` / `added_p99_ms` (on less off).

Contract: the counters are read before and after each load (all its turns) from the stamp of
that side only, so the other stamp's turns count nothing; the witnesses' garbage drops of the
load's last writes may land after its last read and count to the next load. A scrape that
fails counts 0 (tools/scrape.py): a short figure, never a made-up one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields
from typing import Any

import uvloop
from stampsdk.aio import Client as AsyncClient

from common.config import KiB
from tools.bench.fresh_stamp import with_fresh_stamp
from tools.bench.front_end import Phase, admin_sdk, phase, turns_for
from tools.bench.measure import latency_metrics, row
from tools.local_stamp import LocalStamp
from tools.scrape import Samples, scrape_many

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
Rows = list[dict[str, Any]]
CURP_ON = "[partition]\ncurp = true\n[front_end]\ncurp = true\n"
CURP_OFF = ""
SIDES = ("on", "off")  # CURP on, CURP off; the compare row divides the first by the second
VALUE_BYTES = 1 * KiB  # a record's or a put's value
ROUND_ROBIN_LOGS = 64
# Each side's time per load: 5 loads x 2 sides x 12 s is about 2 minutes, plus the scrapes
# and the two stamps' start-up.
SECONDS_DEFAULT = 12.0
WARM_WRITES = 8  # per stamp and kind: each front end learns the witness sets it will use
ANSWERS = ("fast", "synced", "fallback_acked", "fallback_failed", "in_doubt")


@dataclass(frozen=True)
class Load:
    """One load: `clients` writers, each putting rows (`op="put"`) or appending `batch`
    records per call to `logs` logs of its own, round robin."""

    name: str
    op: str  # "append" or "put"
    clients: int
    batch: int
    logs: int

    @property
    def rate_name(self) -> str:
        return "ops_per_s" if self.op == "put" else "records_per_s"


LOADS = (Load("1x1 over 64 logs", "append", 1, 1, ROUND_ROBIN_LOGS),
         Load("put new rows", "put", 1, 1, 0),
         Load("1x1", "append", 1, 1, 1),
         Load("32x1", "append", 32, 1, 1),
         Load("32x100", "append", 32, 100, 1))


# ---- counters ------------------------------------------------------------------------------

@dataclass
class CurpCounts:
    """A stamp's CURP counters (summed over its front ends and extent nodes), or what they
    did over a load when `add`ed up from before/after snapshots."""

    fast: float = 0.0
    synced: float = 0.0
    fallback_acked: float = 0.0
    fallback_failed: float = 0.0
    in_doubt: float = 0.0
    records_sent: float = 0.0  # witness records the front ends sent
    witness_written_bytes: float = 0.0  # the witness journals' bytes written, all nodes

    @classmethod
    async def now(cls, stamp: LocalStamp) -> CurpCounts:
        addresses = [r.metrics_address for r in (*stamp.front_ends(), *stamp.extent_nodes())]
        counts = cls()
        for samples in (await scrape_many(addresses)).values():
            if samples is not None:
                counts.add_samples(samples)
        return counts

    def add_samples(self, samples: Samples) -> None:
        """Add one process's page: a front end's CURP counters (fe_main.watch_curp) or an
        extent node's witness journal (extent_node/main.py); a page has one or the other."""
        for answer in ANSWERS:
            setattr(self, answer, getattr(self, answer)
                    + samples.value("stamp_fe_curp_writes_total", answer=answer))
        self.records_sent += samples.value("stamp_fe_curp_records_total")
        self.witness_written_bytes += samples.value(
            "stamp_en_witness_journal_written_bytes_total")

    def add(self, after: CurpCounts, before: CurpCounts) -> None:
        """Add what happened between two snapshots: `after` less `before`."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(after, f.name)
                    - getattr(before, f.name))

    def fast_share(self) -> float:
        """Of the fast-path writes answered, the share acknowledged after one round trip (as
        CurpCounters.fast_share; in doubt ones are not answered); 0 when none was."""
        answered = self.fast + self.synced + self.fallback_acked + self.fallback_failed
        return self.fast / answered if answered else 0.0

    def metrics(self, writes: int) -> dict[str, float]:
        """The load's CURP figures for `writes` write calls (0 counts as 1). Beside the fast
        share, the writes acknowledged fast of ALL the load's writes: a front end sends a
        write to a key it recorded at witnesses within CurpSettings.recent_key_ms down the
        plain path, which no CURP counter counts (one log appended to in a loop)."""
        n = max(1, writes)
        return {"fast_share_ratio": round(self.fast_share(), 3),
                "fast_per_write_ratio": round(self.fast / n, 3),
                "witness_bytes_per_write": round(self.witness_written_bytes / n, 1),
                "witness_records_per_write": round(self.records_sent / n, 3)}


# ---- loads ---------------------------------------------------------------------------------

Write = Callable[[int], Awaitable[None]]  # one write of writer `index`


async def closed_loop(write: Write, clients: int, seconds: float, batch: int = 1) -> Phase:
    """(records written, latency per call in s, elapsed s) of `clients` writers, each
    calling `write(its index)` back to back for `seconds`."""
    latencies: list[float] = []
    stop_at = time.monotonic() + seconds

    async def writer(index: int) -> None:
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            await write(index)
            latencies.append(time.perf_counter() - started)

    started = time.monotonic()
    await asyncio.gather(*(writer(i) for i in range(clients)))
    return len(latencies) * batch, latencies, time.monotonic() - started


class Side:
    """One stamp's SDK client and the writes of each load to it (row keys never repeat)."""

    def __init__(self, name: str, stamp: LocalStamp) -> None:
        self.name = name
        self.stamp = stamp
        self.client: AsyncClient = admin_sdk(stamp)
        self._rows = itertools.count()
        self._record = os.urandom(VALUE_BYTES)

    async def warm(self) -> None:
        """A few writes of each kind, through both front ends likely, before any is timed:
        the owners' first synced answers tell the front ends the witness sets."""
        for i in range(WARM_WRITES):
            await self.client.append(f"warm-{self.name}-{i}", [b"x"])
            await self.put(0)

    async def put(self, _index: int) -> None:
        await self.client.put(f"bench-{self.name}-rows", f"row-{next(self._rows):012d}",
                              self._record)

    async def run(self, load: Load, seconds: float) -> Phase:
        if load.op == "put":
            return await closed_loop(self.put, load.clients, seconds)
        if load.logs == 1:
            return await phase(self.client.append, self.name, load.clients, load.batch,
                               seconds)
        return await closed_loop(self._round_robin(load), load.clients, seconds, load.batch)

    def _round_robin(self, load: Load) -> Write:
        records = [self._record] * load.batch
        turns = [itertools.count() for _ in range(load.clients)]

        async def write(index: int) -> None:
            log_index = next(turns[index]) % load.logs
            await self.client.append(f"bench-{self.name}-rr-{index}-{log_index}", records)
        return write


async def measure_load(load: Load, sides: list[Side], seconds: float, progress: Progress
                       ) -> Rows:
    """`load` on each side, taking turns (`turns_for(seconds)` each); its rows."""
    turns = turns_for(seconds)
    found: dict[str, list[Phase]] = {side.name: [] for side in sides}
    counts = {side.name: CurpCounts() for side in sides}
    before = {side.name: await CurpCounts.now(side.stamp) for side in sides}
    for turn in range(turns):
        # Each side goes first in every other turn (a side always first would be measured
        # on a machine the other had not yet loaded).
        for side in sides if turn % 2 == 0 else reversed(sides):
            progress(f"{load.name}, CURP {side.name}, turn {turn + 1}/{turns}, "
                     f"{seconds / turns:g} s")
            found[side.name].append(await side.run(load, seconds / turns))
    for side in sides:
        counts[side.name].add(await CurpCounts.now(side.stamp), before[side.name])
    rows = load_rows(load, found, counts)
    _warn_if_odd(load, rows, counts, progress)
    return rows


def load_rows(load: Load, found: dict[str, list[Phase]], counts: dict[str, CurpCounts]
              ) -> Rows:
    """A row per side of `load` (in SIDES order), then the row comparing CURP on with off."""
    rows, figures = [], {}
    for name in SIDES:
        phases = found[name]
        written = sum(p[0] for p in phases)
        elapsed = sum(p[2] for p in phases)
        latencies = [latency for p in phases for latency in p[1]]
        figures[name] = {load.rate_name: round(written / max(elapsed, 1e-9), 1),
                         **latency_metrics(latencies), **counts[name].metrics(len(latencies))}
        rows.append(row({"curp": name, "load": load.name, "op": load.op,
                         "clients": load.clients, "batch": load.batch, "logs": load.logs,
                         "value_bytes": VALUE_BYTES, "turns": len(phases)}, figures[name]))
    on, off = figures["on"], figures["off"]
    rows.append(row({"compare": f"CURP on vs off, {load.name}"},
                    {"ratio": round(on[load.rate_name] / max(off[load.rate_name], 1e-9), 3),
                     "added_p50_ms": round(on["p50_ms"] - off["p50_ms"], 3),
                     "added_p99_ms": round(on["p99_ms"] - off["p99_ms"], 3),
                     "fast_share_ratio": on["fast_share_ratio"]}))
    return rows


def _warn_if_odd(load: Load, rows: Rows, counts: dict[str, CurpCounts],
                 progress: Progress) -> None:
    """Say so loudly (on the progress display and in the log) when the CURP side's fast path
    was not taken on a load of commuting writes, when a fast write failed or was left in
    doubt, or when the CURP-off side sent anything to witnesses."""
    odd = []
    if load.logs != 1 and rows[0]["metrics"]["fast_share_ratio"] == 0.0:
        odd.append("CURP on: fast share 0, the fast path was not taken")
    for name in SIDES:
        if counts[name].fallback_failed or counts[name].in_doubt:
            odd.append(f"CURP {name}: {counts[name].fallback_failed:g} fast writes failed, "
                       f"{counts[name].in_doubt:g} in doubt")
    if counts["off"].records_sent:
        odd.append("CURP off: records sent to witnesses")
    for what in odd:
        log.warning("%s: %s", load.name, what)
        progress(f"WARNING {load.name}: {what}")


# ---- the bench -----------------------------------------------------------------------------

def run_curp(seconds: float = SECONDS_DEFAULT, progress: Progress = lambda _: None) -> Rows:
    """Every load of LOADS on a stamp with CURP on and one with it off (module doc)."""
    def with_off(on_stamp: LocalStamp) -> Rows:
        progress("the stamp with CURP off")
        return with_fresh_stamp(CURP_OFF, lambda off_stamp: uvloop.run(
            _compare(on_stamp, off_stamp, seconds, progress)), progress,
            stream_layer_only=False)

    progress("the stamp with CURP on")
    return with_fresh_stamp(CURP_ON, with_off, progress, stream_layer_only=False)


async def _compare(on_stamp: LocalStamp, off_stamp: LocalStamp, seconds: float,
                   progress: Progress) -> Rows:
    sides = [Side("on", on_stamp), Side("off", off_stamp)]
    try:
        for side in sides:
            progress(f"warming CURP {side.name}")
            await side.warm()
        rows: Rows = []
        for load in LOADS:
            rows.extend(await measure_load(load, sides, seconds, progress))
        return rows
    finally:
        for side in sides:
            await side.client.close()
