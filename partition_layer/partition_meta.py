"""The metadata-stream record of a range partition (§4): its root.

A partition's metadata stream is a sequence of these records; the newest rules. It names the
key range, the runs (newest first), the commit-log block to start replay at, the LSN up to
which ops are in the runs, the next run id, and outstanding split/merge intents.

Encoding: a versioned envelope `magic "PM", u8 format, u32 crc32c(json)`, then the record as
UTF-8 JSON (small: a few runs and intents). Contract: `decode_meta(encode_meta(m)) == m`; a
damaged or foreign record raises ChecksumError or Internal.

Load replays from `replay_from` (inclusive; ops at or below `applied_lsn` are skipped, so a
block holding both old and new ops is safe); None means from the start of the commit log.

`version_floor` (issue 30): the highest version of any row the partition holds, when rows
replicated from another stamp brought versions above its LSN (0 otherwise, and then not in
the record): a write's version is above it (committer._version).

`witnesses` (issue 32, CURP; None while the partition has none, and in every record before
it): the set whose records an owner must fence and replay when it loads the partition
(witness_set.py). An owner names its own set only once every record of the set before is
durable in the commit log, so a crash at any point leaves a record naming a set that holds
every acknowledged write the log may lack.

`geo` (issue 30; None on a stamp that ships nothing, and in every record before it): where
inter-stamp replication stood when the record was written (geo_shipper.Position: the shipped
LSN, the commit-log block to read from, and the last sync time), so a new owner resumes
there; the commit log is kept from that block on (extent_needs.log_unneeded).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

from common.checksums import crc32c
from common.errors import ChecksumError, Internal
from partition_layer.keys import KeyRange
from partition_layer.runs import RunInfo
from partition_layer.witness_set import WitnessSet
from stream_layer.framing import Location

MAGIC = b"PM"
FORMAT = 1
_HEADER = struct.Struct("<2sBI")


@dataclass(frozen=True)
class GeoMark:
    """Where shipping to secondary stamps stood (module docstring): every operation up to
    `lsn` shipped, the rest found by reading the commit log from `read_from` (None: its
    start), every write acknowledged before `synced_s` (wall time) on the secondary."""

    lsn: int
    read_from: Location | None
    synced_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        loc = self.read_from
        return {"lsn": self.lsn, "synced_s": self.synced_s,
                "read_from": None if loc is None else [loc.extent_id, loc.offset, loc.length]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GeoMark:
        loc = d["read_from"]
        return cls(int(d["lsn"]), None if loc is None else Location(*loc),
                   float(d["synced_s"]))


@dataclass(frozen=True)
class PartitionMeta:
    partition_id: int
    key_range: KeyRange
    runs: list[RunInfo] = field(default_factory=list)  # newest first
    replay_from: Location | None = None
    applied_lsn: int = 0
    next_run_id: int = 1
    intents: list[dict[str, Any]] = field(default_factory=list)
    geo: GeoMark | None = None
    version_floor: int = 0
    witnesses: WitnessSet | None = None

    def __post_init__(self) -> None:
        ids = [r.run_id for r in self.runs]
        assert len(set(ids)) == len(ids), f"duplicate run ids {ids}"
        assert all(i < self.next_run_id for i in ids), (ids, self.next_run_id)

    def to_dict(self) -> dict[str, Any]:
        loc = self.replay_from
        return {"partition_id": self.partition_id, "key_range": self.key_range.to_dict(),
                "runs": [r.to_dict() for r in self.runs],
                "replay_from": None if loc is None else [loc.extent_id, loc.offset,
                                                         loc.length],
                "applied_lsn": self.applied_lsn, "next_run_id": self.next_run_id,
                "intents": self.intents,
                **({} if self.geo is None else {"geo": self.geo.to_dict()}),
                **({"version_floor": self.version_floor}
                   if self.version_floor > self.applied_lsn else {}),
                **({} if self.witnesses is None else {"witnesses": self.witnesses.to_dict()})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PartitionMeta:
        loc = d["replay_from"]
        return cls(partition_id=d["partition_id"], key_range=KeyRange.from_dict(d["key_range"]),
                   runs=[RunInfo.from_dict(r) for r in d["runs"]],
                   replay_from=None if loc is None else Location(*loc),
                   applied_lsn=d["applied_lsn"], next_run_id=d["next_run_id"],
                   intents=list(d["intents"]),
                   geo=GeoMark.from_dict(d["geo"]) if d.get("geo") is not None else None,
                   version_floor=int(d.get("version_floor", 0)),
                   witnesses=(WitnessSet.from_dict(d["witnesses"]) if d.get("witnesses")
                              is not None else None))


def encode_meta(meta: PartitionMeta) -> bytes:
    body = json.dumps(meta.to_dict(), separators=(",", ":"), sort_keys=True).encode()
    return _HEADER.pack(MAGIC, FORMAT, crc32c(body)) + body


def decode_meta(b: bytes) -> PartitionMeta:
    if len(b) < _HEADER.size:
        raise Internal(f"partition meta of {len(b)} bytes is shorter than its header")
    magic, fmt, expected = _HEADER.unpack_from(b)
    if magic != MAGIC or fmt != FORMAT:
        raise Internal(f"not a partition meta record (magic {magic!r}, format {fmt})")
    body = memoryview(b)[_HEADER.size:]
    if crc32c(body) != expected:
        raise ChecksumError("partition meta checksum mismatch")
    try:
        return PartitionMeta.from_dict(json.loads(bytes(body)))
    except (ValueError, KeyError, TypeError) as exc:
        raise Internal(f"malformed partition meta record: {exc}") from exc
