"""The mixed workload: writers on threads, each with its own client, until `stop()` — appends
of 1-5 small records (now and then one large one) carrying a token, unconditional puts, puts
conditioned on the row's ETag, atomic batches — plus, for `stamp chaos`, a scanner and
subscribers (tools/chaos/followers.py). Every outcome goes to a `Tally` (ops by kind, and per
second for the availability timeline); every acknowledgement to the writer's WriterHistory.

Appends carry a token made from the writer and the append's first record number, and an
append that failed is sent again with the same token (`token_retries` times) before it is
left in doubt: the stamp must answer a retry from the first attempt, so a retried append is
applied once — the checker would find a record twice otherwise. Seeded: the same seed makes
the same choices (the interleaving with faults is not).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable

from stampsdk.errors import PreconditionFailed, StampError

from tools.chaos.history import (
    ROWS_PER_WRITER,
    LogEntityClient,
    OpLog,
    WriterHistory,
    entity_key,
    log_key,
    record_bytes,
    row_key,
    value_id,
)

ACCOUNT = "acct"  # the account the probe tests' PartitionClient workloads write in
LARGE_RECORD_BYTES = (96 * 1024, 320 * 1024)  # goes to blob data, and as large appends
RETRY_PAUSE_S = 0.5  # before an append is sent again with its token
STOP_TIMEOUT_S = 60.0

ClientFactory = Callable[[], LogEntityClient]


class Tally:
    """Outcomes of operations by kind, and per second since `started` (thread-safe)."""

    def __init__(self, started: float | None = None) -> None:
        self.started = time.monotonic() if started is None else started
        self.ok: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.ok_per_s: defaultdict[int, int] = defaultdict(int)
        self.failed_per_s: defaultdict[int, int] = defaultdict(int)
        self._lock = threading.Lock()

    def add(self, kind: str, ok: bool, count: int = 1) -> None:
        second = int(time.monotonic() - self.started)
        with self._lock:
            (self.ok if ok else self.failed)[kind] += count
            (self.ok_per_s if ok else self.failed_per_s)[second] += count

    def timeline(self, seconds: int) -> list[dict[str, int]]:
        """[{"t": second, "ok": n, "failed": n}] for every second of [0, seconds)."""
        with self._lock:
            return [{"t": s, "ok": self.ok_per_s.get(s, 0),
                     "failed": self.failed_per_s.get(s, 0)} for s in range(seconds)]


class MixedWorkload:
    """Writers on threads (module docstring). `histories[w]` is writer w's history."""

    def __init__(self, client_factory: ClientFactory, writers: int, seed: int,
                 large_every: int = 25, logs_per_writer: int = 1, cas_every: int = 0,
                 batch_every: int = 0, token_retries: int = 0, tally: Tally | None = None,
                 retry_pause_s: float = RETRY_PAUSE_S, oplog: OpLog | None = None) -> None:
        self.client_factory = client_factory
        self.histories = [WriterHistory(
            w, f"log-{w}", f"group-{w}",
            tuple(f"log-{w}" if i == 0 else f"log-{w}-{i}" for i in range(logs_per_writer)))
            for w in range(writers)]
        self.seed = seed
        self.large_every = large_every
        self.cas_every = cas_every
        self.batch_every = batch_every
        self.token_retries = token_retries
        self.retry_pause_s = retry_pause_s
        self.tally = tally or Tally()
        self.oplog = oplog or OpLog()  # every op with its time bounds, for linearizability
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

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
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
        self.histories[writer].issued = self._numbers[writer]
        return self._numbers[writer]

    def _run(self, history: WriterHistory) -> None:
        rng = random.Random(self.seed * 1000 + history.writer + self._numbers[history.writer])
        try:
            with self.client_factory() as client:
                while not self._stop.is_set():
                    self.step(client, history, rng)
        except BaseException as exc:  # surfaced by stop(): a bug in the workload itself
            self.failures.append(exc)

    def step(self, client: LogEntityClient, history: WriterHistory,
             rng: random.Random) -> None:
        """One operation of writer `history.writer`, chosen by `rng`."""
        if rng.random() < 0.6:
            self._append(client, history, rng)
        elif self.batch_every and rng.randrange(self.batch_every) == 0:
            self._batch(client, history, rng)
        elif self.cas_every and rng.randrange(self.cas_every) == 0:
            self._cas(client, history, rng)
        else:
            self._put(client, history, rng)

    def _append(self, client: LogEntityClient, history: WriterHistory,
                rng: random.Random) -> None:
        if self.large_every and rng.randrange(self.large_every) == 0:
            sizes = [rng.randint(*LARGE_RECORD_BYTES)]
        else:
            sizes = [rng.randint(16, 1024) for _ in range(rng.randint(1, 5))]
        numbers = [self._next(history.writer) for _ in sizes]
        records = [record_bytes(history.writer, n, s)
                   for n, s in zip(numbers, sizes, strict=True)]
        log = rng.choice(history.all_logs())
        token = f"s{self.seed}-w{history.writer}-n{numbers[0]}"
        # One op from the first attempt to the answer: retries carry its token.
        call = ("append", tuple(value_id(r) for r in records))
        invoke = self.oplog.begin()
        for attempt in range(self.token_retries + 1):
            try:
                first = client.append(log, records, token=token)
                break
            except StampError:
                self.tally.add("append", False)
                history.errors += 1
                history.doubtful_records.update(zip(numbers, sizes, strict=True))
                if attempt == self.token_retries or self._stop.wait(self.retry_pause_s):
                    self.oplog.in_doubt(log_key(log), call, invoke, f"w{history.writer}")
                    return
        self.oplog.done(log_key(log), call, invoke, first, f"w{history.writer}")
        history.ops += 1
        self.tally.add("append_retried" if attempt else "append", True)
        for i, (n, s) in enumerate(zip(numbers, sizes, strict=True)):
            history.record_acked(n, first + i, s, log)

    def _put(self, client: LogEntityClient, history: WriterHistory,
             rng: random.Random) -> None:
        row = rng.randrange(ROWS_PER_WRITER)
        number = self._next(history.writer)
        value = record_bytes(history.writer, number, rng.randint(8, 512))
        key, call = entity_key(history.group, row), ("put", value_id(value), None, None)
        invoke = self.oplog.begin()
        try:
            etag = client.put(history.group, row_key(row), value)
        except StampError:
            self.oplog.in_doubt(key, call, invoke, f"w{history.writer}")
            self.tally.add("put", False)
            history.errors += 1
            history.value_in_doubt(row, number)
            return
        self.oplog.done(key, call, invoke, ("ok", etag), f"w{history.writer}")
        self.tally.add("put", True)
        history.ops += 1
        history.value_acked(row, number, etag)

    def _cas(self, client: LogEntityClient, history: WriterHistory,
             rng: random.Random) -> None:
        """A put conditioned on the row's ETag: the current one (known only while nothing
        after the last acknowledged put is in doubt) must be accepted, a stale one refused."""
        row = rng.randrange(ROWS_PER_WRITER)
        current, stale = history.etags.get(row), history.stale_etags.get(row)
        if current is None:
            self._put(client, history, rng)
            return
        use_stale = stale is not None and rng.random() < 0.3
        kind = "cas_stale" if use_stale else "cas"
        number = self._next(history.writer)
        value = record_bytes(history.writer, number, rng.randint(8, 512))
        if_match = stale if use_stale else current
        key, call = entity_key(history.group, row), ("put", value_id(value), if_match, None)
        invoke = self.oplog.begin()
        try:
            etag = client.put(history.group, row_key(row), value, if_match=if_match)
        except PreconditionFailed:
            self.oplog.done(key, call, invoke, ("refused",), f"w{history.writer}")
            if not use_stale:
                # Nothing in doubt since `current` was acknowledged, and a retry of this put
                # carries its token (the first answer is returned): a refusal is a bug.
                history.violations.append(f"{history.group}/{row}: put with the current "
                                          f"ETag {current} refused")
            self.tally.add(kind, True)
            history.ops += 1
            return
        except StampError:
            self.oplog.in_doubt(key, call, invoke, f"w{history.writer}")
            self.tally.add(kind, False)
            history.errors += 1
            history.value_in_doubt(row, number)
            return
        self.oplog.done(key, call, invoke, ("ok", etag), f"w{history.writer}")
        if use_stale:
            history.violations.append(f"{history.group}/{row}: put with the stale ETag "
                                      f"{stale} accepted (current {current})")
        self.tally.add(kind, True)
        history.ops += 1
        history.value_acked(row, number, etag)

    def _batch(self, client: LogEntityClient, history: WriterHistory,
               rng: random.Random) -> None:
        """One atomic batch putting the same value number into 2-4 rows of the group."""
        rows = rng.sample(range(ROWS_PER_WRITER), rng.randint(2, 4))
        number = self._next(history.writer)
        value = record_bytes(history.writer, number, rng.randint(8, 256))
        keys = [entity_key(history.group, row) for row in rows]
        call, who = ("put", value_id(value), None, None), f"w{history.writer}"
        invoke = self.oplog.begin()
        try:
            etags = client.batch(history.group, [("put", row_key(row), value) for row in rows])
        except StampError:
            for key in keys:
                self.oplog.in_doubt(key, call, invoke, who)
            self.oplog.batch_in_doubt(f"{who}-n{number}", keys, call[1], invoke)
            self.tally.add("batch", False)
            history.errors += 1
            history.batch_in_doubt(number, rows)
            return
        for key, etag in zip(keys, etags, strict=True):
            self.oplog.done(key, call, invoke, ("ok", etag), who)
        self.tally.add("batch", True)
        history.ops += 1
        for row, etag in zip(rows, etags, strict=True):
            history.value_acked(row, number, etag)
