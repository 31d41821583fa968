"""The front end's scan range and continuations (frontend/scan.py): the raw key range of a
request, cut to a token's name prefix; continuations that round-trip and refuse tampering."""

from __future__ import annotations

import pytest

from common.errors import InvalidArgument, PermissionDenied
from common.proto import frontend_pb2 as fe_pb
from common.proto import partition_pb2 as pb
from frontend.scan import (
    continuation_after,
    decode_continuation,
    encode_continuation,
    name_range,
    request_range,
)
from partition_layer import keys

ACCOUNT = "acct"


def ekey(pname: str, row: bytes) -> bytes:
    return keys.encode_key(ACCOUNT, pname, keys.KIND_ENTITY, row)


def names_in(start: bytes, end: bytes, names: list[str]) -> list[str]:
    """Which names have keys (their meta and an entity) inside [start, end)."""
    return [n for n in names
            if any(start <= k < end for k in (keys.encode_key(ACCOUNT, n, keys.KIND_META, b""),
                                              ekey(n, b"row")))]


NAMES = ["", "a", "app", "apple", "apq", "b", "log\x00x", "z"]


def test_whole_account_by_default() -> None:
    """Its public names: the stamp's own ("$...", frontend/names.py) sort below them."""
    assert request_range(fe_pb.ScanRequest(account=ACCOUNT), "") == (
        keys.pname_prefix(ACCOUNT, "0"), keys.pname_prefix(ACCOUNT, "{"))


def test_start_and_end() -> None:
    request = fe_pb.ScanRequest(account=ACCOUNT, start_pname="app", start_row=b"m",
                                has_end=True, end_pname="b")
    start, end = request_range(request, "")
    assert start == ekey("app", b"m") and end == keys.pname_prefix(ACCOUNT, "b")
    alone = request_range(fe_pb.ScanRequest(account=ACCOUNT, start_pname="app"), "")[0]
    assert alone <= keys.encode_key(ACCOUNT, "app", keys.KIND_META, b"") and alone > \
        ekey("a", b"\xff" * 10)


def test_a_token_prefix_cuts_the_range() -> None:
    start, end = request_range(fe_pb.ScanRequest(account=ACCOUNT), "ap")
    assert names_in(start, end, NAMES) == ["app", "apple", "apq"]
    request = fe_pb.ScanRequest(account=ACCOUNT, start_pname="apple")
    assert names_in(*request_range(request, "ap"), NAMES) == ["apple", "apq"]


def test_a_range_outside_the_token_prefix_is_refused() -> None:
    request = fe_pb.ScanRequest(account=ACCOUNT, start_pname="b")
    with pytest.raises(PermissionDenied):
        request_range(request, "ap")
    request = fe_pb.ScanRequest(account=ACCOUNT, has_end=True, end_pname="ap")
    with pytest.raises(PermissionDenied):
        request_range(request, "ap")


def test_log_names_under_a_prefix() -> None:
    request = fe_pb.ScanRequest(account=ACCOUNT, mode=pb.SCAN_LOG_NAMES, prefix="log")
    assert names_in(*request_range(request, ""), NAMES) == ["log\x00x"]
    assert names_in(*name_range(ACCOUNT, "a"), NAMES) == ["a", "app", "apple", "apq"]


def test_bad_requests() -> None:
    with pytest.raises(InvalidArgument):
        request_range(fe_pb.ScanRequest(), "")
    with pytest.raises(InvalidArgument):
        request_range(fe_pb.ScanRequest(account=ACCOUNT, mode=7), "")  # type: ignore[arg-type]


@pytest.mark.parametrize("key", [b"", b"\x00", ekey("g", b"r") + b"\x00"])
def test_continuation_round_trip(key: bytes) -> None:
    assert decode_continuation(encode_continuation(key)) == key


def test_a_tampered_continuation_is_invalid() -> None:
    token = bytearray(encode_continuation(ekey("g", b"r")))
    for broken in (b"", b"\x01", bytes(token[:-1]), b"\x02" + bytes(token[1:])):
        with pytest.raises(InvalidArgument):
            decode_continuation(broken)
    token[5] ^= 1
    with pytest.raises(InvalidArgument):
        decode_continuation(bytes(token))


def test_continuation_after_an_item() -> None:
    item = pb.ScanItem(pname="g", row=b"r")
    key = decode_continuation(continuation_after(ACCOUNT, pb.SCAN_ENTITIES, item))
    assert ekey("g", b"r") < key <= ekey("g", b"r\x00")
    log = decode_continuation(continuation_after(ACCOUNT, pb.SCAN_LOG_NAMES, item))
    assert log == keys.prefix_end(keys.pname_prefix(ACCOUNT, "g"))
