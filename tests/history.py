"""A mixed workload through the partition client that records what was acknowledged, and a
checker that proves, after faults, that nothing acknowledged was lost, changed, reordered or
applied twice (STYLE.md: "a checker, not hope").

Each writer owns its own log and its own entity group, and writes sequentially, so what the
stamp must show is exactly determined by the writer's history:
- a log holds, from its first sequence number, consecutive records with no gap; every
  acknowledged record sits at its acknowledged sequence number, unchanged; no record appears
  twice; a record that is not acknowledged may be there only if its append was in doubt;
- an entity holds the value of its last acknowledged put, or of a put in doubt after it.
Records are made from (writer, number), so a large one is checked without being kept.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from common.errors import NotFound, StampError
from partition_layer.client import PartitionClient
from tests.checker import read_whole_log

ACCOUNT = "acct"
ROWS_PER_WRITER = 8
LARGE_RECORD_BYTES = (96 * 1024, 320 * 1024)  # goes to blob data, and as large appends


def record_bytes(writer: int, number: int, size: int) -> bytes:
    head = f"w{writer}-n{number}|".encode()
    if size <= len(head):
        return head
    seed = hashlib.blake2b(head, digest_size=32).digest()
    return head + (seed * (size // len(seed) + 1))[:size - len(head)]


def parse_record(data: bytes) -> tuple[int, int]:
    head = data.split(b"|", 1)[0].decode()
    w, n = head.split("-")
    return int(w[1:]), int(n[1:])


@dataclass
class WriterHistory:
    writer: int
    log: str
    group: str
    # log: number -> (first seq of its append + index, size); acked and in-doubt records
    acked_records: dict[int, tuple[int, int]] = field(default_factory=dict)
    doubtful_records: dict[int, int] = field(default_factory=dict)  # number -> size
    # entities: row -> (last acked value number, numbers in doubt after it)
    acked_values: dict[int, int] = field(default_factory=dict)
    doubtful_values: dict[int, set[int]] = field(default_factory=dict)
    ops: int = 0
    errors: int = 0


class MixedWorkload:
    """Writers on threads, each with its own client, until `stop()`: appends of 1-5 small
    records (sometimes one large one) and unconditional puts, seeded."""

    def __init__(self, client_factory: Callable[[], PartitionClient], writers: int,
                 seed: int, large_every: int = 25) -> None:
        self.client_factory = client_factory
        self.histories = [WriterHistory(w, f"log-{w}", f"group-{w}") for w in range(writers)]
        self.seed = seed
        self.large_every = large_every
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._numbers = [0] * writers
        self.failures: list[BaseException] = []

    def start(self) -> None:
        self._stop.clear()
        self._threads = [threading.Thread(target=self._run, args=(h,), daemon=True,
                                          name=f"writer-{h.writer}") for h in self.histories]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout_s: float = 60.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout_s)
            if thread.is_alive():
                raise AssertionError(f"{thread.name} did not stop within {timeout_s}s")
        if self.failures:
            raise self.failures[0]

    def ops(self) -> int:
        return sum(h.ops for h in self.histories)

    def _next(self, writer: int) -> int:
        self._numbers[writer] += 1
        return self._numbers[writer]

    def _run(self, history: WriterHistory) -> None:
        rng = random.Random(self.seed * 1000 + history.writer + self._numbers[history.writer])
        try:
            with self.client_factory() as client:
                while not self._stop.is_set():
                    if rng.random() < 0.6:
                        self._append(client, history, rng)
                    else:
                        self._put(client, history, rng)
        except BaseException as exc:  # surfaced by stop(): a bug in the workload itself
            self.failures.append(exc)

    def _append(self, client: PartitionClient, history: WriterHistory,
                rng: random.Random) -> None:
        if self.large_every and rng.randrange(self.large_every) == 0:
            sizes = [rng.randint(*LARGE_RECORD_BYTES)]
        else:
            sizes = [rng.randint(16, 1024) for _ in range(rng.randint(1, 5))]
        numbers = [self._next(history.writer) for _ in sizes]
        records = [record_bytes(history.writer, n, s) for n, s in zip(numbers, sizes,
                                                                      strict=True)]
        try:
            first = client.append(ACCOUNT, history.log, records)
        except StampError:
            history.errors += 1
            history.doubtful_records.update(zip(numbers, sizes, strict=True))
            return
        history.ops += 1
        for i, (n, s) in enumerate(zip(numbers, sizes, strict=True)):
            history.acked_records[n] = (first + i, s)

    def _put(self, client: PartitionClient, history: WriterHistory,
             rng: random.Random) -> None:
        row = rng.randrange(ROWS_PER_WRITER)
        number = self._next(history.writer)
        value = record_bytes(history.writer, number, rng.randint(8, 512))
        try:
            client.put(ACCOUNT, history.group, row.to_bytes(2, "big"), value)
        except StampError:
            history.errors += 1
            history.doubtful_values.setdefault(row, set()).add(number)
            return
        history.ops += 1
        history.acked_values[row] = number
        history.doubtful_values.pop(row, None)  # a later acknowledged put overrides them


def check(client: PartitionClient, histories: list[WriterHistory]) -> dict[str, int]:
    """Raise AssertionError naming the first violation; return what was checked."""
    checked = {"records": 0, "entities": 0}
    for h in histories:
        checked["records"] += _check_log(client, h)
        checked["entities"] += _check_entities(client, h)
    return checked


def _check_log(client: PartitionClient, h: WriterHistory) -> int:
    if not h.acked_records and not h.doubtful_records:
        return 0
    records = read_whole_log(client, ACCOUNT, h.log)
    at: dict[int, bytes] = dict(records)
    seen: set[int] = set()
    for seq, data in records:
        writer, number = parse_record(data)
        assert writer == h.writer, f"{h.log}@{seq}: a record of writer {writer}"
        assert number not in seen, f"{h.log}@{seq}: record n{number} appears twice"
        seen.add(number)
        size = h.acked_records.get(number, (0, h.doubtful_records.get(number, -1)))[1]
        assert size >= 0, f"{h.log}@{seq}: record n{number} was never written"
        assert data == record_bytes(h.writer, number, size), \
            f"{h.log}@{seq}: record n{number} changed"
    for number, (seq, size) in h.acked_records.items():
        assert at.get(seq) == record_bytes(h.writer, number, size), \
            f"{h.log}: acknowledged record n{number} at seq {seq} lost or changed " \
            f"(found {at.get(seq, b'nothing')[:24]!r})"
    return len(records)


def _check_entities(client: PartitionClient, h: WriterHistory) -> int:
    checked = 0
    for row in range(ROWS_PER_WRITER):
        acked = h.acked_values.get(row)
        doubtful = h.doubtful_values.get(row, set())
        if acked is None and not doubtful:
            continue
        try:
            value, _ = client.get(ACCOUNT, h.group, row.to_bytes(2, "big"))
        except NotFound:
            assert acked is None, f"{h.group}/{row}: acknowledged put n{acked} lost"
            continue
        writer, number = parse_record(value)
        assert value == record_bytes(writer, number, len(value)), f"{h.group}/{row}: changed"
        allowed = doubtful | ({acked} if acked is not None else set())
        assert writer == h.writer and number in allowed, \
            f"{h.group}/{row}: holds n{number}, expected n{acked} or one of {sorted(doubtful)}"
        if acked is not None:
            assert number >= acked, f"{h.group}/{row}: went back to n{number} from n{acked}"
        checked += 1
    return checked
