"""Stream-layer benchmarks on a stamp of their own (3 stream managers, 9 extent nodes):

- `seal`: from the SIGKILL (or the SIGSTOP: a frozen node) of the primary extent node of a
  stream's open extent to the first append acknowledged on a new extent, as the stream's
  client sees it: detection (a failed or timed-out append), seal at the smallest commit
  length, new extent, and the append. p50/p99 over `trials` of each case.
- `stream-append`: 4 KiB appends with 1/8/32 appenders and 1 MiB appends with 4, through the
  stream client with small extents (many rollovers), beside the same load on one extent
  straight through the extent client, the two taking turns (RATIO_TURNS). Target: stream
  rate >= 80% of the extent rate.
- `sm-failover`: SIGKILL the stream manager leader -> next successful namespace change.
  Target: <= 2 s.
- `ec` (its stamp part): sequential read throughput of one sealed extent through the stream
  client, replicated, then erasure-coded RS(6,3) with 0 and with 3 data fragments'
  nodes SIGKILLed (every read of theirs rebuilt from the other fragments), and the time the
  conversion took.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import uvloop

from common.checksums import crc32c
from common.config import KiB, MiB
from common.errors import ExtentFull, StampError
from common.ids import random_extent_id
from stream_layer.client import AsyncStreamClient
from tools.bench.fresh_stamp import with_fresh_stamp
from tools.bench.measure import latency_metrics, row
from tools.local_stamp import LocalStamp

Progress = Callable[[str], None]
STREAM_EXTENT_BYTES = 16 * MiB  # small extents: a 4 KiB load at 5,000/s rolls over every ~0.8 s


def _with_stamp(config_text: str, body: Callable[[LocalStamp], Any], progress: Progress
                ) -> Any:
    return with_fresh_stamp(config_text, body, progress, stream_layer_only=True)


def _client(stamp: LocalStamp) -> AsyncStreamClient:
    return AsyncStreamClient([r.address for r in stamp.stream_managers()],
                             stamp.config.extent_node, stamp.config.stream_manager)


# ---- seal ------------------------------------------------------------------------------------

SEAL_CASES = ("killed", "frozen")


def run_seal(trials: int = 20, progress: Progress = lambda _: None) -> list[dict[str, Any]]:
    config = "[stream_manager]\nheartbeat_interval_ms = 200\nsuspect_after_ms = 1000\n"
    return _with_stamp(config, lambda stamp: uvloop.run(_seal_trials(stamp, trials, progress)),
                       progress)


async def _seal_trials(stamp: LocalStamp, trials: int, progress: Progress
                       ) -> list[dict[str, Any]]:
    """For each case, `trials` times: the primary of the stream's open extent is SIGKILLed
    (`killed`) or SIGSTOPped (`frozen`: alive to the kernel, silent to everyone); timed from
    the signal to the first append acknowledged on a new extent, as the stream's client sees
    it (detecting the failure, sealing, adding an extent and the append all included)."""
    client = _client(stamp)
    rows = []
    try:
        stream = await client.create_stream("bench-seal")
        block = os.urandom(4 * KiB)
        for case in SEAL_CASES:
            latencies: list[float] = []
            for trial in range(trials):
                for _ in range(20):  # a warm extent, with appends in its pipeline history
                    await stream.append([block])
                extent = stream.extents[-1]
                victim = stamp.name_of(extent.addresses[0])
                pid = stamp.record(victim).pid
                if case == "killed":
                    stamp.kill(victim)
                else:
                    os.kill(pid, signal.SIGSTOP)
                signalled = time.perf_counter()
                try:
                    [location] = await stream.append([block])
                    latencies.append(time.perf_counter() - signalled)
                finally:
                    if case == "killed":
                        stamp.start(victim)
                    else:
                        os.kill(pid, signal.SIGCONT)
                if location.extent_id == extent.extent_id:
                    raise StampError(f"an append was acknowledged on extent "
                                     f"{extent.extent_id} with its primary {case}")
                await _wait_not_suspect(client, victim)
                progress(f"{case} primary, trial {trial + 1}/{trials}: "
                         f"{latencies[-1] * 1000:.1f} ms")
            rows.append(row({"primary": case, "trials": trials, "replicas": 3},
                            {**latency_metrics(latencies),
                             "mean_ms": round(sum(latencies) / len(latencies) * 1000, 3)}))
    finally:
        await client.close()
    return rows


async def _wait_not_suspect(client: AsyncStreamClient, name: str, timeout_s: float = 20.0
                            ) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        nodes = {n.name: n for n in await client.sm.list_nodes()}
        if name in nodes and not nodes[name].suspect and nodes[name].state == "alive":
            return
        await asyncio.sleep(0.05)
    raise StampError(f"{name} did not come back within {timeout_s}s")


# ---- stream-append ---------------------------------------------------------------------------

PHASES = [(4 * KiB, 1), (4 * KiB, 8), (4 * KiB, 32), (1 * MiB, 4)]
# The stream load and the extent load take turns, so that the machine's drift during a phase
# (about 30% here) falls on both alike: measured one after the other, the 1 MiB ratio ranged
# from 0.65 to 0.98 with the same code.
RATIO_TURNS = 3


def run_stream_append(seconds: float = 5.0, progress: Progress = lambda _: None
                      ) -> list[dict[str, Any]]:
    config = f"[extent_node]\nextent_bytes_max = {STREAM_EXTENT_BYTES}\n"
    return _with_stamp(config, lambda stamp: uvloop.run(_stream_phases(stamp, seconds,
                                                                       progress)), progress)


async def _stream_phases(stamp: LocalStamp, seconds: float, progress: Progress
                         ) -> list[dict[str, Any]]:
    client = _client(stamp)
    rows = []
    try:
        for index, (block_bytes, clients) in enumerate(PHASES):
            stream = await client.create_stream(f"bench-{index}")
            rollovers = len(stream.extents)
            # The same load straight through the extent client, for the ratio: a full extent
            # is followed by one created beforehand, without the stream manager.
            roller = _ExtentRoller(client, [n.address for n in stamp.extent_nodes()[::3]])
            extent_seconds = min(seconds, 3.0) if block_bytes > 64 * KiB else seconds
            stream_load, extent_load = _Load(), _Load()
            for turn in range(RATIO_TURNS):
                progress(f"{block_bytes} B x {clients} appenders, turn {turn + 1}/"
                         f"{RATIO_TURNS}: stream, then one extent")
                await stream_load.run(lambda blocks, crcs, s=stream: s.append(blocks),
                                      block_bytes, clients, seconds / RATIO_TURNS)
                await extent_load.run(roller.append, block_bytes, clients,
                                      extent_seconds / RATIO_TURNS)
            await stream.refresh()
            rollovers = len(stream.extents) - rollovers
            rows.append(row(
                {"block_bytes": block_bytes, "clients": clients,
                 "extent_bytes": STREAM_EXTENT_BYTES},
                {"appends_per_s": round(stream_load.rate, 1),
                 "mb_per_s": round(stream_load.rate * block_bytes / 1e6, 1),
                 **latency_metrics(stream_load.latencies),
                 "extents_crossed": rollovers,
                 "extent_appends_per_s": round(extent_load.rate, 1),
                 "ratio": round(stream_load.rate / extent_load.rate, 3)}))
    finally:
        await client.close()
    return rows


class _ExtentRoller:
    """Appends to one extent at a time, moving to the next pre-created one when it is full."""

    def __init__(self, client: AsyncStreamClient, nodes: list[str]) -> None:
        self.client, self.nodes = client, nodes
        self.current: int | None = None
        self.next: asyncio.Task[int] | None = None

    async def _create(self) -> int:
        extent_id = random_extent_id()
        await self.client.extents.create_replicated(extent_id, self.nodes)
        return extent_id

    async def append(self, blocks: list[bytes], crcs: list[int]) -> Any:
        while True:
            if self.current is None:
                self.current = await self._create()
                self.next = asyncio.ensure_future(self._create())
            current = self.current
            try:
                return await self.client.extents.append(self.nodes[0], current, blocks, crcs)
            except ExtentFull:
                if self.current == current and self.next is not None:
                    self.current = await self.next
                    self.next = asyncio.ensure_future(self._create())


class _Load:
    """Appends by `clients` concurrent appenders, over one or more runs; the rate is over
    the time the runs took together."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.seconds = 0.0

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    async def run(self, append: Callable[[list[bytes], list[int]], Any], block_bytes: int,
                  clients: int, seconds: float) -> None:
        payload = os.urandom(block_bytes)
        blocks, crcs = [payload], [crc32c(payload)]
        stop_at = time.monotonic() + seconds

        async def appender() -> None:
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                await append(blocks, crcs)
                self.latencies.append(time.perf_counter() - started)

        began = time.perf_counter()
        await asyncio.gather(*(appender() for _ in range(clients)))
        self.seconds += time.perf_counter() - began


# ---- sm-failover -----------------------------------------------------------------------------

async def _leader(stamp: LocalStamp, client: AsyncStreamClient, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for rec in stamp.stream_managers():
            try:
                if (await client.sm.status(rec.address)).leader:
                    return rec.name
            except StampError:
                continue
        await asyncio.sleep(0.02)
    raise StampError(f"no stream manager leader within {timeout_s}s")


def run_sm_failover(trials: int = 5, progress: Progress = lambda _: None
                    ) -> list[dict[str, Any]]:
    return _with_stamp("", lambda stamp: uvloop.run(_failovers(stamp, trials, progress)),
                       progress)


async def _failovers(stamp: LocalStamp, trials: int, progress: Progress
                     ) -> list[dict[str, Any]]:
    client = _client(stamp)
    took: list[float] = []
    try:
        await client.create_stream("warm-up")
        for trial in range(trials):
            leader = await _leader(stamp, client)
            stamp.kill(leader)
            killed_at = time.perf_counter()
            await client.sm.create_stream(f"after-failover-{trial}")
            took.append(time.perf_counter() - killed_at)
            progress(f"trial {trial + 1}/{trials}: {took[-1]:.3f} s")
            stamp.start(leader)
            await client.sm.list_streams()  # the group is whole again before the next kill
    finally:
        await client.close()
    return [row({"trials": trials, "replicas": 3},
                {"p50_ms": latency_metrics(took)["p50_ms"],
                 "max_seconds": round(max(took), 3),
                 "mean_seconds": round(sum(took) / len(took), 3)})]


# ---- ec: coded reads ---------------------------------------------------------------------

EC_EXTENT_BYTES = 64 * MiB
EC_BLOCK_BYTES = 1 * MiB
EC_LOST_FRAGMENTS = (1, 3, 5)  # data fragments: the reads that need them are all rebuilt


def run_ec_read(rounds: int = 3, progress: Progress = lambda _: None) -> list[dict[str, Any]]:
    return _with_stamp("", lambda stamp: uvloop.run(_ec_reads(stamp, rounds, progress)),
                       progress)


async def _ec_reads(stamp: LocalStamp, rounds: int, progress: Progress
                    ) -> list[dict[str, Any]]:
    from stream_layer.ec.convert import convert_extent

    client = _client(stamp)
    try:
        stream = await client.create_stream("bench-ec")
        progress(f"writing {EC_EXTENT_BYTES // MiB} MiB in {EC_BLOCK_BYTES // MiB} MiB blocks")
        block = os.urandom(EC_BLOCK_BYTES)
        for _ in range(EC_EXTENT_BYTES // EC_BLOCK_BYTES):
            await stream.append([block])
        await stream.seal_last()
        extent_id = stream.extents[0].extent_id
        params = {"extent_bytes": (await client.sm.get_extent(extent_id)).sealed_length,
                  "block_bytes": EC_BLOCK_BYTES}
        rows = [row({**params, "layout": "replicated", "unavailable_fragments": 0},
                    await _scan(stream, rounds, progress, "replicated"))]
        started = time.perf_counter()
        info = await convert_extent(client.sm, client.extents, extent_id, 6, 3)
        converted_s = time.perf_counter() - started
        progress(f"converted to RS(6,3) in {converted_s:.2f} s")
        coded = {**params, "layout": "erasure_coded", "k": info.ec_k, "m": info.ec_m}
        rows.append(row({**coded, "unavailable_fragments": 0},
                        {**await _scan(stream, rounds, progress, "coded"),
                         "convert_seconds": round(converted_s, 3)}))
        for index in EC_LOST_FRAGMENTS:
            stamp.kill(info.fragments[index])
        rows.append(row({**coded, "unavailable_fragments": len(EC_LOST_FRAGMENTS)},
                        await _scan(stream, rounds, progress,
                                    f"coded, {len(EC_LOST_FRAGMENTS)} fragments lost")))
        base = rows[1]["metrics"]["mb_per_s"]
        rows[2]["metrics"]["ratio"] = round(rows[2]["metrics"]["mb_per_s"] / base, 3)
    finally:
        await client.close()
    return rows


async def _scan(stream: Any, rounds: int, progress: Progress, what: str) -> dict[str, Any]:
    """Scan the whole stream `rounds` times (blocks(): 4 MiB reads one at a time, every frame
    verified): MB/s = 10^6 bytes per second over all rounds. Then read each block once by
    its location: p50/p99 of one block read."""
    total = 0
    locations = []
    began = time.perf_counter()
    for _ in range(rounds):
        locations = []
        async for loc, data in stream.blocks():
            total += len(data)
            locations.append(loc)
    seconds = time.perf_counter() - began
    latencies = []
    for loc in locations:
        started = time.perf_counter()
        await stream.read(loc)
        latencies.append(time.perf_counter() - started)
    progress(f"{what}: {total / seconds / 1e6:.1f} MB/s")
    return {"mb_per_s": round(total / seconds / 1e6, 1), "seconds": round(seconds, 3),
            **{f"block_{k}": v for k, v in latency_metrics(latencies).items()}}
