"""What a writer of the mixed workload was acknowledged, and the client shape it writes through.

Each writer owns its logs and one entity group and writes sequentially, so what the stamp must
show is exactly determined by the writer's history (the contract `tools.chaos.check` proves):
- a log holds, from its first sequence number, consecutive records with no gap; every
  acknowledged record sits at its acknowledged sequence number, unchanged; no record appears
  twice; a record that is not acknowledged may be there only if its append was in doubt;
- an entity holds the value of its last acknowledged put, or of a put in doubt after it;
- a put conditioned on the row's current ETag (known only while nothing after its last
  acknowledged put is in doubt) is accepted, one on a stale ETag refused — the writer records
  a broken condition in `violations` as it happens.
Records are made from (writer, number), so a large one is checked without being kept.

The client shape is the SDK's (`stampsdk.Client`, one account, its errors stampsdk.errors');
`AccountView` binds a `partition_layer.client.PartitionClient` to an account, its errors
turned into the SDK's, so the probe tests that write below the front ends use the same
workload and checker.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from stampsdk import errors as sdk_errors

from common.errors import StampError
from tools.chaos.linearizability import Op

ROWS_PER_WRITER = 8


class LogEntityClient(Protocol):
    """The calls the workload and the checker make (stampsdk.Client's signatures)."""

    def append(self, log: str, records: Sequence[bytes], token: str | None = None) -> int: ...
    def read(self, log: str, from_seq: int = 0, limit: int = 1000
             ) -> list[tuple[int, bytes]]: ...
    def peek(self, log: str) -> tuple[int, int]: ...
    def put(self, pname: str, row: Any, value: bytes, if_match: str | None = None,
            if_none_match: str | None = None) -> str: ...
    def get(self, pname: str, row: Any) -> tuple[bytes, str]: ...
    def batch(self, pname: str, ops: Sequence[tuple[Any, ...]]) -> list[str]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Any: ...
    def __exit__(self, *exc: object) -> None: ...


@contextlib.contextmanager
def as_sdk_errors() -> Iterator[None]:
    """The stamp's errors raised inside as the SDK's of the same name."""
    try:
        yield
    except StampError as exc:
        raise sdk_errors.from_name(type(exc).__name__, str(exc)) from exc


class AccountView:
    """A PartitionClient seen as one account's SDK client (closing it closes the client),
    raising the SDK's errors."""

    def __init__(self, client: Any, account: str) -> None:
        self.client = client
        self.account = account

    def append(self, log: str, records: Sequence[bytes], token: str | None = None) -> int:
        with as_sdk_errors():
            return int(self.client.append(self.account, log, records, token))

    def read(self, log: str, from_seq: int = 0, limit: int = 1000
             ) -> list[tuple[int, bytes]]:
        with as_sdk_errors():
            return list(self.client.read(self.account, log, from_seq, limit))

    def peek(self, log: str) -> tuple[int, int]:
        with as_sdk_errors():
            return tuple(self.client.peek(self.account, log))  # type: ignore[return-value]

    def put(self, pname: str, row: Any, value: bytes, if_match: str | None = None,
            if_none_match: str | None = None) -> str:
        with as_sdk_errors():
            return str(self.client.put(self.account, pname, row, value, if_match,
                                       if_none_match))

    def get(self, pname: str, row: Any) -> tuple[bytes, str]:
        with as_sdk_errors():
            return tuple(self.client.get(self.account, pname, row))  # type: ignore[return-value]

    def batch(self, pname: str, ops: Sequence[tuple[Any, ...]]) -> list[str]:
        with as_sdk_errors():
            return list(self.client.batch(self.account, pname, ops))

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> AccountView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def record_bytes(writer: int, number: int, size: int) -> bytes:
    """The one record (or value) writer `writer` makes as its `number`th write, `size` bytes
    long (at least its head): deterministic, so the checker recomputes it."""
    head = f"w{writer}-n{number}|".encode()
    if size <= len(head):
        return head
    seed = hashlib.blake2b(head, digest_size=32).digest()
    return head + (seed * (size // len(seed) + 1))[:size - len(head)]


def parse_record(data: bytes) -> tuple[int, int]:
    """(writer, number) of a record made by `record_bytes`; ValueError if it is not one."""
    head = data.split(b"|", 1)[0].decode()
    w, n = head.split("-")
    if not (w.startswith("w") and n.startswith("n")):
        raise ValueError(f"not a workload record: {data[:24]!r}")
    return int(w[1:]), int(n[1:])


def row_key(row: int) -> bytes:
    return row.to_bytes(2, "big")


def value_id(data: bytes) -> str:
    """What the linearizability checker compares instead of a record's or value's bytes:
    its head (who wrote it, readable in a report) and a digest of every byte (so a changed
    one is another value), never the bytes themselves (a large record is not kept)."""
    head = data.split(b"|", 1)[0][:24].decode("ascii", "replace")
    return f"{head}#{hashlib.blake2b(data, digest_size=8).hexdigest()}"


def log_key(log: str) -> Hashable:
    return ("log", log)


def entity_key(group: str, row: int) -> Hashable:
    return (group, row)


class OpLog:
    """Every operation of a run with its real-time bounds (time.monotonic), for the
    linearizability checker (tools/chaos/linearizability.py); shared by threads.

    Times are seconds since `started`. `begin()` is read before a call is sent, `done(...)`
    after its answer came back;
    `in_doubt(...)` records a write whose outcome is unknown (respond None). A batch's parts
    carry one `batch` name (`batches`: name -> its parts' keys and value), so a batch in doubt
    seen applied on one row is known applied on all by then (check.bind_batches)."""

    def __init__(self, started: float | None = None) -> None:
        self.started = time.monotonic() if started is None else started  # time 0 of `ops`
        self.ops: list[Op] = []
        self.batches: dict[str, tuple[list[Hashable], str, float]] = {}
        self._lock = threading.Lock()

    def begin(self) -> float:
        return time.monotonic() - self.started

    def done(self, key: Hashable, call: tuple[Any, ...], invoke: float, result: Any,
             client: str) -> None:
        self._add(Op(key, call, invoke, self.begin(), result, client))

    def in_doubt(self, key: Hashable, call: tuple[Any, ...], invoke: float,
                 client: str) -> None:
        self._add(Op(key, call, invoke, None, None, client))

    def batch_in_doubt(self, name: str, keys: list[Hashable], value: str,
                       invoke: float) -> None:
        with self._lock:
            self.batches[name] = (keys, value, invoke)

    def _add(self, op: Op) -> None:
        with self._lock:
            self.ops.append(op)


@dataclass
class WriterHistory:
    writer: int
    log: str
    group: str
    logs: tuple[str, ...] = ()  # every log it writes (`log` first); () means just `log`
    # log: number -> (its acknowledged seq, size); acked and in-doubt records
    acked_records: dict[int, tuple[int, int]] = field(default_factory=dict)
    doubtful_records: dict[int, int] = field(default_factory=dict)  # number -> size
    record_logs: dict[int, str] = field(default_factory=dict)  # acked number -> its log
    # entities: row -> (last acked value number, numbers in doubt after it)
    acked_values: dict[int, int] = field(default_factory=dict)
    doubtful_values: dict[int, set[int]] = field(default_factory=dict)
    # row -> the ETag of its last acknowledged put, while no put after it is in doubt
    etags: dict[int, str] = field(default_factory=dict)
    stale_etags: dict[int, str] = field(default_factory=dict)  # row -> an older ETag
    # batches in doubt: value number -> the rows it put (all of them or none must show it)
    doubtful_batches: dict[int, tuple[int, ...]] = field(default_factory=dict)
    issued: int = 0  # the highest number it has written or is writing (read by the scanner)
    ops: int = 0
    errors: int = 0
    # Conditions broken by the stamp as the writer saw them: a stale ETag accepted, a
    # current one refused.
    violations: list[str] = field(default_factory=list)

    def all_logs(self) -> tuple[str, ...]:
        return self.logs or (self.log,)

    def record_acked(self, number: int, seq: int, size: int, log: str) -> None:
        self.acked_records[number] = (seq, size)
        self.record_logs[number] = log
        self.doubtful_records.pop(number, None)  # a retry with its token settled it

    def value_in_doubt(self, row: int, number: int) -> None:
        self.doubtful_values.setdefault(row, set()).add(number)
        self.etags.pop(row, None)  # which ETag the row has is now unknown
        self.stale_etags.pop(row, None)

    def batch_in_doubt(self, number: int, rows: Sequence[int]) -> None:
        self.doubtful_batches[number] = tuple(rows)
        for row in rows:
            self.value_in_doubt(row, number)

    def value_acked(self, row: int, number: int, etag: str) -> None:
        self.acked_values[row] = number
        self.doubtful_values.pop(row, None)  # a later acknowledged put overrides them
        old = self.etags.get(row)
        if old is not None and old != etag:
            self.stale_etags[row] = old
        self.etags[row] = etag
