"""Readers beside the writers of `stamp chaos`: subscribers that follow logs live, readers that
read the writers' logs and entities while they are written, and a scanner that pages through
the account's entities, each on a thread with its own client.

- A subscriber keeps every (seq, record) it was delivered. After the run the checker
  (tools/chaos/check.py) proves they were delivered exactly once, in order, with no gap, and
  that each is in the log as it reads back (§8 invariant 5: a record that was read does not
  vanish). A subscription that fails (after the SDK's own retries) resumes at the next seq.
- The scanner checks what a scan may check on its own as it goes: keys strictly increasing,
  every value one the workload wrote to that group (bytes intact), never a number the writer
  has not issued yet. A ChecksumError is a corruption caught loudly — the contract under the
  nemesis's flipped bytes — and is counted, not a violation.
- A reader records each read it was answered, with its time bounds, in the workload's OpLog:
  the linearizability checker (tools/chaos/linearizability.py) proves every one of them
  consistent with the writes around it (no stale read, no read of a write that vanished).
  It reads near the tail of a log (what a reader racing the writer sees) or one row.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

from stampsdk.errors import ChecksumError, InvalidArgument, NotFound, StampError

from tools.chaos.history import (
    ROWS_PER_WRITER,
    LogEntityClient,
    OpLog,
    WriterHistory,
    entity_key,
    log_key,
    parse_record,
    record_bytes,
    row_key,
    value_id,
)
from tools.chaos.workload import ClientFactory, Tally

RESUBSCRIBE_PAUSE_S = 0.5
SCAN_LIMIT = 200
SCAN_PAUSE_S = 0.2  # scans are a side dish: the writers make the load
JOIN_TIMEOUT_S = 60.0  # a call under way may take the SDK's whole retry to end
READ_LIMIT = 64  # records per log read
# A short read (fewer than READ_LIMIT records) of fewer bytes than this ended at the log's
# end: the stamp cuts a read only past read_bytes_max (4 MiB), and no record is larger than
# LARGE_RECORD_BYTES' top (320 KiB).
AT_END_BYTES_MAX = 2 * 1024 * 1024
TAIL_BACK = 3  # a log read starts up to this many records before the end last seen
READ_PAUSE_S = 0.01


class _Follower:
    """A thread with its own client that calls `_once` until `stop()`, pausing `PAUSE_S`
    between calls; an exception in the follower itself (a bug, not a refusal of the stamp)
    ends it and is raised again by `stop()`."""

    PAUSE_S = 0.0

    def __init__(self, client_factory: ClientFactory, name: str) -> None:
        self.failures: list[BaseException] = []
        self._factory = client_factory
        self._name = name
        self._stop = threading.Event()
        self._client: object | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._interrupt()
        self._thread.join(JOIN_TIMEOUT_S)
        if self._thread.is_alive():
            raise AssertionError(f"{self._name} did not stop")
        if self.failures:
            raise self.failures[0]

    def _run(self) -> None:
        try:
            with self._factory() as client:
                self._client = client
                while not self._stop.is_set():
                    self._once(client)
                    self._stop.wait(self.PAUSE_S)
        except BaseException as exc:  # surfaced by stop()
            self.failures.append(exc)

    def _once(self, client: LogEntityClient) -> None:
        raise NotImplementedError

    def _interrupt(self) -> None:
        """Ends a call of `_once` that would otherwise block (by default none does)."""


class Subscriber(_Follower):
    """Follows `log` from seq 0 until `stop()`; `seen` is what it was delivered."""

    def __init__(self, client_factory: ClientFactory, log: str, tally: Tally) -> None:
        super().__init__(client_factory, f"subscriber-{log}")
        self.log = log
        self.seen: list[tuple[int, bytes]] = []
        self._delivered = threading.Condition()
        self._tally = tally

    def _once(self, client: object) -> None:
        start = self.seen[-1][0] + 1 if self.seen else 0
        try:
            for seq, data in client.subscribe(self.log, start):  # type: ignore[attr-defined]
                with self._delivered:
                    self.seen.append((seq, data))
                    self._delivered.notify_all()
                self._tally.add("subscribe", True)
        except InvalidArgument:
            if not self._stop.is_set():
                raise
        except StampError:
            self._tally.add("subscribe", False)
            self._stop.wait(RESUBSCRIBE_PAUSE_S)

    def wait_for(self, seq: int, timeout_s: float) -> bool:
        """Wait until record `seq` was delivered (a subscriber catching up to a log's end);
        False after `timeout_s`."""
        with self._delivered:
            return self._delivered.wait_for(
                lambda: bool(self.seen) and self.seen[-1][0] >= seq, timeout_s)

    def _interrupt(self) -> None:
        close = getattr(self._client, "close", None)
        if close is not None:
            close()  # ends the iteration under way (InvalidArgument: closed)


class Reader(_Follower):
    """Reads the writers' logs and rows until `stop()`, recording every answered read in
    `oplog` (module docstring)."""

    PAUSE_S = READ_PAUSE_S

    def __init__(self, client_factory: ClientFactory, histories: list[WriterHistory],
                 oplog: OpLog, tally: Tally, seed: int, name: str) -> None:
        super().__init__(client_factory, name)
        self._histories = histories
        self._oplog = oplog
        self._tally = tally
        self._rng = random.Random(seed)
        self._ends: dict[str, int] = {}  # log -> the end this reader last saw

    def _once(self, client: LogEntityClient) -> None:
        self.read_once(client)

    def read_once(self, client: LogEntityClient) -> None:
        """One read of a log's tail or of one row, recorded when answered."""
        h = self._rng.choice(self._histories)
        if self._rng.random() < 0.5:
            self._read_log(client, self._rng.choice(h.all_logs()))
        else:
            self._get(client, h.group, self._rng.randrange(ROWS_PER_WRITER))

    def _read_log(self, client: LogEntityClient, log: str) -> None:
        start = max(0, self._ends.get(log, 0) - self._rng.randint(0, TAIL_BACK))
        invoke = self._oplog.begin()
        try:
            page = client.read(log, start, READ_LIMIT)
        except StampError:
            self._tally.add("read", False)
            return
        at_end = len(page) < READ_LIMIT and \
            sum(len(data) for _, data in page) < AT_END_BYTES_MAX
        # A record at another seq than its place in the page is recorded as one no log holds
        # there, so the checker refuses the read.
        ids = tuple(value_id(data) if seq == start + i else f"at seq {seq}: {value_id(data)}"
                    for i, (seq, data) in enumerate(page))
        self._oplog.done(log_key(log), ("read", start, ids, at_end), invoke, None,
                         self._name)
        self._ends[log] = max(self._ends.get(log, 0), start + len(page))
        self._tally.add("read", True)

    def _get(self, client: LogEntityClient, group: str, row: int) -> None:
        invoke = self._oplog.begin()
        try:
            value, etag = client.get(group, row_key(row))
            result: tuple[str, ...] = ("value", value_id(value), etag)
        except NotFound:
            result = ("absent",)
        except StampError:
            self._tally.add("get", False)
            return
        self._oplog.done(entity_key(group, row), ("get",), invoke, result, self._name)
        self._tally.add("get", True)


class Scanner(_Follower):
    """Scans the account's entities again and again until `stop()`; `violations` lists what a
    scan showed that no correct stamp shows."""

    PAUSE_S = SCAN_PAUSE_S

    def __init__(self, client_factory: ClientFactory, histories: list[WriterHistory],
                 tally: Tally) -> None:
        super().__init__(client_factory, "scanner")
        self.violations: list[str] = []
        self._by_group = {h.group: h for h in histories}
        self._tally = tally

    def _once(self, client: object) -> None:
        try:
            entities = list(client.scan(limit=SCAN_LIMIT))  # type: ignore[attr-defined]
        except ChecksumError:
            self._tally.add("checksum_error_caught", True)
            return
        except StampError:
            self._tally.add("scan", False)
            return
        self._tally.add("scan", True)
        self.violations += scan_violations(
            [(e.pname, bytes(e.row), bytes(e.value)) for e in entities], self._by_group.get)


def scan_violations(entities: list[tuple[str, bytes, bytes]],
                    history_of: Callable[[str], WriterHistory | None]) -> list[str]:
    """What is wrong with one scan's (pname, row, value) list (module docstring)."""
    found = []
    keys = [(pname, row) for pname, row, _ in entities]
    if keys != sorted(keys) or len(set(keys)) != len(keys):
        found.append(f"a scan returned keys out of order or twice: {keys[:8]}...")
    for pname, row, value in entities:
        history = history_of(pname)
        if history is None:
            continue  # not a group of this workload
        try:
            writer, number = parse_record(value)
        except (ValueError, UnicodeDecodeError):
            found.append(f"scan: {pname}/{row.hex()} holds bytes no writer wrote")
            continue
        if writer != history.writer or value != record_bytes(writer, number, len(value)):
            found.append(f"scan: {pname}/{row.hex()} holds a changed or foreign value")
        elif number > history.issued:
            found.append(f"scan: {pname}/{row.hex()} holds n{number}, never written")
    return found
