"""Scrubbing one replica where it lies (§7 "scrub"): read the replica's bytes on the node,
verify every frame's CRC32C, and report its length, a digest and the first bad frame. The
scrub job compares the reports of an extent's replicas (invariant 2: same length, same
digest) and repairs a bad one from a good one; no data leaves the node for this.

Contracts:
- `FrameScanner` is pure: fed an extent's bytes in order (any chunking), it verifies each
  whole frame and stops at the first frame whose checksum fails or that runs past the end.
- The digest is SHA-256 over the frames' headers (length and CRC32C of every frame, in
  order). Every payload is checked against its CRC32C first, so two replicas that verify and
  have equal digests hold the same frames, byte for byte (up to a CRC32C collision within one
  frame), while the scan hashes 8 bytes per frame instead of the whole extent.
- `scrub_replica` reads what the replica holds below its commit length (its sealed length
  once sealed): the data file and, past the file's end, the bytes still held in memory behind
  the journal; blocking reads and checksums run on a thread pool, never on the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from common.checksums import crc32c
from stream_layer import framing
from stream_layer.extent_node.replica import Replica, pending_slice, read_range_from_file

NO_BAD_FRAME = -1


@dataclass(frozen=True)
class ScrubResult:
    length: int          # bytes scanned: the replica's commit (sealed) length
    sealed: bool
    frames: int          # whole frames that verified
    digest: bytes        # SHA-256 of the verified frames' headers
    bad_offset: int      # the first frame that fails, or NO_BAD_FRAME
    reason: str = ""


class FrameScanner:
    """Verifies an extent's frames as its bytes arrive in order (pure; see the module)."""

    def __init__(self) -> None:
        self.position = 0       # bytes consumed, on a frame boundary
        self.frames = 0
        self.bad_offset = NO_BAD_FRAME
        self.reason = ""
        self._digest = hashlib.sha256()
        self._carry = b""

    @property
    def ok(self) -> bool:
        return self.bad_offset == NO_BAD_FRAME

    def feed(self, data: bytes) -> None:
        if not self.ok:
            return
        view = memoryview(data)
        # Complete the frame the previous chunk cut, copying only that frame's bytes (a
        # copy of the whole chunk would cost more than its checksums).
        while self._carry and view:
            have = len(self._carry)
            if have < framing.HEADER_BYTES:
                want = framing.HEADER_BYTES - have
            else:
                want = framing.frame_bytes(framing.HEADER.unpack_from(self._carry)[0]) - have
            self._carry += bytes(view[:want])
            view = view[want:]
            if len(self._carry) >= framing.HEADER_BYTES and len(self._carry) == \
                    framing.frame_bytes(framing.HEADER.unpack_from(self._carry)[0]):
                whole, self._carry = self._carry, b""
                if self._scan(memoryview(whole)) < 0:
                    return
        if self._carry:
            return  # the chunk ended inside the carried frame
        consumed = self._scan(view)
        if consumed >= 0:
            self._carry = bytes(view[consumed:])

    def _scan(self, buf: memoryview) -> int:
        """Verify the whole frames at the start of `buf` (at self.position); the bytes they
        take, or -1 after a bad one."""
        pos = 0
        while pos + framing.HEADER_BYTES <= len(buf):
            length, crc = framing.HEADER.unpack_from(buf, pos)
            end = pos + framing.HEADER_BYTES + length
            if end > len(buf):
                break  # the rest of this frame is in the next chunk
            if crc32c(buf[pos + framing.HEADER_BYTES:end]) != crc:
                self.fail(self.position + pos, "checksum mismatch")
                return -1
            self._digest.update(buf[pos:pos + framing.HEADER_BYTES])
            self.frames += 1
            pos = end
        self.position += pos
        return pos

    def finish(self) -> None:
        """The end: a partial frame left over is bad (a frame runs past the length)."""
        if self.ok and self._carry:
            self.fail(self.position, f"a frame runs past the end ({len(self._carry)} bytes "
                                      f"left)")

    def fail(self, offset: int, reason: str) -> None:
        """Mark the frame at `offset` bad (the first failure only counts)."""
        if not self.ok:
            return
        self.bad_offset, self.reason = offset, f"frame at {offset}: {reason}"
        self._carry = b""

    def result(self, length: int, sealed: bool) -> ScrubResult:
        return ScrubResult(length, sealed, self.frames, self._digest.digest(), self.bad_offset,
                           self.reason)


async def scrub_replica(replica: Replica, limit: int, sealed: bool, chunk_bytes: int,
                        pool: ThreadPoolExecutor) -> ScrubResult:
    """Scan `replica` below `limit` (its commit length) in chunks of `chunk_bytes`."""
    scanner = FrameScanner()
    loop = asyncio.get_running_loop()
    offset = 0
    while offset < limit and scanner.ok:
        end = min(offset + chunk_bytes, limit)
        file_end = replica.file_end
        if offset < file_end:
            end = min(end, file_end)
            data = await loop.run_in_executor(pool, read_range_from_file, replica.data_path,
                                              offset, end)
            if len(data) != end - offset:  # the file is shorter than its commit point says
                await loop.run_in_executor(pool, scanner.feed, data)
                scanner.fail(scanner.position, f"the data file ends at {offset + len(data)}")
                break
        else:
            data = pending_slice(list(replica.pending), offset, end)
        await loop.run_in_executor(pool, scanner.feed, data)
        offset = end
    scanner.finish()
    return scanner.result(limit, sealed)
