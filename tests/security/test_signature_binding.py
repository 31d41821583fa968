"""Issue 28, item 2: a request's signature binds every byte of it. A captured signed request
cannot be rewritten into another (other row, other value, other records) within the
signature's window, neither by an unknown field whose four bytes fix up a checksum nor by
chosen characters in a known field; and a request with unknown fields is refused.

The forgeries are made as an attacker of the old scheme made them: the old signature covered
CRC32C of the request with its credentials and bulk bytes removed (`old_view`), and the bulk
only through its own CRC32Cs, which the attacker recomputes. Against that scheme every
forgery below passed the front end's checks (seen before the fix)."""

from __future__ import annotations

import time

import pytest

from common.checksums import crc32c
from common.config import PartitionLimits
from common.errors import InvalidArgument, StampError, Unauthenticated
from common.proto import partition_pb2 as pb
from frontend import signing, wire
from frontend.server_checks import check_request
from partition_layer.payload_crc import payload_crcs
from tests.security.forgery import forge_crc32c, with_unknown_fixed32

KEY = b"\x07" * 32
ACME = wire.Credentials("acme", key=KEY)
LIMITS = PartitionLimits()


def keys_of(account: str) -> tuple[bytes, ...] | None:
    return (KEY, b"\x08" * 32) if account == "acme" else None


def old_view(request: pb.Request) -> bytes:
    """What the old scheme checksummed: the request without credentials, id or bulk bytes."""
    view = pb.Request()
    view.CopyFrom(request)
    view.ClearField("auth")
    view.id = 0
    op = view.WhichOneof("op")
    if op == "append":
        del view.append.records[:]
    elif op == "put":
        view.put.value = b""
    elif op == "batch":
        for item in view.batch.items:
            item.value = b""
    return view.SerializeToString(deterministic=True)


def captured(request: pb.Request) -> pb.Request:
    wire.sign_call(request, ACME, time.time())
    request.id = 41
    return request


def put(row: bytes, value: bytes, token: str = "tok-1") -> pb.Request:
    return pb.Request(account="acme", pname="users", token=token, put=pb.PutOp(
        row=row, value=value, value_crc=crc32c(value)))


def accepted(request: pb.Request) -> None:
    """Return if the front end's checks take `request` (as FrontEnd.start runs them)."""
    claim = wire.call_claim(request)
    wire.authenticate(claim, keys_of=keys_of, now_s=time.time())
    check_request(request, request.WhichOneof("op") or "", LIMITS)


def refused(request: pb.Request) -> StampError:
    with pytest.raises((Unauthenticated, InvalidArgument)) as caught:
        accepted(request)
    return caught.value


def test_a_genuine_signed_request_is_accepted() -> None:
    accepted(captured(put(b"r1", b"hello")))


def test_a_put_rewritten_with_an_unknown_field_is_refused() -> None:
    original = captured(put(b"r1", b"hello"))
    target = crc32c(old_view(original))
    evil = put(b"r2", b"another value")
    evil.auth.CopyFrom(original.auth)
    forged = with_unknown_fixed32(evil, target, old_view)
    assert crc32c(old_view(forged)) == target  # the old scheme's signed checksum holds
    refused(forged)


def test_a_put_rewritten_through_its_token_characters_is_refused() -> None:
    """No unknown field at all: twelve token characters '@'..'O' carry 48 free bits (32
    would do if independent; a few more make sure they span every checksum)."""
    original = captured(put(b"r1", b"hello"))
    target = crc32c(old_view(original))
    evil = put(b"r2", b"another value", token="@" * 12)
    evil.auth.CopyFrom(original.auth)
    view = old_view(evil)
    start = view.index(b"@" * 12)
    forged_view = forge_crc32c(view, [(start + i // 4, i % 4) for i in range(48)], target)
    evil.token = forged_view[start:start + 12].decode()
    assert crc32c(old_view(evil)) == target
    error = refused(evil)
    assert isinstance(error, Unauthenticated) and "bad signature" in str(error)


def test_a_delete_rewritten_to_another_row_is_refused() -> None:
    original = captured(pb.Request(account="acme", pname="users", token="t",
                                   delete=pb.DeleteOp(row=b"r1")))
    target = crc32c(old_view(original))
    evil = pb.Request(account="acme", pname="users", token="t",
                      delete=pb.DeleteOp(row=b"precious"))
    evil.auth.CopyFrom(original.auth)
    refused(with_unknown_fixed32(evil, target, old_view))


def test_an_append_with_other_records_is_refused() -> None:
    """Records entered the old signature only through their CRC32Cs: same CRCs, other
    records (each forged by four bytes of its own) passed."""
    records = [b"pay alice 10"]
    original = captured(pb.Request(account="acme", pname="orders", append=pb.AppendOp(
        records=records, crcs=payload_crcs(records), token="a-1")))
    evil_record = forge_crc32c(b"pay mallory 9999....", [(16 + i // 8, i % 8)
                                                         for i in range(32)],
                               original.append.crcs[0])
    forged = pb.Request()
    forged.CopyFrom(original)
    forged.append.records[0] = evil_record
    assert crc32c(old_view(forged)) == crc32c(old_view(original))
    error = refused(forged)
    assert isinstance(error, Unauthenticated)


def signed_as_is(request: pb.Request) -> pb.Request:
    """`request` signed over exactly the bytes it holds, unknown ones too (what a newer SDK,
    or a forger with the key, would send); the SDK itself refuses to sign such a request."""
    view = pb.Request()
    view.CopyFrom(request)
    view.id = 0
    now_ms = int(time.time() * 1000)
    digest = signing.digest_of(view.SerializeToString(deterministic=True))
    request.auth.CopyFrom(pb.Auth(account="acme", timestamp_ms=now_ms, signature=(
        signing.signature(KEY, "acme", "Put", "/acme/users", digest, now_ms))))
    return request


def test_unknown_fields_are_refused_even_when_signed() -> None:
    """The front end vouches only for what it can read."""
    request = pb.Request.FromString(put(b"r1", b"v").SerializeToString()
                                    + b"\x7d\x01\x02\x03\x04")
    error = refused(signed_as_is(request))
    assert isinstance(error, InvalidArgument) and "does not know" in str(error)
    for signer in (signed_as_is, lambda request: wire.sign_call(request, ACME, time.time())):
        nested = put(b"r1", b"v")
        nested.put.MergeFromString(b"\x7d\x01\x02\x03\x04")
        with pytest.raises(InvalidArgument, match="does not know"):
            accepted(signer(nested))  # the SDK does not even sign it
    plain = signed_as_is(put(b"r1", b"v"))
    accepted(plain)  # the same signing, without unknown bytes, is accepted


def test_the_signature_covers_the_value_itself() -> None:
    original = captured(put(b"r1", b"hello"))
    tampered = pb.Request()
    tampered.CopyFrom(original)
    tampered.put.value = b"jello"
    tampered.put.value_crc = crc32c(b"jello")
    refused(tampered)
