"""One extent replica on one extent node: its data file, its commit point, and the bytes that
are durable in the journal but not yet in the file.

On disk, per extent:
- `ext-<id>.dat`: frames end to end (see stream_layer/framing.py), written behind the journal.
- `ext-<id>.meta`: the *latest* commit point only (§2): the replica set, the length of the data
  file that is fsync'd and valid (`file_length`), and the seal. Replaced atomically (write a
  temp file, fsync, rename, fsync the directory) after the data it covers is fsync'd, so it
  never claims bytes the file does not durably hold. Recovery reads this one record and the
  journal, never a history.

In memory, three lengths, always file_end <= durable_end <= accepted_end:
- accepted_end: where the next append goes (offsets handed out, journal write pending),
- durable_end: the journal holds everything below it (this replica's commit length),
- file_end: the data file holds everything below it; [file_end, durable_end) is in `pending`.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

from common.checksums import crc32c
from common.durable_fs import fsync_dir
from common.errors import Internal
from common.ids import extent_file_stem
from stream_layer.extent_node.replica_state import State


@dataclass
class ReplicaMeta:
    extent_id: int
    replicas: list[str]
    file_length: int = 0
    sealed: bool = False
    sealed_length: int = 0
    # Fenced for a seal: appends are refused from then on, across restarts too.
    fenced: bool = False

    def encode(self) -> bytes:
        body = json.dumps(asdict(self), sort_keys=True)
        return json.dumps({"meta": body, "crc": crc32c(body.encode())}).encode()

    @staticmethod
    def decode(raw: bytes, what: str) -> ReplicaMeta:
        try:
            outer = json.loads(raw)
            body = outer["meta"]
            if crc32c(body.encode()) != outer["crc"]:
                raise ValueError("checksum mismatch")
            return ReplicaMeta(**json.loads(body))
        except (ValueError, KeyError, TypeError) as exc:
            raise Internal(f"unreadable commit point {what}: {exc}") from exc


@dataclass
class Replica:
    meta: ReplicaMeta
    data_path: Path
    meta_path: Path
    accepted_end: int = 0
    durable_end: int = 0
    file_end: int = 0
    # (offset, frames, in_file) durable or being made durable, not yet known to be in the
    # data file; in_file marks large appends the journal writes to the data file itself.
    pending: deque[tuple[int, bytes, bool]] = field(default_factory=deque)
    pending_bytes: int = 0
    # What the replica takes (replica_state.py); FENCED from the moment a seal starts.
    state: State = State.OPEN
    # The data file changed since the last checkpoint recorded a commit point.
    dirty: bool = False
    # The kernel was asked to start writing the data file back up to here (writeback.py).
    writeback_end: int = 0
    # The future of the last accepted append: appends become durable in order, so awaiting
    # it waits for all of them.
    tail: asyncio.Future[None] | None = None
    seal_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def extent_id(self) -> int:
        return self.meta.extent_id

    @property
    def sealed(self) -> bool:
        return self.meta.sealed

    def is_primary(self, my_address: str) -> bool:
        return bool(self.meta.replicas) and self.meta.replicas[0] == my_address

    def secondaries(self) -> list[str]:
        return list(self.meta.replicas[1:])

    def check_lengths(self) -> None:
        if not self.file_end <= self.durable_end <= self.accepted_end:
            raise Internal(f"extent {self.extent_id}: lengths out of order: file {self.file_end}"
                           f" durable {self.durable_end} accepted {self.accepted_end}")


def replica_paths(directory: Path, extent_id: int) -> tuple[Path, Path]:
    stem = extent_file_stem(extent_id)
    return directory / f"{stem}.dat", directory / f"{stem}.meta"


def write_meta(meta_path: Path, encoded: bytes) -> None:
    """Replace a commit point atomically and durably (blocking I/O). The caller encodes the
    meta on the event loop, so the bytes are a consistent snapshot."""
    tmp = meta_path.with_suffix(".meta.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, encoded)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, meta_path)
    fsync_dir(meta_path.parent)


def read_range_from_file(path: Path, start: int, end: int) -> bytes:
    """Bytes [start, end) of a data file (blocking I/O); short if the file is shorter."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, end - start, start)
    finally:
        os.close(fd)


def pending_slice(pending: list[tuple[int, bytes, bool]], start: int, end: int) -> bytes:
    """Bytes [start, end) out of pending (offset, frames, in_file) runs that cover the range."""
    parts = []
    for offset, data, _ in pending:
        lo, hi = max(start, offset), min(end, offset + len(data))
        if lo < hi:
            parts.append(data[lo - offset:hi - offset])
    out = b"".join(parts)
    if len(out) != end - start:
        raise Internal(f"pending runs do not cover [{start}, {end})")
    return out
