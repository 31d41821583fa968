"""A front end's Record calls to CURP witnesses (DESIGN §11; partition_layer/curp.py step 3;
common/proto/witness.proto), batched: every fast write sends one record to each of its
partition's three witnesses, and at thousands of writes a second a Record RPC per record
would cost a Python front end more than the writes themselves.

Contracts:
- `record(address, partition_id, record, waiter)` queues one record for the witness at
  `address`. Every record queued for the same (witness, partition) within one event-loop
  turn goes out in one Record RPC — more only past `call_records_max` records or
  `call_bytes_max` bytes — sent by one callback the first record of the turn scheduled
  (call_soon). Each RPC is its own task: many are in flight, none waits for another.
- `waiter.witnessed(verdict)` is called exactly once per record, from the event loop, never
  from within `record`: with the witness's verdict (a witness_pb2.Verdict value) or None
  when the call failed (an error, its `call_timeout_s`, a reply short of verdicts) — whether
  that witness holds the record is then unknown, which its caller must take as a refusal.
- `in_flight` counts the records queued or in flight; `room(n)` says whether n more stay
  within `records_in_flight_max` (a caller without room sends none: its write keeps the
  sync path rather than pile up behind a slow witness).
- `usable(addresses)`: False while any of them is suspect — its last Record call failed less
  than `suspect_s` ago (by `monotonic`). A caller then sends no records to that set: with a
  witness down every fast write would wait out its timeout and a sync, slower than the
  sync path; one call a while later finds out whether it is back.
- `close()` cancels the calls in flight (their waiters get None) and closes the streams and
  channels this object opened (`over_grpc`: a RecordStream per witness, witness_stream.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from common import rpc
from common.errors import StampError
from common.proto import witness_pb2 as wpb
from common.proto import witness_pb2_grpc as wpb_grpc
from frontend.witness_stream import StreamedWitness

log = logging.getLogger(__name__)

# address -> a Witness stub (or a test's fake): `Record(request, timeout=s)` is awaitable.
StubFor = Callable[[str], Any]


class Witnessed(Protocol):
    """What waits for one record's verdict (module contract)."""

    def witnessed(self, verdict: int | None, /) -> None: ...


Entry = tuple[wpb.WitnessRecord, Witnessed]


class WitnessCalls:
    """Record calls to witnesses, batched per (witness, partition) and loop turn."""

    def __init__(self, stub_for: StubFor, call_timeout_s: float, call_records_max: int,
                 call_bytes_max: int, records_in_flight_max: int, suspect_s: float = 0.0,
                 channels: rpc.ChannelCache | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        assert call_records_max > 0 and call_bytes_max > 0 and records_in_flight_max > 0
        self._stub_for = stub_for
        self.call_timeout_s = call_timeout_s
        self.call_records_max = call_records_max
        self.call_bytes_max = call_bytes_max
        self.records_in_flight_max = records_in_flight_max
        self._channels = channels
        # The record streams `over_grpc` opened (witness_stream.py), closed with this.
        self._streams: Callable[[], list[StreamedWitness]] = list
        self._queued: dict[tuple[str, int], list[Entry]] = {}
        self._flush_scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.in_flight = 0
        self.calls = 0  # Record RPCs made
        self.suspect_s = suspect_s
        self._monotonic = monotonic
        self._suspect_until: dict[str, float] = {}  # only witnesses whose call failed

    @classmethod
    def over_grpc(cls, message_bytes_max: int, call_timeout_s: float, call_records_max: int,
                  call_bytes_max: int, records_in_flight_max: int,
                  suspect_s: float) -> WitnessCalls:
        """Calls on a channel per witness made as every internal channel of the front end
        is (common/rpc.ChannelCache, as the partition client's: mutual TLS with this
        process's identity, the isolation guard, replaced in TRANSIENT_FAILURE)."""
        channels = rpc.ChannelCache(message_bytes_max)
        stubs: dict[str, tuple[Any, StreamedWitness]] = {}

        def stub_for(address: str) -> StreamedWitness:
            channel = channels.get(address)
            known = stubs.get(address)
            if known is None or known[0] is not channel:  # a fresh channel: a fresh stream
                if known is not None:  # the old one's calls fail (their writes sync)
                    closing = asyncio.get_running_loop().create_task(known[1].close())
                    calls._tasks.add(closing)
                    closing.add_done_callback(calls._tasks.discard)
                known = stubs[address] = (channel, StreamedWitness(
                    wpb_grpc.WitnessStub(channel)))
            return known[1]
        calls = cls(stub_for, call_timeout_s, call_records_max, call_bytes_max,
                    records_in_flight_max, suspect_s, channels)
        calls._streams = lambda: [s for _, s in stubs.values()]
        return calls

    def room(self, records: int) -> bool:
        return self.in_flight + records <= self.records_in_flight_max

    def usable(self, addresses: tuple[str, ...]) -> bool:
        """Whether none of `addresses` is suspect (module contract)."""
        if not self._suspect_until:
            return True
        now = self._monotonic()
        for address in addresses:
            until = self._suspect_until.get(address)
            if until is not None:
                if until > now:
                    return False
                del self._suspect_until[address]
        return True

    def _failed(self, address: str) -> None:
        if address not in self._suspect_until:
            log.warning("witness %s: a Record call failed; no records to it for %.1f s",
                        address, self.suspect_s)
        self._suspect_until[address] = self._monotonic() + self.suspect_s

    def record(self, address: str, partition_id: int, record: wpb.WitnessRecord,
               waiter: Witnessed) -> None:
        key = (address, partition_id)
        queue = self._queued.get(key)
        if queue is None:
            queue = self._queued[key] = []
        queue.append((record, waiter))
        self.in_flight += 1
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Send what this loop turn queued: one call per (witness, partition) and batch."""
        self._flush_scheduled = False
        queued, self._queued = self._queued, {}
        loop = asyncio.get_running_loop()
        for (address, partition_id), entries in queued.items():
            for batch in self._batches(entries):
                task = loop.create_task(self._call(address, partition_id, batch))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    def _batches(self, entries: list[Entry]) -> list[list[Entry]]:
        """`entries` cut into calls within the per-call bounds (a record larger than
        `call_bytes_max` goes alone: the witness's own limits judge it)."""
        if len(entries) == 1:
            return [entries]
        batches: list[list[Entry]] = [[]]
        size = 0
        for entry in entries:
            nbytes = entry[0].ByteSize()
            current = batches[-1]
            if current and (len(current) >= self.call_records_max
                            or size + nbytes > self.call_bytes_max):
                current = []
                batches.append(current)
                size = 0
            current.append(entry)
            size += nbytes
        return batches

    async def _call(self, address: str, partition_id: int, batch: list[Entry]) -> None:
        self.calls += 1
        verdicts: Sequence[int] = ()
        try:
            request = wpb.RecordRequest(partition_id=partition_id,
                                        records=[record for record, _ in batch])
            reply = await rpc.call(self._stub_for(address).Record(
                request, timeout=self.call_timeout_s))
            verdicts = reply.verdicts
            if len(verdicts) != len(batch):
                log.warning("witness %s answered %d verdicts to %d records (partition %d)",
                            address, len(verdicts), len(batch), partition_id)
        except StampError as exc:
            # Common while a witness restarts; each write then takes the sync path.
            log.debug("witness %s: Record for partition %d failed: %s",
                      address, partition_id, exc)
            self._failed(address)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug: its writes take the sync path, and the log says so
            log.exception("witness %s: Record for partition %d", address, partition_id)
            self._failed(address)
        finally:
            self.in_flight -= len(batch)
            _answer(batch, verdicts)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for stream in self._streams():
            await stream.close()
        if self._channels is not None:
            await self._channels.close()


def _answer(batch: list[Entry], verdicts: Sequence[int]) -> None:
    """Each waiter of `batch` its verdict, or None past the verdicts there are."""
    for index, (_, waiter) in enumerate(batch):
        try:
            waiter.witnessed(verdicts[index] if index < len(verdicts) else None)
        except Exception:  # one waiter's bug must not leave the others waiting
            log.exception("a witness verdict's waiter")
