"""Row, LogMeta and TokenEntry encodings: round trips and refusal of malformed bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import Internal
from partition_layer.rows import (
    BlobRef,
    LogMeta,
    Row,
    TokenEntry,
    decode_row,
    encode_row,
    etag_of,
    is_tombstone,
    row_version,
)
from stream_layer.framing import Location

u64 = st.integers(0, 2**64 - 1)
u32 = st.integers(0, 2**32 - 1)
crcs = st.none() | u32  # an entity's value carries its writer's CRC32C; other rows none
rows = st.one_of(
    st.builds(lambda v, b, c: Row(v, value=b, value_crc=c), u64, st.binary(max_size=64), crcs),
    st.builds(lambda v, e, o, n, size, c: Row(v, blob=BlobRef(Location(e, o, n), size),
                                              value_crc=c),
              u64, u64, u64, u32, u64, crcs),
    st.builds(lambda v: Row(v, tombstone=True), u64),
)


@given(rows)
def test_row_round_trip(row: Row) -> None:
    encoded = encode_row(row)
    assert decode_row(encoded) == row
    assert is_tombstone(encoded) == row.tombstone
    assert row_version(encoded) == row.version


def test_a_row_is_exactly_one_thing() -> None:
    blob = BlobRef(Location(1, 2, 3), 4)
    for bad in [dict(), dict(value=b"x", tombstone=True), dict(value=b"x", blob=blob),
                dict(blob=blob, tombstone=True)]:
        with pytest.raises(AssertionError):
            Row(1, **bad)
    assert Row(1, value=b"").value == b""


def test_etags_differ_by_version() -> None:
    assert etag_of(1) != etag_of(2)
    assert etag_of(7) == etag_of(7)


def test_malformed_rows_raise_internal() -> None:
    blob = encode_row(Row(5, blob=BlobRef(Location(1, 2, 3), 4)))
    blob_crc = encode_row(Row(5, blob=BlobRef(Location(1, 2, 3), 4), value_crc=7))
    value_crc = encode_row(Row(5, value=b"", value_crc=7))
    for bad in [b"", b"\x01\x00", b"\x09" + b"\x00" * 8, blob[:-1], blob + b"\x00",
                blob_crc[:-1], blob_crc + b"\x00", value_crc[:-1],
                encode_row(Row(5, tombstone=True)) + b"\x00"]:
        with pytest.raises(Internal):
            decode_row(bad)


def test_a_value_crc_costs_four_bytes_and_tells_its_row_apart() -> None:
    """The CRC of an entity's value is stored beside it (§5), in 4 bytes; a row without one
    (bookkeeping, a log append) keeps the old encoding, so rows written before still read."""
    plain, with_crc = Row(3, value=b"v"), Row(3, value=b"v", value_crc=0xDEADBEEF)
    assert len(encode_row(with_crc)) == len(encode_row(plain)) + 4
    assert decode_row(encode_row(plain)).value_crc is None
    assert decode_row(encode_row(with_crc)).value_crc == 0xDEADBEEF
    blob = BlobRef(Location(1, 2, 3), 4)
    assert len(encode_row(Row(3, blob=blob, value_crc=1))) == len(encode_row(Row(3, blob=blob))) + 4
    with pytest.raises(AssertionError):
        Row(3, tombstone=True, value_crc=1)  # a tombstone has no value to check


@given(u64, u64, st.booleans())
def test_log_meta_round_trip(a: int, b: int, sealed: bool) -> None:
    first, nxt = min(a, b), max(a, b)
    meta = LogMeta(first, nxt, sealed)
    assert LogMeta.decode(meta.encode()) == meta


@given(u64, u64)
def test_token_entry_round_trip(first: int, count: int) -> None:
    entry = TokenEntry(first, count)
    assert TokenEntry.decode(entry.encode()) == entry


def test_malformed_log_meta_and_tokens() -> None:
    good = LogMeta(1, 2, True).encode()
    with pytest.raises(Internal):
        LogMeta.decode(good[:-1])
    with pytest.raises(Internal):
        LogMeta.decode(b"\x02" + good[1:])
    with pytest.raises(Internal):
        LogMeta.decode(LogMeta(3, 3, False).encode()[:1] + (9).to_bytes(8, "little")
                       + (3).to_bytes(8, "little") + b"\x00")
    with pytest.raises(Internal):
        TokenEntry.decode(TokenEntry(1, 2).encode() + b"\x00")
