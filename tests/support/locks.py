"""The lock service under test: clients that close before the group is killed, the
replicas' convergence, and a compare-and-set load whose history is checked for
linearizability."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from lock_service.client import LockClient
from lock_service.group import LocalLockGroup
from tests.support.waiting import wait_until

CALL_TIMEOUT_S = 8.0
PROGRESS_TIMEOUT_S = 20.0


def converged(lock_group: LocalLockGroup, probe: LockClient) -> bool:
    """True when all replicas answer and have applied the same commands; any two that have
    applied as many must hold the same state (asserted on every look)."""
    statuses = list(lock_group.statuses(probe, with_digest=True).values())
    by_applied: dict[int, set[str]] = {}
    for status in statuses:
        by_applied.setdefault(status.applied, set()).add(status.digest)
    for applied, digests in by_applied.items():
        assert len(digests) == 1, f"replicas diverged at {applied} commands applied"
    return len(statuses) == len(lock_group.replicas) and len(by_applied) == 1


@dataclass
class Op:
    kind: str  # "read" | "cas"
    invoked: float
    returned: float
    version: int  # read: the version seen; cas: the expected version
    value: bytes
    new_version: int | None = None  # cas: the version it wrote, None if refused


def check_linearizable(history: list[Op]) -> int:
    """Check a history of reads and compare-and-sets of one register whose every write is a
    CAS of a unique value. Versions fix the order of the writes; check that this order is a
    chain, respects real time, and that every read and refused CAS fits in it. Returns the
    number of successful writes."""
    writes = sorted((op for op in history if op.kind == "cas" and op.new_version is not None),
                    key=lambda op: op.new_version or 0)
    assert len({w.new_version for w in writes}) == len(writes), "two writes, one version"
    by_version: dict[int, Op] = {w.new_version or 0: w for w in writes}
    replaced_by: dict[int, Op] = {}
    previous = 0
    latest_invocation = 0.0
    for w in writes:
        assert w.version == previous, f"lost update: {w} expected {w.version}, not {previous}"
        replaced_by[previous] = w
        assert w.returned > latest_invocation, f"{w} is ordered after a write started later"
        latest_invocation = max(latest_invocation, w.invoked)
        previous = w.new_version or 0
    for op in history:
        if op.kind == "read":
            writer = by_version.get(op.version)
            assert op.version == 0 or writer is not None, f"{op} read a version never written"
            assert writer is None or writer.value == op.value, f"{op} read the wrong value"
            assert writer is None or op.returned > writer.invoked, f"{op} read the future"
        elif op.new_version is None:  # refused: its expected version was not current
            writer = by_version.get(op.version)
            could_precede = writer is not None and op.invoked < writer.returned
            successor = replaced_by.get(op.version)
            could_follow = successor is not None and op.returned > successor.invoked
            assert could_precede or could_follow, f"{op} was refused while its version held"
        successor = replaced_by.get(op.version) if op.kind == "read" else None
        assert successor is None or op.invoked < successor.returned, f"{op} read a stale value"
    return len(writes)


class CasWorkload:
    """Clients that read a register and compare-and-set it, recording every operation."""

    def __init__(self, make_client: Callable[[str], LockClient], clients: int = 4,
                 key: str = "counter") -> None:
        self.history: list[Op] = []
        self.failures: list[BaseException] = []
        self._key, self._mutex, self._stop = key, threading.Lock(), threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(make_client(f"w{i}"), i))
                         for i in range(clients)]
        for thread in self._threads:
            thread.start()

    def _run(self, client: LockClient, index: int) -> None:
        n = 0
        try:
            while not self._stop.is_set():
                invoked = time.monotonic()
                seen = client.get(self._key)
                value, version = seen if seen is not None else (b"", 0)
                read = Op("read", invoked, time.monotonic(), version, value)
                new_value = f"w{index}-{n}".encode()
                n += 1
                invoked = time.monotonic()
                written = client.compare_and_set(self._key, version, new_value)
                cas = Op("cas", invoked, time.monotonic(), version, new_value, written)
                with self._mutex:
                    self.history.extend([read, cas])
        except BaseException as exc:  # an unknown outcome would make the history unusable
            self.failures.append(exc)

    def wait_for_more(self, count: int, what: str) -> None:
        seen = len(self.history)
        wait_until(lambda: len(self.history) >= seen + count or bool(self.failures),
                   PROGRESS_TIMEOUT_S, what)

    def stop_and_check(self) -> int:
        self._stop.set()
        for thread in self._threads:
            thread.join(CALL_TIMEOUT_S * 2)
        assert not self.failures, f"a worker failed: {self.failures!r}"
        writes = check_linearizable(self.history)
        print(f"{len(self.history)} operations, {writes} successful writes")
        return writes
