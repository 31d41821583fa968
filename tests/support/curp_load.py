"""SDK load for the CURP probes (issue 32, partition_layer/curp.py): writers appending to many
logs and putting distinct rows through a front end, a reader of what is being written, and
the check that nothing acknowledged — and nothing any read saw — is missing afterwards.

Contracts:
- `CurpLoad(text, writers, logs)`: `start()` runs `writers` SDK writers (each appends to logs
  of its own, in turn, and puts rows of its own, each row once) and one reader on a thread
  of their own, until `stop()`. A write is *acknowledged* when the SDK returned its answer;
  an error (in doubt, refused) acknowledges nothing and is only counted in `errors`.
- The reader gets the row each writer is putting now and reads the log it appends to now,
  from the next record it has not seen: whatever a read returned is *seen* (§8 invariant 7:
  no read may see a write that later vanishes).
- `check(pc, account)`: every acknowledged append is at its sequence number, every
  acknowledged put's row holds its value with the ETag its writer was given, and every
  record and row seen is there as seen. Call it after `stop()`.
- `witnesses_of(stamp, partition_id)`: the witnesses the partition's newest metadata record
  names, read from its metadata stream as any client can: the set its next owner fences
  (partition_meta.py), hence the one whose faults a probe is about. `log_tail_replicas`:
  the replicas of its commit log's last extent.
- `curp_answers(stamp)`: how fe-1 answered its fast writes, by answer (fast, synced,
  fallback_acked...) and fallback cause, from its Prometheus counters; `wait_fast` waits
  for more fast answers.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from stampsdk import aio
from stampsdk.errors import StampError

from partition_layer.client import PartitionClient
from partition_layer.partition_meta import decode_meta
from partition_layer.partition_streams import stream_name
from partition_layer.witness_set import WitnessSet
from stream_layer.client import AsyncStream, AsyncStreamClient
from tests.support.waiting import wait_until
from tools.chaos.extents import read_whole_log
from tools.local_stamp import LocalStamp
from tools.scrape import scrape

GROUP = "group"  # the entity group every row is put in
ANSWERS = ("fast", "synced", "fallback_acked", "fallback_failed", "in_doubt")
SCRAPE_TIMEOUT_S = 5.0
READ_PAUSE_S = 0.005  # between the reader's rounds

T = TypeVar("T")


@dataclass
class Outcome:
    """What the load saw, appended to by its thread and read by the test's."""

    appended: list[tuple[str, int, bytes]] = field(default_factory=list)  # log, seq, record
    put: dict[str, tuple[bytes, str]] = field(default_factory=dict)  # row -> value, ETag
    seen_records: dict[tuple[str, int], bytes] = field(default_factory=dict)
    seen_rows: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)  # writes' errors, by class name


class CurpLoad:
    """Writers and a reader over one SDK client (module contract)."""

    def __init__(self, connection_string: str, writers: int = 4, logs: int = 16,
                 timeout_s: float = 20.0) -> None:
        assert logs % writers == 0, "each log belongs to one writer"
        self.text = connection_string
        self.writers = writers
        self.logs = logs
        # The SDK's own deadline for one call (its retries included): a write in flight when
        # the owner dies is retried through the failover within it.
        self.timeout_s = timeout_s
        self.outcome = Outcome()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # What each writer is writing now, for the reader: writer -> log, writer -> row.
        self._log_now: dict[int, str] = {}
        self._row_now: dict[int, str] = {}

    # ---- running ------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()),
                                        name="curp-load")
        self._thread.start()

    def stop(self) -> None:
        """Stop and wait for the writers; each finishes (or fails) the write it is in first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s + 10)
            assert not self._thread.is_alive(), "the load did not stop"

    def acked(self) -> int:
        """Writes acknowledged so far (appends and puts)."""
        return len(self.outcome.appended) + len(self.outcome.put)

    def wait_acked(self, more: int, timeout_s: float, what: str) -> None:
        """Until `more` writes were acknowledged from now on."""
        target = self.acked() + more
        wait_until(lambda: self.acked() >= target, timeout_s, f"{more} writes acknowledged "
                   f"{what} (errors so far: {dict(self.outcome.errors)})")

    async def _run(self) -> None:
        client = aio.Client.from_connection_string(self.text, timeout_s=self.timeout_s)
        try:
            await asyncio.gather(*(self._writer(client, i) for i in range(self.writers)),
                                 self._reader(client))
        finally:
            await client.close()

    async def _writer(self, client: aio.Client, index: int) -> None:
        out = self.outcome
        number = 0
        while not self._stop.is_set():
            log = f"log-{(index + number * self.writers) % self.logs}"
            record = f"w{index}-n{number}".encode()
            row, value = f"row-{index}-{number}", f"v{index}-{number}".encode()
            self._log_now[index], self._row_now[index] = log, row
            try:
                out.appended.append((log, await client.append(log, [record]), record))
                out.put[row] = (value, await client.put(GROUP, row, value))
            except StampError as exc:
                out.errors[type(exc).__name__] += 1  # not acknowledged: nothing to check
            number += 1

    async def _reader(self, client: aio.Client) -> None:
        out = self.outcome
        next_seq: dict[str, int] = {}
        while not self._stop.is_set():
            for index in range(self.writers):
                log, row = self._log_now.get(index), self._row_now.get(index)
                try:
                    if log is not None:
                        for seq, data in await client.read(log, next_seq.get(log, 0)):
                            out.seen_records[(log, seq)] = data
                            next_seq[log] = seq + 1
                    if row is not None:
                        out.seen_rows[row] = await client.get(GROUP, row)
                except StampError:
                    pass  # NotFound (not written yet), or the owner moving: nothing seen
            # Pacing, not waiting: a round whose reads all failed at once (nothing written
            # yet) would otherwise spin on the writers' loop.
            await asyncio.sleep(READ_PAUSE_S)

    # ---- checking -----------------------------------------------------------------------------

    def check(self, pc: PartitionClient, account: str) -> None:
        """Every acknowledged write, and everything read, is there (module contract)."""
        out = self.outcome
        logs: dict[str, dict[int, bytes]] = {}

        def log_of(name: str) -> dict[int, bytes]:
            if name not in logs:
                logs[name] = dict(read_whole_log(pc, account, name))
            return logs[name]
        for log, seq, record in out.appended:
            assert log_of(log).get(seq) == record, \
                f"{log} lost {record!r}, acknowledged at {seq}"
        for (log, seq), record in out.seen_records.items():
            assert log_of(log).get(seq) == record, \
                f"{log} lost {record!r}, which a read saw at {seq}"
        for row, (value, etag) in out.put.items():
            assert pc.get(account, GROUP, row) == (value, etag), f"row {row} lost or changed"
        for row, (value, etag) in out.seen_rows.items():
            assert pc.get(account, GROUP, row) == (value, etag), \
                f"row {row} lost or changed after a read saw it"


def witnesses_of(stamp: LocalStamp, partition_id: int) -> WitnessSet | None:
    """The set the partition's newest metadata record names (module contract)."""
    async def newest(stream: AsyncStream) -> WitnessSet | None:
        record = None
        async for _, block in stream.blocks():
            record = block
        assert record is not None, f"partition {partition_id} has no metadata record"
        return decode_meta(record).witnesses
    return asyncio.run(_on_stream(stamp, stream_name(partition_id, "meta"), newest))


def log_tail_replicas(stamp: LocalStamp, partition_id: int) -> tuple[str, ...]:
    """The addresses of the replicas of the last extent of the partition's commit log, as
    the stream manager knows it now."""
    async def tail(stream: AsyncStream) -> tuple[str, ...]:
        return tuple(stream.extents[-1].addresses)
    return asyncio.run(_on_stream(stamp, stream_name(partition_id, "log"), tail))


async def _on_stream(stamp: LocalStamp, name: str,
                     read: Callable[[AsyncStream], Awaitable[T]]) -> T:
    client = AsyncStreamClient([r.address for r in stamp.stream_managers()])
    try:
        return await read(await client.open_stream(name))
    finally:
        await client.close()


def curp_answers(stamp: LocalStamp, front_end: str = "fe-1") -> dict[str, float]:
    """How the front end answered its fast writes (`ANSWERS`), and why it fell back
    ("fallback_" + cause)."""
    samples = asyncio.run(scrape(stamp.record(front_end).metrics_address, SCRAPE_TIMEOUT_S))
    answers = {answer: samples.value("stamp_fe_curp_writes_total", answer=answer)
               for answer in ANSWERS}
    for labels, value in samples.series("stamp_fe_curp_fallbacks_total"):
        answers[f"fallback_{labels.get('cause', '')}"] = value
    return answers


def wait_fast(stamp: LocalStamp, more: int, timeout_s: float, what: str) -> None:
    """Until the front end acknowledged `more` writes on the fast path from now on; a
    timeout says how it answered meanwhile."""
    before = curp_answers(stamp)["fast"]
    try:
        wait_until(lambda: curp_answers(stamp)["fast"] >= before + more, timeout_s, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; fe-1's answers (fast: {before:g} before): "
                             f"{curp_answers(stamp)}") from None
