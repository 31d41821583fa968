"""The order-preserving key encoding against tuple ordering (property tests)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import InvalidArgument
from partition_layer import keys

# Strings rich in the bytes the escaping cares about: NUL, \x01, and multi-byte UTF-8.
texts = st.text(alphabet=st.sampled_from(["\x00", "\x01", "a", "b", "\xff", "é", "中", "😀"]),
                max_size=6) | st.text(max_size=8)
key_tuples = st.tuples(texts, texts, st.integers(0, 255),
                       st.binary(max_size=8) | st.sampled_from([b"", b"\x00", b"\xff"]))


def as_sortable(t: tuple[str, str, int, bytes]) -> tuple[bytes, bytes, int, bytes]:
    return t[0].encode(), t[1].encode(), t[2], t[3]


@given(key_tuples, key_tuples)
def test_encoded_order_is_tuple_order(a: tuple[str, str, int, bytes],
                                      b: tuple[str, str, int, bytes]) -> None:
    ea, eb = keys.encode_key(*a), keys.encode_key(*b)
    assert (ea < eb) == (as_sortable(a) < as_sortable(b))
    assert (ea == eb) == (a == b)


@given(key_tuples)
def test_decode_inverts_encode(t: tuple[str, str, int, bytes]) -> None:
    encoded = keys.encode_key(*t)
    assert keys.decode_key(encoded) == t
    at = keys.kind_offset(encoded)
    assert encoded[:at] == keys.pname_prefix(t[0], t[1])
    assert encoded[at] == t[2] and encoded[at + 1:] == t[3]
    assert encoded.startswith(keys.account_prefix(t[0]))
    assert encoded.startswith(keys.kind_prefix(t[0], t[1], t[2]))


@given(key_tuples, key_tuples)
def test_pname_prefix_range_holds_exactly_that_pname(a: tuple[str, str, int, bytes],
                                                     b: tuple[str, str, int, bytes]) -> None:
    low = keys.pname_prefix(a[0], a[1])
    high = keys.prefix_end(low)
    inside = keys.KeyRange(low, high).contains(keys.encode_key(*b))
    assert inside == ((a[0], a[1]) == (b[0], b[1]))


@given(st.binary(max_size=6), st.binary(max_size=6))
def test_prefix_end_bounds_the_prefix(prefix: bytes, key: bytes) -> None:
    end = keys.prefix_end(prefix)
    if key.startswith(prefix):
        assert end is None or key < end
    elif end is not None and key > prefix:
        assert key >= end


def test_prefix_end_edges() -> None:
    assert keys.prefix_end(b"") is None
    assert keys.prefix_end(b"\xff\xff") is None
    assert keys.prefix_end(b"a\xff") == b"b"
    assert keys.prefix_end(b"a\x00") == b"a\x01"


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_seq_rows_sort_by_sequence(a: int, b: int) -> None:
    assert keys.row_seq(keys.seq_row(a)) == a
    assert (keys.seq_row(a) < keys.seq_row(b)) == (a < b)


def test_log_rows_order_meta_tokens_records() -> None:
    meta = keys.encode_key("acct", "log", keys.KIND_META, b"")
    token = keys.encode_key("acct", "log", keys.KIND_TOKEN, b"\xff" * 20)
    record = keys.encode_key("acct", "log", keys.KIND_RECORD, keys.seq_row(0))
    other_log = keys.encode_key("acct", "log\x00", keys.KIND_META, b"")
    assert meta < token < record < other_log


def test_malformed_keys_are_refused() -> None:
    for bad in [b"", b"abc", b"a\x00\x01b", b"a\x00\x02b\x00\x01\x02", b"\xc3\x00\x01b\x00\x01\x02",
                b"a\x00\x01b\x00\x01"]:
        with pytest.raises(InvalidArgument):
            keys.decode_key(bad)
    with pytest.raises(InvalidArgument):
        keys.kind_offset(b"a\x00\x01b")
    with pytest.raises(InvalidArgument):
        keys.encode_key("a", "b", 256, b"")
    with pytest.raises(InvalidArgument):
        keys.seq_row(-1)
    with pytest.raises(InvalidArgument):
        keys.row_seq(b"\x00" * 7)


def test_key_range() -> None:
    r = keys.KeyRange(b"b", b"d")
    assert not r.contains(b"a") and r.contains(b"b") and r.contains(b"c\xff")
    assert not r.contains(b"d")
    assert keys.WHOLE_KEY_SPACE.contains(b"") and keys.WHOLE_KEY_SPACE.contains(b"\xff" * 9)
    for kr in (r, keys.WHOLE_KEY_SPACE, keys.KeyRange(b"\x00\xff", None)):
        assert keys.KeyRange.from_dict(kr.to_dict()) == kr
    with pytest.raises(InvalidArgument):
        keys.KeyRange(b"b", b"b")
