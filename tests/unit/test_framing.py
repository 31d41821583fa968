"""Block frames: round trips, torn tails and corruption (property tests)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import ChecksumError, InvalidArgument
from stream_layer import framing

blocks = st.lists(st.binary(max_size=300), max_size=20)


@given(blocks)
def test_frames_round_trip(payloads: list[bytes]) -> None:
    buf = b"".join(framing.frame(p) for p in payloads)
    assert framing.payloads(buf, "test") == payloads
    assert framing.valid_prefix(buf) == len(buf)
    assert len(buf) == sum(framing.frame_bytes(len(p)) for p in payloads)


@given(blocks, st.data())
def test_valid_prefix_cuts_a_torn_tail_at_a_frame_boundary(payloads: list[bytes],
                                                          data: st.DataObject) -> None:
    buf = b"".join(framing.frame(p) for p in payloads)
    cut = data.draw(st.integers(0, len(buf)))
    prefix = framing.valid_prefix(buf[:cut])
    boundaries = [0]
    for p in payloads:
        boundaries.append(boundaries[-1] + framing.frame_bytes(len(p)))
    assert prefix == max(b for b in boundaries if b <= cut)


@given(st.lists(st.binary(min_size=1, max_size=200), min_size=1, max_size=10), st.data())
def test_any_flipped_payload_bit_is_a_checksum_error(payloads: list[bytes],
                                                    data: st.DataObject) -> None:
    buf = bytearray(b"".join(framing.frame(p) for p in payloads))
    starts = []
    pos = 0
    for p in payloads:
        starts.append(pos + framing.HEADER_BYTES)
        pos += framing.frame_bytes(len(p))
    index = data.draw(st.integers(0, len(payloads) - 1))
    where = starts[index] + data.draw(st.integers(0, len(payloads[index]) - 1))
    buf[where] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(ChecksumError):
        framing.verify_frames(bytes(buf), "flipped")
    assert framing.valid_prefix(bytes(buf)) == starts[index] - framing.HEADER_BYTES


def test_truncated_frame_is_invalid_not_silent() -> None:
    buf = framing.frame(b"hello world")
    with pytest.raises(InvalidArgument):
        framing.verify_frames(buf[:-1], "short")
    with pytest.raises(InvalidArgument):
        framing.verify_frames(buf[:5], "header")


def test_encode_frames_uses_the_writers_crc() -> None:
    from common.checksums import crc32c
    assert framing.encode_frames([(b"abc", crc32c(b"abc"))]) == framing.frame(b"abc")
