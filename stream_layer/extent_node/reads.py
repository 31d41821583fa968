"""Reads of one replica (§2): whole frames below its commit length, every frame's checksum
verified (invariant 6), from the data file and, past what the file holds yet, from the bytes
durable in the journal but still in memory (`Replica.pending`)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from common.errors import ChecksumError, InvalidArgument, OutOfRange, Unavailable
from stream_layer import framing
from stream_layer.extent_node.replica import Replica, pending_slice, read_range_from_file


class ReplicaReader:
    def __init__(self, read_bytes_max: int, pool: ThreadPoolExecutor) -> None:
        self.read_bytes_max = read_bytes_max
        self._pool = pool

    async def read(self, replica: Replica, limit: int, offset: int, length: int) -> bytes:
        """Whole verified frames starting at `offset`, within `length` and below `limit` (the
        commit length); at least one frame, or an error."""
        extent_id = replica.extent_id
        if length <= 0 or length > self.read_bytes_max:
            raise InvalidArgument(f"read length {length} not in 1..{self.read_bytes_max}")
        if offset >= limit:
            raise OutOfRange(f"extent {extent_id}: offset {offset} is at or past its commit "
                             f"length {limit}")
        data = await self._read_bytes(replica, offset, min(offset + length, limit))
        if len(data) < framing.HEADER_BYTES:
            raise ChecksumError(f"extent {extent_id}: no whole frame header at {offset}")
        first = framing.frame_bytes(framing.HEADER.unpack_from(data)[0])
        if first > len(data):
            if offset + first > limit:
                raise ChecksumError(f"extent {extent_id}: frame at {offset} claims {first} "
                                    f"bytes past the commit length {limit} (corrupt, or not a "
                                    f"block boundary)")
            data = await self._read_bytes(replica, offset, offset + first)
        whole = framing.valid_prefix(data)
        if whole == 0:
            framing.verify_frames(data[:first], f"extent {extent_id} at {offset}")
            raise ChecksumError(f"extent {extent_id}: bad frame at {offset}")
        return data[:whole] if whole == len(data) else _cut(data, whole, extent_id, offset)

    async def _read_bytes(self, replica: Replica, start: int, end: int) -> bytes:
        file_end = replica.file_end
        pending = list(replica.pending)
        parts = []
        if start < file_end:
            part = await asyncio.get_running_loop().run_in_executor(
                self._pool, read_range_from_file, replica.data_path, start, min(end, file_end))
            if len(part) != min(end, file_end) - start:
                raise Unavailable(f"extent {replica.extent_id} changed during the read")
            parts.append(part)
        if end > file_end:
            parts.append(pending_slice(pending, max(start, file_end), end))
        return b"".join(parts)


def _cut(data: bytes, whole: int, extent_id: int, offset: int) -> bytes:
    # A frame past `whole` either did not fit the requested length (fine) or is corrupt.
    rest = memoryview(data)[whole:]
    if len(rest) >= framing.HEADER_BYTES:
        size = framing.frame_bytes(framing.HEADER.unpack_from(rest)[0])
        if size <= len(rest):
            framing.verify_frames(rest[:size], f"extent {extent_id} at {offset + whole}")
    return data[:whole]
