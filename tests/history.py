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

Optional parts (issue 17's split/merge load): more logs per writer (`logs_per_writer`),
conditional puts (`cas_every`: a put with the row's current ETag, which must succeed unless a
put before it was in doubt, and now and then one with a stale ETag, which must be refused —
ETag conditions respected), and atomic batches over several rows (`batch_every`).
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from common.errors import NotFound, PreconditionFailed, StampError
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
    logs: tuple[str, ...] = ()  # every log it writes (`log` first); () means just `log`
    # log: number -> (first seq of its append + index, size); acked and in-doubt records
    acked_records: dict[int, tuple[int, int]] = field(default_factory=dict)
    doubtful_records: dict[int, int] = field(default_factory=dict)  # number -> size
    record_logs: dict[int, str] = field(default_factory=dict)  # acked number -> its log
    # entities: row -> (last acked value number, numbers in doubt after it)
    acked_values: dict[int, int] = field(default_factory=dict)
    doubtful_values: dict[int, set[int]] = field(default_factory=dict)
    # row -> the ETag of its last acknowledged put, while no put after it is in doubt
    etags: dict[int, str] = field(default_factory=dict)
    stale_etags: dict[int, str] = field(default_factory=dict)  # row -> an older ETag
    ops: int = 0
    errors: int = 0
    # Conditions broken by the stamp: a stale ETag accepted, a current one refused.
    violations: list[str] = field(default_factory=list)

    def all_logs(self) -> tuple[str, ...]:
        return self.logs or (self.log,)


class MixedWorkload:
    """Writers on threads, each with its own client, until `stop()`: appends of 1-5 small
    records (sometimes one large one) and unconditional puts, seeded."""

    def __init__(self, client_factory: Callable[[], PartitionClient], writers: int,
                 seed: int, large_every: int = 25, logs_per_writer: int = 1,
                 cas_every: int = 0, batch_every: int = 0) -> None:
        self.client_factory = client_factory
        self.histories = [WriterHistory(
            w, f"log-{w}", f"group-{w}",
            tuple(f"log-{w}" if i == 0 else f"log-{w}-{i}" for i in range(logs_per_writer)))
            for w in range(writers)]
        self.seed = seed
        self.large_every = large_every
        self.cas_every = cas_every
        self.batch_every = batch_every
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
                    elif self.batch_every and rng.randrange(self.batch_every) == 0:
                        self._batch(client, history, rng)
                    elif self.cas_every and rng.randrange(self.cas_every) == 0:
                        self._cas(client, history, rng)
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
        log = rng.choice(history.all_logs())
        try:
            first = client.append(ACCOUNT, log, records)
        except StampError:
            history.errors += 1
            history.doubtful_records.update(zip(numbers, sizes, strict=True))
            return
        history.ops += 1
        for i, (n, s) in enumerate(zip(numbers, sizes, strict=True)):
            history.acked_records[n] = (first + i, s)
            history.record_logs[n] = log

    def _put(self, client: PartitionClient, history: WriterHistory,
             rng: random.Random) -> None:
        row = rng.randrange(ROWS_PER_WRITER)
        number = self._next(history.writer)
        value = record_bytes(history.writer, number, rng.randint(8, 512))
        try:
            etag = client.put(ACCOUNT, history.group, row.to_bytes(2, "big"), value)
        except StampError:
            self._in_doubt(history, row, number)
            return
        self._acked(history, row, number, etag)

    def _in_doubt(self, history: WriterHistory, row: int, number: int,
                  count: bool = True) -> None:
        history.errors += count
        history.doubtful_values.setdefault(row, set()).add(number)
        history.etags.pop(row, None)  # which ETag the row has is now unknown
        history.stale_etags.pop(row, None)

    def _acked(self, history: WriterHistory, row: int, number: int, etag: str,
               count: bool = True) -> None:
        history.ops += count
        history.acked_values[row] = number
        history.doubtful_values.pop(row, None)  # a later acknowledged put overrides them
        old = history.etags.get(row)
        if old is not None and old != etag:
            history.stale_etags[row] = old
        history.etags[row] = etag

    def _cas(self, client: PartitionClient, history: WriterHistory,
             rng: random.Random) -> None:
        """A put conditioned on the row's ETag: the current one (known only while nothing
        after the last acknowledged put is in doubt) must be accepted, a stale one refused."""
        row = rng.randrange(ROWS_PER_WRITER)
        current, stale = history.etags.get(row), history.stale_etags.get(row)
        if current is None:
            self._put(client, history, rng)
            return
        use_stale = stale is not None and rng.random() < 0.3
        number = self._next(history.writer)
        value = record_bytes(history.writer, number, rng.randint(8, 512))
        try:
            etag = client.put(ACCOUNT, history.group, row.to_bytes(2, "big"), value,
                              if_match=stale if use_stale else current)
        except PreconditionFailed:
            if not use_stale:
                # Nothing in doubt since `current` was acknowledged, and a retry of this put
                # carries its token (the first answer is returned): a refusal is a bug.
                history.violations.append(f"{history.group}/{row}: put with the current "
                                          f"ETag {current} refused")
            history.ops += 1
            return
        except StampError:
            self._in_doubt(history, row, number)
            return
        if use_stale:
            history.violations.append(f"{history.group}/{row}: put with the stale ETag "
                                      f"{stale} accepted (current {current})")
        self._acked(history, row, number, etag)

    def _batch(self, client: PartitionClient, history: WriterHistory,
               rng: random.Random) -> None:
        """One atomic batch putting the same value number into 2-4 rows of the group."""
        rows = rng.sample(range(ROWS_PER_WRITER), rng.randint(2, 4))
        number = self._next(history.writer)
        value = record_bytes(history.writer, number, rng.randint(8, 256))
        try:
            etags = client.batch(ACCOUNT, history.group,
                                 [("put", row.to_bytes(2, "big"), value) for row in rows])
        except StampError:
            for i, row in enumerate(rows):
                self._in_doubt(history, row, number, count=i == 0)
            return
        for i, (row, etag) in enumerate(zip(rows, etags, strict=True)):
            self._acked(history, row, number, etag, count=i == 0)


def check(client: PartitionClient, histories: list[WriterHistory]) -> dict[str, int]:
    """Raise AssertionError naming the first violation; return what was checked."""
    checked = {"records": 0, "entities": 0}
    for h in histories:
        assert not h.violations, h.violations[0]
        checked["records"] += _check_log(client, h)
        checked["entities"] += _check_entities(client, h)
    return checked


def _check_log(client: PartitionClient, h: WriterHistory) -> int:
    """Every log of the writer: no record twice (in it or across its logs), none changed or
    never written, every acknowledged one at its sequence number in its log."""
    if not h.acked_records and not h.doubtful_records:
        return 0
    seen: set[int] = set()
    count = 0
    for log in h.all_logs():
        count += _check_one_log(client, h, log, seen)
    return count


def _check_one_log(client: PartitionClient, h: WriterHistory, log: str, seen: set[int]
                   ) -> int:
    records = read_whole_log(client, ACCOUNT, log)
    at: dict[int, bytes] = dict(records)
    for seq, data in records:
        writer, number = parse_record(data)
        assert writer == h.writer, f"{log}@{seq}: a record of writer {writer}"
        assert number not in seen, f"{log}@{seq}: record n{number} appears twice"
        seen.add(number)
        size = h.acked_records.get(number, (0, h.doubtful_records.get(number, -1)))[1]
        assert size >= 0, f"{log}@{seq}: record n{number} was never written"
        assert data == record_bytes(h.writer, number, size), \
            f"{log}@{seq}: record n{number} changed"
        acked_log = h.record_logs.get(number)
        assert acked_log in (None, log), \
            f"{log}@{seq}: record n{number} was acknowledged in {acked_log}"
    for number, (seq, size) in h.acked_records.items():
        if h.record_logs.get(number, h.log) != log:
            continue
        assert at.get(seq) == record_bytes(h.writer, number, size), \
            f"{log}: acknowledged record n{number} at seq {seq} lost or changed " \
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
