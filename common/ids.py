"""Identifiers. An extent id is an unsigned 64-bit integer; the stream manager allocates them
(monotonically, from its replicated state). Tools that run extent nodes without a stream
manager (benchmarks, the demo) draw random ones instead."""

from __future__ import annotations

import secrets

ExtentId = int
EXTENT_ID_MAX = (1 << 64) - 1


def random_extent_id() -> ExtentId:
    """A random id in the upper half of the space, clear of what a stream manager allocates."""
    return (1 << 63) | secrets.randbits(63)


def extent_file_stem(extent_id: ExtentId) -> str:
    """How an extent is named on an extent node's disk: fixed width, so names sort by id."""
    if not 0 <= extent_id <= EXTENT_ID_MAX:
        raise ValueError(f"extent id {extent_id} out of range")
    return f"ext-{extent_id:016x}"
