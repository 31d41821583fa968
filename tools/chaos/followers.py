"""Readers beside the writers of `stamp chaos`: subscribers that follow logs live, and a scanner
that pages through the account's entities, each on a thread with its own client.

- A subscriber keeps every (seq, record) it was delivered. After the run the checker
  (tools/chaos/check.py) proves they were delivered exactly once, in order, with no gap, and
  that each is in the log as it reads back (§8 invariant 5: a record that was read does not
  vanish). A subscription that fails (after the SDK's own retries) resumes at the next seq.
- The scanner checks what a scan may check on its own as it goes: keys strictly increasing,
  every value one the workload wrote to that group (bytes intact), never a number the writer
  has not issued yet. A ChecksumError is a corruption caught loudly — the contract under the
  nemesis's flipped bytes — and is counted, not a violation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from common.errors import ChecksumError, InvalidArgument, StampError
from tools.chaos.history import WriterHistory, parse_record, record_bytes
from tools.chaos.workload import ClientFactory, Tally

RESUBSCRIBE_PAUSE_S = 0.5
SCAN_LIMIT = 200
SCAN_PAUSE_S = 0.2  # scans are a side dish: the writers make the load
JOIN_TIMEOUT_S = 30.0


class Subscriber:
    """Follows `log` from seq 0 until `stop()`; `seen` is what it was delivered."""

    def __init__(self, client_factory: ClientFactory, log: str, tally: Tally) -> None:
        self.log = log
        self.seen: list[tuple[int, bytes]] = []
        self.failures: list[BaseException] = []
        self._factory = client_factory
        self._tally = tally
        self._stop = threading.Event()
        self._client: object | None = None
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"subscriber-{log}")

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            with self._factory() as client:
                self._client = client
                while not self._stop.is_set():
                    self._follow(client)
        except BaseException as exc:  # surfaced by stop(): a bug in the follower itself
            self.failures.append(exc)

    def _follow(self, client: object) -> None:
        start = self.seen[-1][0] + 1 if self.seen else 0
        try:
            for seq, data in client.subscribe(self.log, start):  # type: ignore[attr-defined]
                self.seen.append((seq, data))
                self._tally.add("subscribe", True)
        except InvalidArgument:
            if not self._stop.is_set():
                raise
        except StampError:
            self._tally.add("subscribe", False)
            self._stop.wait(RESUBSCRIBE_PAUSE_S)

    def stop(self) -> None:
        self._stop.set()
        close = getattr(self._client, "close", None)
        if close is not None:
            close()  # ends the iteration under way (InvalidArgument: closed)
        self._thread.join(JOIN_TIMEOUT_S)
        if self._thread.is_alive():
            raise AssertionError(f"subscriber of {self.log} did not stop")
        if self.failures:
            raise self.failures[0]


class Scanner:
    """Scans the account's entities again and again until `stop()`; `violations` lists what a
    scan showed that no correct stamp shows."""

    def __init__(self, client_factory: ClientFactory, histories: list[WriterHistory],
                 tally: Tally) -> None:
        self.violations: list[str] = []
        self.failures: list[BaseException] = []
        self._factory = client_factory
        self._by_group = {h.group: h for h in histories}
        self._tally = tally
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="scanner")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(JOIN_TIMEOUT_S + 30)
        if self._thread.is_alive():
            raise AssertionError("the scanner did not stop")
        if self.failures:
            raise self.failures[0]

    def _run(self) -> None:
        try:
            with self._factory() as client:
                while not self._stop.is_set():
                    self._scan_once(client)
                    self._stop.wait(SCAN_PAUSE_S)
        except BaseException as exc:
            self.failures.append(exc)

    def _scan_once(self, client: object) -> None:
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
