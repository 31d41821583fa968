"""How a sealed extent is cut into fragments, and where its bytes are in them: pure, no I/O.

Contract (§2 "Erasure coding"):
- A sealed extent of `length` bytes (frames end to end) is cut on frame boundaries into k
  contiguous pieces; `cuts` (k+1 offsets, cuts[0] = 0, cuts[k] = length, non-decreasing)
  says where: data fragment i holds extent bytes [cuts[i], cuts[i+1]). A piece may be empty
  (an extent with fewer frames than k).
- Every fragment, data and parity, is `fragment_bytes` long: the longest piece. A data
  fragment is its piece followed by zeros (padding = fragment_bytes - piece length); the m
  parity fragments are RS(k, m) of the k padded data fragments, column by column.
- Because the cuts are frame boundaries, every frame lies whole in one data fragment, and a
  read of a frame needs one fragment (or any k, column range for column range, to rebuild it).
- The layout and each fragment's CRC32C are recorded in the stream manager with the fragment
  map; they never change afterwards (a rebuilt fragment is bit-identical to the lost one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from common.errors import InvalidArgument
from stream_layer import framing

# Narrower codes for stamps with fewer extent nodes than the configured code needs (tests).
SMALLER_CODES = ((3, 2), (2, 1))


def default_code(extent_nodes: int, k: int = 6, m: int = 3) -> tuple[int, int]:
    """The configured RS(k, m) (stream_manager.ec_data_fragments / ec_parity_fragments:
    6+3 by default) when the stamp has k+m extent nodes for its fragments, else the widest
    of 3+2 and 2+1 that fits."""
    for code in ((k, m), *SMALLER_CODES):
        if extent_nodes >= sum(code):
            return code
    raise InvalidArgument(f"erasure coding needs at least 3 extent nodes, the stamp has "
                          f"{extent_nodes}")


def frame_offsets(extent: bytes | memoryview) -> list[int]:
    """The offset of every frame of a sealed extent's bytes, verifying every checksum."""
    return [pos for pos, _ in framing.iter_frames(extent, "sealed extent")]


def cut_on_frames(offsets: Sequence[int], length: int, k: int) -> tuple[int, ...]:
    """k+1 cuts on frame boundaries (`offsets` plus `length`) that make the longest piece as
    short as the frames allow: cut i is the boundary nearest to i·length/k, never before
    cut i-1. A frame larger than length/k makes its piece longer; no frame is ever split."""
    if k < 1:
        raise InvalidArgument("k must be >= 1")
    boundaries = [*offsets, length]
    if boundaries[0] != 0 or any(b <= a for a, b in pairwise(boundaries)):
        raise InvalidArgument("frame offsets must start at 0 and increase below the length")
    cuts = [0]
    j = 0
    for i in range(1, k):
        target = i * length / k
        while j + 1 < len(boundaries) and boundaries[j + 1] <= target:
            j += 1
        # boundaries[j] <= target < boundaries[j+1] (or j is the last): take the nearer one.
        best = boundaries[j]
        if j + 1 < len(boundaries) and boundaries[j + 1] - target < target - best:
            best = boundaries[j + 1]
        cuts.append(max(best, cuts[-1]))
    cuts.append(length)
    return tuple(cuts)


@dataclass(frozen=True)
class Piece:
    """Extent bytes [extent_offset, extent_offset + length) are data fragment `index`'s
    bytes [fragment_offset, fragment_offset + length)."""

    index: int
    fragment_offset: int
    length: int
    extent_offset: int


@dataclass(frozen=True)
class FragmentLayout:
    k: int
    m: int
    cuts: tuple[int, ...]

    def __post_init__(self) -> None:
        check_layout(self.k, self.m, self.cuts)

    @property
    def length(self) -> int:
        """The extent's sealed length."""
        return self.cuts[-1]

    @property
    def fragment_bytes(self) -> int:
        return max(b - a for a, b in pairwise(self.cuts))

    def padding(self, index: int) -> int:
        """Zero bytes after data fragment `index`'s piece (parity fragments have none)."""
        if index >= self.k:
            return 0
        return self.fragment_bytes - (self.cuts[index + 1] - self.cuts[index])

    def data_fragments(self, extent: bytes | memoryview) -> list[bytes]:
        """The k padded data fragments of the extent's bytes."""
        if len(extent) != self.length:
            raise InvalidArgument(f"the layout covers {self.length} bytes, not {len(extent)}")
        view = memoryview(extent)
        return [bytes(view[a:b]) + bytes(self.padding(i))
                for i, (a, b) in enumerate(pairwise(self.cuts))]

    def join(self, data_fragments: Sequence[bytes]) -> bytes:
        """The extent's bytes from its k data fragments (padding dropped)."""
        return b"".join(bytes(memoryview(f)[:b - a]) for f, (a, b) in
                        zip(data_fragments, pairwise(self.cuts), strict=True))

    def pieces(self, offset: int, length: int) -> list[Piece]:
        """Where extent bytes [offset, offset+length) are: one Piece per data fragment
        touched, in extent order. The range must lie within the extent."""
        end = offset + length
        if offset < 0 or length < 0 or end > self.length:
            raise InvalidArgument(f"range [{offset}, {end}) is not within the extent's "
                                  f"{self.length} bytes")
        found = []
        for index in range(self.k):
            a, b = self.cuts[index], self.cuts[index + 1]
            lo, hi = max(a, offset), min(b, end)
            if lo < hi:
                found.append(Piece(index, lo - a, hi - lo, lo))
        return found


def check_layout(k: int, m: int, cuts: Sequence[int]) -> None:
    """Raise InvalidArgument unless (k, m, cuts) is a well-formed layout."""
    if k < 1 or m < 1 or k + m > 255:
        raise InvalidArgument(f"RS({k},{m}) is not a code we use: 1 <= k, 1 <= m, k+m <= 255")
    if len(cuts) != k + 1 or cuts[0] != 0:
        raise InvalidArgument(f"a layout of {k} fragments has {k + 1} cuts starting at 0")
    if any(b < a for a, b in pairwise(cuts)):
        raise InvalidArgument(f"cuts {list(cuts)} must not decrease")
    if cuts[-1] <= 0:
        raise InvalidArgument("an empty extent is not erasure-coded")


def layout_extent(extent: bytes | memoryview, k: int, m: int) -> FragmentLayout:
    """The layout of a sealed extent's bytes (every frame's checksum verified on the way)."""
    if len(extent) == 0:
        raise InvalidArgument("an empty extent is not erasure-coded")
    return FragmentLayout(k, m, cut_on_frames(frame_offsets(extent), len(extent), k))
