"""The partition manager's history of operations on the map (split, merge, move, reassign):
what `stamp partition history` prints and what the balancer's cooldown reads.

Contract: the history lives in the lock service (key `pm/history`, JSON), never only in a
leader's memory, so it survives a leader change; it keeps the newest `HISTORY_KEPT` entries,
oldest first. Writes are compare-and-set fenced by the leader's lease: a deposed leader
cannot add to it. Entries are plain data (`HistoryEntry`); `appended` is the pure bounding
rule, unit-tested.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

from common.errors import Unavailable
from common.proto import partition_pb2 as pb
from lock_service.client import Lease, LockClient

HISTORY_KEY = "pm/history"
HISTORY_KEPT = 200
# The whole list is one lock-service value (lock_service/limits.py: VALUE_BYTES_MAX 256 KiB):
# the oldest entries go first when it would pass this, and one entry's result (an error's
# text) is cut to RESULT_CHARS_MAX.
HISTORY_BYTES_MAX = 192 * 1024
RESULT_CHARS_MAX = 400
WRITE_ATTEMPTS_MAX = 8  # compare-and-set retries against a concurrent writer (none expected)

OP_MOVE = "move"
OP_REASSIGN = "reassign"
TRIGGER_OPERATOR = "operator"
TRIGGER_DEAD_SERVER = "dead server"
RESULT_OK = "ok"


@dataclass(frozen=True)
class HistoryEntry:
    op: str                          # split | merge | move | reassign
    trigger: str                     # operator | load | size | count | dead server
    from_ids: tuple[int, ...]
    to_ids: tuple[int, ...]
    started_at: float                # unix seconds
    seconds: float = 0.0
    unavailable_s: float = 0.0       # from the PS's reply (0: the manager that published
                                     # did not make the call, e.g. a new leader finishing)
    result: str = RESULT_OK          # ok | rolled back: why | failed: why
    map_version: int = 0             # the version that published it (0: none did)
    key: bytes = b""                 # split: the key
    server: str = ""                 # where the result is served

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["key"] = self.key.hex()
        data["from_ids"] = list(self.from_ids)
        data["to_ids"] = list(self.to_ids)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> HistoryEntry:
        values = dict(data)
        values["key"] = bytes.fromhex(str(values.get("key", "")))
        values["from_ids"] = tuple(values.get("from_ids", ()))  # type: ignore[arg-type]
        values["to_ids"] = tuple(values.get("to_ids", ()))  # type: ignore[arg-type]
        known = {name for name in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in values.items() if k in known})  # type: ignore[arg-type]

    def to_pb(self) -> pb.HistoryEntry:
        return pb.HistoryEntry(op=self.op, trigger=self.trigger, from_ids=self.from_ids,
                               to_ids=self.to_ids, key=self.key, server=self.server,
                               started_at=self.started_at, seconds=self.seconds,
                               unavailable_s=self.unavailable_s, result=self.result,
                               map_version=self.map_version)

    @classmethod
    def from_pb(cls, message: pb.HistoryEntry) -> HistoryEntry:
        return cls(op=message.op, trigger=message.trigger, from_ids=tuple(message.from_ids),
                   to_ids=tuple(message.to_ids), started_at=message.started_at,
                   seconds=message.seconds, unavailable_s=message.unavailable_s,
                   result=message.result, map_version=message.map_version, key=message.key,
                   server=message.server)


def appended(entries: Sequence[HistoryEntry], entry: HistoryEntry,
             kept: int = HISTORY_KEPT, bytes_max: int = HISTORY_BYTES_MAX
             ) -> list[HistoryEntry]:
    """`entries` with `entry` added last, the oldest dropped beyond `kept` entries or
    `bytes_max` encoded bytes (the new entry always stays)."""
    assert kept > 0
    if len(entry.result) > RESULT_CHARS_MAX:
        entry = replace(entry, result=entry.result[:RESULT_CHARS_MAX - 3] + "...")
    result = [*entries, entry][-kept:]
    while len(result) > 1 and len(encode(result)) > bytes_max:
        result = result[max(1, len(result) // 8):]  # drop the oldest eighth, at least one
    return result


def encode(entries: Sequence[HistoryEntry]) -> bytes:
    return json.dumps([e.to_dict() for e in entries]).encode()


def decode(raw: bytes) -> list[HistoryEntry]:
    return [HistoryEntry.from_dict(e) for e in json.loads(raw)]


def changed_at(entries: Sequence[HistoryEntry]) -> dict[int, float]:
    """{partition id: when an operation last made or touched it (its end, unix s)}, for the
    policy's cooldown: a range just split is not merged back at once."""
    found: dict[int, float] = {}
    for e in entries:
        for partition_id in (*e.from_ids, *e.to_ids):
            found[partition_id] = max(found.get(partition_id, 0.0), e.started_at + e.seconds)
    return found


def moved_at(entries: Sequence[HistoryEntry]) -> dict[int, float]:
    """{partition id: when a move last took it to another server (its end, unix s)}: the
    policy moves such a partition again only to land well within its tolerance."""
    return {partition_id: e.started_at + e.seconds
            for e in entries if e.op == OP_MOVE for partition_id in e.to_ids}


class HistoryStore:
    """The history in the lock service (blocking calls: run them in a thread)."""

    def __init__(self, locks: LockClient, kept: int = HISTORY_KEPT) -> None:
        self.locks = locks
        self.kept = kept

    def read(self) -> list[HistoryEntry]:
        found = self.locks.get(HISTORY_KEY)
        return [] if found is None else decode(found[0])

    def add(self, entry: HistoryEntry, fence: Lease | None) -> None:
        for _ in range(WRITE_ATTEMPTS_MAX):
            found = self.locks.get(HISTORY_KEY)
            entries, version = ([], 0) if found is None else (decode(found[0]), found[1])
            raw = encode(appended(entries, entry, self.kept))
            if self.locks.compare_and_set(HISTORY_KEY, version, raw, fence=fence) is not None:
                return
        raise Unavailable(f"the history changed {WRITE_ATTEMPTS_MAX} times while adding to it")
