"""Workloads below the front ends that record what was acknowledged, and checkers that prove,
after faults, that nothing acknowledged was lost, reordered or changed (STYLE.md: "a checker,
not hope"): appends to one extent (the stream layer's probe tests) and appends to logs
through the partition client. The mixed workload of `stamp chaos` is tools/chaos/workload.py,
its checker tools/chaos/check.py. Failures raise AssertionError: these serve tests."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from common.errors import StampError
from stream_layer import framing
from stream_layer.extent_client import AsyncExtentClient
from stream_layer.framing import Location
from tools.chaos.check import read_log
from tools.chaos.history import AccountView

if TYPE_CHECKING:
    from partition_layer.client import AsyncPartitionClient, PartitionClient


@dataclass
class AppendHistory:
    acked: list[tuple[Location, bytes]] = field(default_factory=list)
    failed: list[tuple[bytes, str]] = field(default_factory=list)


async def pipelined_appends(client: AsyncExtentClient, primary: str, extent_id: int,
                            appenders: int, stop: asyncio.Event, deadline_s: float = 30.0,
                            block_bytes: int = 512, history: AppendHistory | None = None
                            ) -> AppendHistory:
    """Concurrent appenders, each block unique, until `stop` is set or every appender has
    seen an error (the extent is broken) or the deadline passes. Pass `history` to watch it
    grow (see `acknowledged`)."""
    history = history if history is not None else AppendHistory()
    ends = time.monotonic() + deadline_s

    async def appender(index: int) -> None:
        n = 0
        while not stop.is_set() and time.monotonic() < ends:
            blocks = [f"a{index}-n{n}-b{b}|".encode().ljust(block_bytes, b".")
                      for b in range(1 + n % 3)]
            n += 1
            try:
                locs = await client.append(primary, extent_id, blocks)
            except StampError as exc:
                history.failed.extend((b, type(exc).__name__) for b in blocks)
                return
            history.acked.extend(zip(locs, blocks, strict=True))

    await asyncio.gather(*(appender(i) for i in range(appenders)))
    return history


def check_extent_image(image: bytes, history: AppendHistory, extent_id: int) -> None:
    """Every acknowledged block is in the sealed image, at its location, unchanged; the image
    is whole frames whose checksums hold; no location is acknowledged twice."""
    by_offset = {off: bytes(p) for off, p in framing.iter_frames(image, "sealed image")}
    seen = set()
    for loc, data in history.acked:
        assert loc.extent_id == extent_id
        assert loc not in seen, f"location {loc} acknowledged twice"
        seen.add(loc)
        assert loc.end <= len(image), f"acknowledged {loc} lies past the seal at {len(image)}"
        assert by_offset.get(loc.offset) == data, f"acknowledged block at {loc} changed or lost"


async def read_image(client: AsyncExtentClient, address: str, extent_id: int,
                     length: int) -> bytes:
    """The whole extent [0, length) from one replica, in verified chunks."""
    parts = []
    offset = 0
    while offset < length:
        frames = await client.read_frames(address, extent_id, offset,
                                          min(4 << 20, length - offset))
        parts.append(frames)
        offset += len(frames)
    return b"".join(parts)



async def acknowledged(acked: list[object], count: int, timeout_s: float = 15.0) -> None:
    """Wait until `acked` holds `count` entries: a load is under way, mid-pipeline."""
    deadline = time.monotonic() + timeout_s
    while len(acked) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"only {len(acked)} of {count} appends acknowledged in "
                                 f"{timeout_s}s")
        await asyncio.sleep(0.01)


# ---- logs of the partition layer ---------------------------------------------------------

async def append_load(client: AsyncPartitionClient, writers: int, stop: asyncio.Event,
                      acked: list[tuple[str, int, bytes]]) -> None:
    """`writers` appenders over 4 logs until `stop`; (log, seq, record) once acknowledged."""

    async def writer(index: int) -> None:
        n = 0
        while not stop.is_set():
            log, record = f"log-{index % 4}", f"w{index}-{n}".encode()
            seq = await client.append("acct", log, [record])
            acked.append((log, seq, record))
            n += 1
    await asyncio.gather(*(writer(i) for i in range(writers)))


def check_logs(pc: PartitionClient, acked: list[tuple[str, int, bytes]]) -> None:
    """Every acknowledged record at its sequence number, no gap below next_seq (the read
    itself refuses a hole), and no record twice (tokens made retries exactly-once)."""
    for log in {log for log, _, _ in acked}:
        records = read_whole_log(pc, "acct", log)
        by_seq = dict(records)
        for _, seq, record in (a for a in acked if a[0] == log):
            assert by_seq.get(seq) == record, f"{log}: acknowledged record {seq} lost/changed"
        datas = [d for _, d in records]
        assert len(datas) == len(set(datas)), f"{log}: a record was appended twice"


def read_whole_log(pc: PartitionClient, account: str, log: str) -> list[tuple[int, bytes]]:
    """Every record of `log` from its first to its next sequence number, asserting there is
    no gap or reordering below next (a log that was never written is empty)."""
    records, violations = read_log(AccountView(pc, account), log)
    assert not violations, violations[0]
    return records
