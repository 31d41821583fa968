"""Bloom filters over a sorted run's keys: a read skips a run whose filter says no (§4).

Each key is hashed once (BLAKE2b, 64 bits); its k probe positions come from double hashing
(Kirsch–Mitzenmacher: h1 + i·h2 mod m), computed for all keys at once with numpy, so 1M
keys build in well under a second. With 10 bits per key, k = 7 and the false-positive rate is
about 0.8%.

Contract: `may_contain(key)` is True for every key the filter was built from. `to_bytes` is
self-describing (`magic, format, k, m`, bits); `from_bytes` raises Internal on a buffer that
does not match its header.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Iterable

import numpy as np

from common.errors import Internal

BITS_PER_KEY_DEFAULT = 10
PROBES_MAX = 30
BITS_MIN = 64
_HEADER = struct.Struct("<4sBBQ")  # magic, format, k (probes), m (bits)
_MAGIC = b"BLM1"
_FORMAT = 1
HASH_BYTES = 8


def key_hash(key: bytes) -> bytes:
    """The 8-byte hash of a key the filter is built from (writers may collect these)."""
    return hashlib.blake2b(key, digest_size=HASH_BYTES).digest()


def _probes(bits_per_key: int) -> int:
    return max(1, min(PROBES_MAX, round(bits_per_key * math.log(2))))


class BloomFilter:
    __slots__ = ("_bits", "k", "m")

    def __init__(self, k: int, m: int, bits: bytes) -> None:
        if not 1 <= k <= PROBES_MAX or m < BITS_MIN or m % 8 or len(bits) != m // 8:
            raise Internal(f"inconsistent bloom filter: k={k} m={m} bits={len(bits)} bytes")
        self.k = k
        self.m = m
        self._bits = bits

    @classmethod
    def build(cls, keys: Iterable[bytes], bits_per_key: int = BITS_PER_KEY_DEFAULT
              ) -> BloomFilter:
        return cls.from_hashes(b"".join(key_hash(k) for k in keys), bits_per_key)

    @classmethod
    def from_hashes(cls, hashes: bytes | bytearray, bits_per_key: int = BITS_PER_KEY_DEFAULT
                    ) -> BloomFilter:
        """Build from the concatenated `key_hash` of every key."""
        assert len(hashes) % HASH_BYTES == 0 and bits_per_key >= 1
        h = np.frombuffer(bytes(hashes), dtype="<u8")
        k = _probes(bits_per_key)
        m = max(BITS_MIN, -(-len(h) * bits_per_key // 8) * 8)
        h1 = h & np.uint64(0xFFFFFFFF)
        h2 = (h >> np.uint64(32)) | np.uint64(1)
        marks = np.zeros(m, dtype=np.bool_)
        for i in range(k):
            marks[(h1 + np.uint64(i) * h2) % np.uint64(m)] = True
        return cls(k, m, np.packbits(marks, bitorder="little").tobytes())

    def may_contain(self, key: bytes) -> bool:
        h = int.from_bytes(key_hash(key), "little")
        h1, h2 = h & 0xFFFFFFFF, (h >> 32) | 1
        bits, m = self._bits, self.m
        for i in range(self.k):
            pos = (h1 + i * h2) % m
            if not bits[pos >> 3] >> (pos & 7) & 1:
                return False
        return True

    @property
    def nbytes(self) -> int:
        return len(self._bits)

    def to_bytes(self) -> bytes:
        return _HEADER.pack(_MAGIC, _FORMAT, self.k, self.m) + self._bits

    @classmethod
    def from_bytes(cls, b: bytes) -> BloomFilter:
        if len(b) < _HEADER.size:
            raise Internal(f"bloom filter of {len(b)} bytes is shorter than its header")
        magic, fmt, k, m = _HEADER.unpack_from(b)
        if magic != _MAGIC or fmt != _FORMAT:
            raise Internal(f"not a bloom filter (magic {magic!r}, format {fmt})")
        return cls(k, m, bytes(b[_HEADER.size:]))
