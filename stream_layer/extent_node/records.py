"""The extent store's journal records (the bodies the journal frames and checksums, see
journal.py): what each says, shared by the store that writes them and the recovery that
replays them.

Every record starts with RECORD: (kind, extent id, offset or length).
- APPEND: frames follow; they belong at `offset`.
- APPEND_IN_FILE: IN_FILE follows (frames length, crc32c of the frames): the journal wrote the
  frames into the data file at `offset` and fdatasync'd them in the same batch, before this
  record (large appends reach the disk once, not twice).
- SEAL: the replica is sealed at `length` (the third field).
- FENCE: a seal began: no append from now on, across restarts too.
- CREATE: the replica set (JSON list of addresses) follows.
- DELETE: the replica and its files are gone.
"""

from __future__ import annotations

import json
import struct

from common.checksums import crc32c

RECORD = struct.Struct("<BQQ")
IN_FILE = struct.Struct("<QI")
APPEND, SEAL, APPEND_IN_FILE, FENCE, CREATE, DELETE = 1, 2, 3, 4, 5, 6


def append(extent_id: int, offset: int, frames: bytes) -> bytes:
    return RECORD.pack(APPEND, extent_id, offset) + frames


def append_in_file(extent_id: int, offset: int, frames: bytes) -> bytes:
    return RECORD.pack(APPEND_IN_FILE, extent_id, offset) + IN_FILE.pack(len(frames),
                                                                          crc32c(frames))


def seal(extent_id: int, length: int) -> bytes:
    return RECORD.pack(SEAL, extent_id, length)


def fence(extent_id: int) -> bytes:
    return RECORD.pack(FENCE, extent_id, 0)


def create(extent_id: int, replicas: list[str]) -> bytes:
    return RECORD.pack(CREATE, extent_id, 0) + json.dumps(replicas).encode()


def delete(extent_id: int) -> bytes:
    return RECORD.pack(DELETE, extent_id, 0)
