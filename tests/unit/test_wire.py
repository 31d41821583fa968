"""frontend/wire.py: what the SDK signs is what the front end verifies; any change refused."""

from __future__ import annotations

import time

import pytest

from common.errors import ChecksumError, PermissionDenied, Unauthenticated
from common.proto import frontend_pb2 as fe_pb
from common.proto import partition_pb2 as pb
from frontend import sas, wire
from partition_layer.payload_crc import payload_crcs, verify_payload

KEY1, KEY2, OTHER = b"k" * 32, b"l" * 32, b"o" * 32
KEYS = {"acct": (KEY1, KEY2), "bob": (OTHER, OTHER)}


def keys_of(account: str) -> tuple[bytes, bytes] | None:
    return KEYS.get(account)


def append(records: list[bytes], account: str = "acct", pname: str = "log1") -> pb.Request:
    return pb.Request(account=account, pname=pname, token="t1", append=pb.AppendOp(
        records=records, token="t1", crcs=payload_crcs(records)))


def check(request: pb.Request, now: float) -> None:
    """The front end's checks, on a copy (`call_claim` takes the credentials out)."""
    received = pb.Request()
    received.CopyFrom(request)
    verify_payload(received, "test")
    wire.authenticate(wire.call_claim(received), keys_of=keys_of, now_s=now)


def test_signed_append_verifies_and_any_change_is_refused() -> None:
    now = time.time()
    request = append([b"one", b"two"])
    wire.sign_call(request, wire.Credentials("acct", key=KEY2), now)
    request.id = 77  # the session's id is not signed
    check(request, now)

    changed = pb.Request()
    changed.CopyFrom(request)
    changed.append.records[1] = b"twO"
    with pytest.raises(ChecksumError):
        check(changed, now)
    changed.append.crcs[1] = payload_crcs([b"twO"])[0]  # a consistent forgery
    with pytest.raises(Unauthenticated, match="bad signature"):
        check(changed, now)
    renamed = pb.Request()
    renamed.CopyFrom(request)
    renamed.pname = "log2"
    with pytest.raises(Unauthenticated):
        check(renamed, now)


def test_stale_and_foreign_requests_are_refused() -> None:
    now = time.time()
    request = append([b"x"])
    wire.sign_call(request, wire.Credentials("acct", key=KEY1), now - 400)
    with pytest.raises(Unauthenticated, match="behind"):
        check(request, now)
    foreign = append([b"x"], account="bob")
    wire.sign_call(foreign, wire.Credentials("acct", key=KEY1), now)
    with pytest.raises(PermissionDenied):
        check(foreign, now)
    unsigned = append([b"x"])
    with pytest.raises(Unauthenticated):
        check(unsigned, now)


def test_shared_access_token_scope() -> None:
    now = time.time()
    token = sas.mint("acct", 1, KEY1, ["read"], "log", int(now) + 60, now)
    creds = wire.Credentials("acct", sas=token)
    read = pb.Request(account="acct", pname="log1", read=pb.ReadOp(from_seq=0, limit=5))
    wire.sign_call(read, creds, now)
    check(read, now)
    request = append([b"x"])
    wire.sign_call(request, creds, now)
    with pytest.raises(PermissionDenied, match="does not grant append"):
        check(request, now)
    elsewhere = pb.Request(account="acct", pname="other", read=pb.ReadOp(limit=5))
    wire.sign_call(elsewhere, creds, now)
    with pytest.raises(PermissionDenied, match="covers names starting with"):
        check(elsewhere, now)


def test_scan_and_subscribe_are_signed_whole() -> None:
    now = time.time()
    creds = wire.Credentials("acct", key=KEY1)
    scan = fe_pb.ScanRequest(account="acct", start_pname="a", limit=10)
    wire.sign_scan(scan, creds, now)
    wire.authenticate(wire.scan_claim(scan), keys_of=keys_of, now_s=now)
    scan.limit = 11
    with pytest.raises(Unauthenticated):
        wire.authenticate(wire.scan_claim(scan), keys_of=keys_of, now_s=now)
    sub = pb.SubscribeRequest(account="acct", pname="log1", from_seq=3)
    wire.sign_subscribe(sub, creds, now)
    wire.authenticate(wire.subscribe_claim(sub), keys_of=keys_of, now_s=now)
    sub.from_seq = 4
    with pytest.raises(Unauthenticated):
        wire.authenticate(wire.subscribe_claim(sub), keys_of=keys_of, now_s=now)


def test_a_prefix_token_may_scan_and_list_under_its_prefix() -> None:
    """A scan or a listing names no single name: a token with a name prefix admits it, and
    the front end cuts its range to the prefix (frontend/scan.request_range); it used to
    be refused, the account-wide request's empty name not starting with the prefix."""
    now = time.time()
    token = sas.mint("acct", 1, KEY1, ["scan"], "log", int(now) + 60, now)
    creds = wire.Credentials("acct", sas=token)
    for mode in (pb.SCAN_ENTITIES, pb.SCAN_LOG_NAMES):
        scan = fe_pb.ScanRequest(account="acct", mode=mode)
        wire.sign_scan(scan, creds, now)
        admitted = wire.authenticate(wire.scan_claim(scan), keys_of=keys_of, now_s=now)
        assert wire.sas_prefix(admitted) == "log"
    read_only = sas.mint("acct", 1, KEY1, ["read"], "log", int(now) + 60, now)
    scan = fe_pb.ScanRequest(account="acct")
    wire.sign_scan(scan, wire.Credentials("acct", sas=read_only), now)
    with pytest.raises(PermissionDenied, match="does not grant scan"):
        wire.authenticate(wire.scan_claim(scan), keys_of=keys_of, now_s=now)
