"""The commit-log record format: one commit-log stream block is one group commit (§4).

A CommitBatch holds the operations of one group commit, in LSN order; each CommitOp is the
mutations (key, encoded row) one operation made. Encoding (little-endian):

    magic "CL", u8 format, u64 writer epoch, u32 op count,
    per op: u64 lsn, u32 mutation count (its top bit: REPLICATED), per mutation: u32 key_len,
    u32 row_len, key, row,
    u32 crc32c of everything before it.

An op applied from another stamp (operations.Replicated, issue 30) is marked REPLICATED: its
stamp does not ship it on (geo_shipper.py ships what was written here only). Blocks written
before the mark have it clear; a build without it refuses a marked block (Internal: a count
too large), it never misreads one.

Contracts: `decode_batch(encode_batch(b)) == b`; LSNs strictly increase within a batch
(asserted on both sides) and across batches of one partition (the committer's job). Replay
applies `ops_after(batch, applied_lsn)` only: the stream layer may deliver a block twice
after a retried append, and ops at or below the checkpoint's LSN are already in the runs.
A malformed block raises ChecksumError or Internal, never yields wrong mutations.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass, field

from common.checksums import crc32c
from common.errors import ChecksumError, Internal
from partition_layer.keys import KeyRange

MAGIC = b"CL"
FORMAT = 2
_HEADER = struct.Struct("<2sBQI")
_OP = struct.Struct("<QI")
_MUTATION = struct.Struct("<II")
_CRC = struct.Struct("<I")
REPLICATED = 1 << 31  # in an op's mutation count

Mutation = tuple[bytes, bytes]


@dataclass(frozen=True)
class CommitOp:
    lsn: int
    mutations: list[Mutation] = field(default_factory=list)
    replicated: bool = False  # applied from another stamp (module docstring)


@dataclass(frozen=True)
class CommitBatch:
    ops: list[CommitOp]
    epoch: int = 0  # the fencing token of the owner that wrote it

    @property
    def first_lsn(self) -> int:
        return self.ops[0].lsn

    @property
    def last_lsn(self) -> int:
        return self.ops[-1].lsn


def _check_order(ops: list[CommitOp]) -> None:
    for a, b in itertools.pairwise(ops):
        if b.lsn <= a.lsn:
            raise Internal(f"commit batch LSNs not increasing: {a.lsn} then {b.lsn}")


def encode_batch(batch: CommitBatch) -> bytes:
    _check_order(batch.ops)
    parts = [_HEADER.pack(MAGIC, FORMAT, batch.epoch, len(batch.ops))]
    for op in batch.ops:
        parts.append(_OP.pack(op.lsn, len(op.mutations) | (REPLICATED if op.replicated else 0)))
        for key, row in op.mutations:
            parts += (_MUTATION.pack(len(key), len(row)), key, row)
    body = b"".join(parts)
    return body + _CRC.pack(crc32c(body))


def decode_batch(b: bytes) -> CommitBatch:
    if len(b) < _HEADER.size + _CRC.size:
        raise Internal(f"commit batch of {len(b)} bytes is shorter than its header")
    end = len(b) - _CRC.size
    (expected,) = _CRC.unpack_from(b, end)
    if crc32c(memoryview(b)[:end]) != expected:
        raise ChecksumError("commit batch checksum mismatch")
    magic, fmt, epoch, count = _HEADER.unpack_from(b)
    if magic != MAGIC or fmt != FORMAT:
        raise Internal(f"not a commit batch (magic {magic!r}, format {fmt})")
    pos = _HEADER.size
    ops: list[CommitOp] = []
    try:
        for _ in range(count):
            lsn, n = _OP.unpack_from(b, pos)
            pos += _OP.size
            replicated = bool(n & REPLICATED)
            n &= ~REPLICATED
            mutations: list[Mutation] = []
            for _ in range(n):
                key_len, row_len = _MUTATION.unpack_from(b, pos)
                pos += _MUTATION.size
                key_end = pos + key_len
                row_end = key_end + row_len
                if row_end > end:
                    raise Internal("commit batch mutation overruns the block")
                mutations.append((b[pos:key_end], b[key_end:row_end]))
                pos = row_end
            ops.append(CommitOp(lsn, mutations, replicated))
    except struct.error as exc:
        raise Internal(f"truncated commit batch: {exc}") from exc
    if pos != end:
        raise Internal(f"commit batch has {end - pos} stray bytes")
    _check_order(ops)
    return CommitBatch(ops, epoch)


def within(op: CommitOp, key_range: KeyRange) -> CommitOp:
    """`op` without its mutations outside `key_range`: a split child's commit log begins
    with its parent's, whose operations may touch the other child's keys."""
    if all(key_range.contains(key) for key, _ in op.mutations):
        return op
    return CommitOp(op.lsn, [(k, row) for k, row in op.mutations if key_range.contains(k)],
                    op.replicated)


def ops_after(batch: CommitBatch, applied_lsn: int) -> list[CommitOp]:
    """The ops of `batch` not yet applied (lsn > applied_lsn), in order."""
    return [op for op in batch.ops if op.lsn > applied_lsn]


class Replayer:
    """Which commit-log operations a load applies, in which order (pure).

    The owner keeps several group commits in flight, so the log may hold, past the replay
    point: duplicates (a block re-sent after a failed append), blocks out of LSN order (re-sent
    across a rollover), and "junk" — operations an owner wrote but never acknowledged because
    one before them failed, which leaves a gap. An operation is applied exactly when every
    lower LSN has been: out-of-order ones wait in a buffer. The first block of a newer epoch
    (a new owner, who loaded everything before it) declares whatever still waits junk: its
    writer can no longer fill the gap, and the new owner reuses those LSNs.
    """

    def __init__(self, applied_lsn: int) -> None:
        self.applied_lsn = applied_lsn
        self.epoch = 0
        self.waiting: dict[int, CommitOp] = {}
        self.discarded = 0

    def feed(self, batch: CommitBatch) -> list[CommitOp]:
        """The ops that become applicable with this block, in LSN order."""
        if batch.epoch < self.epoch:
            # An older owner's block after a newer owner's: the fence makes this impossible
            # for anything but duplicates of what was applied already.
            self.discarded += sum(1 for op in batch.ops if op.lsn > self.applied_lsn)
            return []
        if batch.epoch > self.epoch:
            self.discarded += len(self.waiting)
            self.waiting.clear()
            self.epoch = batch.epoch
        for op in batch.ops:
            if op.lsn > self.applied_lsn:
                self.waiting.setdefault(op.lsn, op)
        ready = []
        while self.applied_lsn + 1 in self.waiting:
            self.applied_lsn += 1
            ready.append(self.waiting.pop(self.applied_lsn))
        return ready

    def finish(self) -> int:
        """At the end of the log: what still waits is junk. How many ops were dropped."""
        self.discarded += len(self.waiting)
        self.waiting.clear()
        return self.discarded
