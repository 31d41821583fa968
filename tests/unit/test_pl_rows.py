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
rows = st.one_of(
    st.builds(lambda v, b: Row(v, value=b), u64, st.binary(max_size=64)),
    st.builds(lambda v, e, o, n, size: Row(v, blob=BlobRef(Location(e, o, n), size)),
              u64, u64, u64, u32, u64),
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
    for bad in [b"", b"\x01\x00", b"\x09" + b"\x00" * 8, blob[:-1], blob + b"\x00",
                encode_row(Row(5, tombstone=True)) + b"\x00"]:
        with pytest.raises(Internal):
            decode_row(bad)


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
