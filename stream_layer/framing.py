"""Block frames: the on-disk and on-the-wire unit of the stream layer (§2).

A frame is `[u32 payload length][u32 crc32c(payload)][payload]`, little-endian. An extent
replica file is nothing but frames end to end, so a Location (extent, offset, length) names
one whole frame, and the bytes a reader receives are exactly the bytes on disk: the writer's
CRC32C travels unchanged from the SDK to the disk and back (end-to-end checksum).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from common.checksums import crc32c, verify
from common.errors import InvalidArgument

HEADER = struct.Struct("<II")
HEADER_BYTES = HEADER.size


@dataclass(frozen=True, order=True)
class Location:
    """Where one block lives: a whole frame of an extent."""

    extent_id: int
    offset: int
    length: int  # frame bytes, header included

    @property
    def end(self) -> int:
        return self.offset + self.length


def frame_bytes(payload_bytes: int) -> int:
    return HEADER_BYTES + payload_bytes


def encode_frames(blocks: Sequence[tuple[bytes, int]]) -> bytes:
    """Frame (data, crc) pairs end to end; the CRCs are the writer's, already verified."""
    parts: list[bytes] = []
    for data, crc in blocks:
        parts.append(HEADER.pack(len(data), crc))
        parts.append(data)
    return b"".join(parts)


def frame(data: bytes) -> bytes:
    return HEADER.pack(len(data), crc32c(data)) + data


def iter_frames(buf: bytes | memoryview, what: str) -> Iterator[tuple[int, memoryview]]:
    """Yield (offset within buf, payload) for each frame, verifying every checksum.

    Raises ChecksumError on a bad checksum and InvalidArgument when buf does not end on a
    frame boundary (a truncated frame).
    """
    view = memoryview(buf)
    pos = 0
    while pos < len(view):
        if pos + HEADER_BYTES > len(view):
            raise InvalidArgument(f"{what}: truncated frame header at {pos}")
        length, crc = HEADER.unpack_from(view, pos)
        start = pos + HEADER_BYTES
        if start + length > len(view):
            raise InvalidArgument(f"{what}: frame at {pos} claims {length} bytes, "
                                  f"{len(view) - start} present")
        payload = view[start:start + length]
        verify(payload, crc, f"{what}, frame at {pos}")
        yield pos, payload
        pos = start + length


def verify_frames(buf: bytes | memoryview, what: str) -> int:
    """Verify every frame of buf; return how many there are."""
    return sum(1 for _ in iter_frames(buf, what))


def valid_prefix(buf: bytes | memoryview) -> int:
    """Length of the longest prefix of buf made of whole frames whose checksums hold."""
    view = memoryview(buf)
    pos = 0
    while pos + HEADER_BYTES <= len(view):
        length, crc = HEADER.unpack_from(view, pos)
        end = pos + HEADER_BYTES + length
        if end > len(view) or crc32c(view[pos + HEADER_BYTES:end]) != crc:
            break
        pos = end
    return pos


def payloads(buf: bytes | memoryview, what: str) -> list[bytes]:
    """The verified payloads of every frame in buf."""
    return [bytes(p) for _, p in iter_frames(buf, what)]
