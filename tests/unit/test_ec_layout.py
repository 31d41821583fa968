"""The fragment layout of erasure-coded extents (stream_layer/ec/layout.py): cuts on frame
boundaries, padding, range mapping, and a round trip through the codec — against a dumb
reference (slicing the extent's bytes)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import ChecksumError, InvalidArgument
from erasure import ReedSolomon
from stream_layer import framing
from stream_layer.ec.layout import (
    FragmentLayout,
    check_layout,
    cut_on_frames,
    default_code,
    frame_offsets,
    layout_extent,
)


def extent_of(sizes: list[int]) -> bytes:
    return b"".join(framing.frame(bytes([i % 251]) * n) for i, n in enumerate(sizes))


def test_default_code_follows_the_stamp_size() -> None:
    assert default_code(9) == (6, 3)
    assert default_code(12) == (6, 3)
    assert default_code(6) == (3, 2)
    assert default_code(3) == (2, 1)
    with pytest.raises(InvalidArgument):
        default_code(2)
    assert default_code(12, 8, 4) == (8, 4)  # configured (stream_manager.ec_*_fragments)
    assert default_code(11, 8, 4) == (3, 2)


def test_cuts_are_frame_boundaries_near_equal_shares() -> None:
    extent = extent_of([100] * 12)  # 12 frames of 108 bytes
    layout = layout_extent(extent, 3, 2)
    assert layout.cuts == (0, 432, 864, 1296)
    assert layout.fragment_bytes == 432
    assert [layout.padding(i) for i in range(5)] == [0, 0, 0, 0, 0]


def test_a_huge_frame_makes_its_piece_long_and_others_padded() -> None:
    extent = extent_of([10, 1000, 10])
    layout = layout_extent(extent, 3, 1)
    offsets = set(frame_offsets(extent)) | {len(extent)}
    assert set(layout.cuts) <= offsets
    assert layout.fragment_bytes == 1008
    assert sum(layout.padding(i) for i in range(3)) == 3 * 1008 - len(extent)


def test_fewer_frames_than_fragments_gives_empty_pieces() -> None:
    extent = extent_of([50])
    layout = layout_extent(extent, 6, 3)
    assert layout.cuts[-1] == len(extent)
    assert sorted(b - a for a, b in zip(layout.cuts, layout.cuts[1:], strict=False)) == \
        [0] * 5 + [len(extent)]


def test_bad_layouts_are_refused() -> None:
    for k, m, cuts in [(0, 1, (0,)), (2, 0, (0, 1, 2)), (2, 1, (0, 5)), (2, 1, (1, 2, 3)),
                       (2, 1, (0, 5, 3)), (2, 1, (0, 0, 0))]:
        with pytest.raises(InvalidArgument):
            check_layout(k, m, cuts)
    with pytest.raises(InvalidArgument):
        layout_extent(b"", 2, 1)
    with pytest.raises(InvalidArgument):
        cut_on_frames([0, 10, 5], 20, 2)


def test_a_corrupt_extent_is_not_coded() -> None:
    extent = bytearray(extent_of([100] * 4))
    extent[50] ^= 1
    with pytest.raises(ChecksumError):
        layout_extent(bytes(extent), 2, 1)


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=30), k=st.integers(1, 8),
       m=st.integers(1, 4), data=st.data())
def test_layout_round_trip_and_ranges(sizes: list[int], k: int, m: int,
                                      data: st.DataObject) -> None:
    extent = extent_of(sizes)
    layout = layout_extent(extent, k, m)
    boundaries = set(frame_offsets(extent)) | {len(extent)}
    assert set(layout.cuts) <= boundaries
    fragments = layout.data_fragments(extent)
    assert {len(f) for f in fragments} == {layout.fragment_bytes}
    assert layout.join(fragments) == extent
    # Every frame lies whole in one data fragment.
    for offset in frame_offsets(extent):
        size = framing.frame_bytes(framing.HEADER.unpack_from(extent, offset)[0])
        assert len(layout.pieces(offset, size)) == 1
    # Any byte range maps to pieces that read back the reference slice.
    start = data.draw(st.integers(0, len(extent)))
    length = data.draw(st.integers(0, len(extent) - start))
    pieces = layout.pieces(start, length)
    got = b"".join(fragments[p.index][p.fragment_offset:p.fragment_offset + p.length]
                   for p in pieces)
    assert got == extent[start:start + length]
    # Any k of the k+m fragments rebuild the data fragments.
    rs = ReedSolomon(k, m)
    everything = fragments + rs.encode(fragments)
    keep = data.draw(st.permutations(range(k + m)))[:k]
    assert rs.decode({i: everything[i] for i in keep}) == fragments


def test_pieces_refuse_ranges_outside_the_extent() -> None:
    layout = FragmentLayout(2, 1, (0, 10, 20))
    with pytest.raises(InvalidArgument):
        layout.pieces(15, 10)
    assert layout.pieces(5, 10) == [
        *layout.pieces(5, 5), *layout.pieces(10, 5)]
