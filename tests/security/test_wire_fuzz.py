"""Property-based fuzzing (hypothesis) of the SDK and a running front end (issues 16, 28): names,
sizes and malformed requests. Whatever goes in, what comes out is a success or a typed error
(a StampError subclass, never Internal, never another exception, never a hang), and the front
end process is alive and answers afterwards.

Two doors: the SDK's methods with arbitrary arguments (most refused before sending, the rest
reach the front end), and raw Call, Subscribe and Scan requests that skip the SDK's checks
(signed correctly, so they get past authentication to the front end's own checks, or with
their credentials damaged). Issue 28 adds damaged bytes on the wire: a signed request with a
bit flipped, cut short or with an unknown field is refused (typed) and writes nothing, and an
oversized field gets a short refusal."""

from __future__ import annotations

import contextlib
import random
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stampsdk import Client
from stampsdk import errors as sdk_errors

from common.checksums import crc32c
from common.clock import SystemClock
from common.config import PartitionLimits
from common.errors import ERRORS_BY_NAME, Internal, InvalidArgument, StampError
from common.proto import frontend_pb2 as fe_pb
from common.proto import frontend_pb2_grpc as fe_grpc
from common.proto import partition_pb2 as pb
from common.rpc import from_rpc_error, sync_channel
from frontend import names, wire
from frontend.accounts import Account, AccountStore
from frontend.auth import NAME_CHARS_MAX
from lock_service.client import LockClient
from tests.conftest import module_stamp
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

LIMITS = PartitionLimits()
EXAMPLES = 40
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CALL_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def fuzz_stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    with module_stamp(tmp_path_factory, "sdk-fuzz", extent_nodes=3, stream_managers=1,
                      lock_servers=3, partition_managers=1, partition_servers=1,
                      front_ends=1) as stamp:
        yield stamp


@pytest.fixture(scope="module")
def account(fuzz_stamp: LocalStamp) -> Account:
    with LockClient.from_stamp(fuzz_stamp.data_dir, holder="test-fuzz") as locks:
        return AccountStore(locks, SystemClock(), cache_ttl_s=0).create("fuzz")


@pytest.fixture(scope="module")
def sdk(fuzz_stamp: LocalStamp, account: Account) -> Iterator[Client]:
    with Client([fuzz_stamp.address("fe-1")], account.name, key=account.keys[0],
                timeout_s=CALL_TIMEOUT_S) as client:
        client.append("alive", [b"first"])
        yield client


@pytest.fixture(scope="module")
def stub(fuzz_stamp: LocalStamp) -> Iterator[fe_grpc.FrontEndStub]:
    with sync_channel(fuzz_stamp.address("fe-1"), LIMITS.rpc_message_bytes_max) as channel:
        yield fe_grpc.FrontEndStub(channel)


def typed(outcome: Callable[[], Any]) -> None:
    """Run `outcome`: it succeeds or raises a StampError (the SDK's, or the stamp's for a
    raw call) other than Internal."""
    try:
        result = outcome()
        if isinstance(result, Iterator):
            for _ in zip(range(100), result, strict=False):
                pass
    except (StampError, sdk_errors.StampError) as exc:
        assert not isinstance(exc, (Internal, sdk_errors.Internal)), exc


def still_answers(stamp: LocalStamp, sdk: Client) -> None:
    assert stamp.alive("fe-1")
    _, next_seq = sdk.peek("alive")
    assert sdk.append("alive", [b"again"]) == next_seq


# ---- the SDK with arbitrary arguments ------------------------------------------------------

SIZES = st.sampled_from([0, 1, 100, LIMITS.record_bytes_max, LIMITS.record_bytes_max + 1])
NAMES = st.one_of(st.text(max_size=70), st.from_regex(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]",
                                                      fullmatch=True),
                  st.sampled_from(["", "ab", "a" * 64, "a--b", "-ab", "ab-", "Abc", "a_b"]))
ROWS = st.one_of(st.binary(max_size=40), st.text(max_size=20),
                 st.sampled_from([b"", b"r" * LIMITS.row_bytes_max,
                                  b"r" * (LIMITS.row_bytes_max + 1)]), st.integers(),
                 st.none())
SEQS = st.one_of(st.integers(min_value=-5, max_value=2**64 + 5), st.sampled_from(
    [0, 2**64 - 1, 2**64]), st.text(max_size=3), st.none(), st.booleans())
ANY = st.one_of(st.none(), st.integers(), st.text(max_size=20), st.binary(max_size=20),
                st.lists(st.binary(max_size=5), max_size=3))


@st.composite
def records(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["sizes", "many", "weird"]))
    if kind == "sizes":
        return [b"x" * draw(SIZES) for _ in range(draw(st.integers(0, 5)))]
    if kind == "many":
        return [b""] * draw(st.sampled_from([LIMITS.append_records_max,
                                             LIMITS.append_records_max + 1]))
    return draw(ANY)


@FUZZ
@given(log=NAMES, recs=records(), token=st.one_of(st.none(), st.text(max_size=140)),
       seq=SEQS, limit=SEQS)
def test_fuzz_log_calls(fuzz_stamp: LocalStamp, sdk: Client, log: Any, recs: Any,
                        token: Any, seq: Any, limit: Any) -> None:
    typed(lambda: sdk.append(log, recs, token))
    typed(lambda: sdk.read(log, seq, limit))
    typed(lambda: sdk.peek(log))
    typed(lambda: sdk.trim(log, seq))
    typed(lambda: sdk.list_logs(log))
    still_answers(fuzz_stamp, sdk)


@FUZZ
@given(pname=NAMES, row=ROWS, value=st.one_of(st.binary(max_size=50), st.sampled_from(
    [b"v" * LIMITS.value_bytes_max, b"v" * (LIMITS.value_bytes_max + 1)]), st.text(max_size=5),
    st.none()), if_match=st.one_of(st.none(), st.text(max_size=20), st.integers()),
    if_none_match=st.one_of(st.none(), st.just("*"), st.text(max_size=3)),
    ops=st.one_of(ANY, st.lists(st.tuples(st.sampled_from(["put", "delete", "x"]), ROWS,
                                          st.binary(max_size=10)), max_size=5)))
def test_fuzz_entity_calls(fuzz_stamp: LocalStamp, sdk: Client, pname: Any, row: Any,
                           value: Any, if_match: Any, if_none_match: Any, ops: Any) -> None:
    typed(lambda: sdk.put(pname, row, value, if_match, if_none_match))
    typed(lambda: sdk.get(pname, row))
    typed(lambda: sdk.delete(pname, row, if_match))
    typed(lambda: sdk.batch(pname, ops))
    still_answers(fuzz_stamp, sdk)


BOUNDS = st.one_of(st.none(), NAMES, st.tuples(NAMES, ROWS), ANY)


@FUZZ
@given(start=BOUNDS, end=BOUNDS, limit=SEQS, page_rows=SEQS,
       continuation=st.one_of(st.none(), st.text(max_size=40), st.from_regex(
           r"~?[A-Za-z0-9_-]{0,40}", fullmatch=True), ANY))
def test_fuzz_scans(fuzz_stamp: LocalStamp, sdk: Client, start: Any, end: Any, limit: Any,
                    page_rows: Any, continuation: Any) -> None:
    typed(lambda: sdk.scan(start, end, limit, continuation, page_rows))
    still_answers(fuzz_stamp, sdk)


# ---- raw requests past the SDK's checks ----------------------------------------------------

@st.composite
def raw_requests(draw: st.DrawFn) -> pb.Request:
    request = pb.Request(account="fuzz", pname=draw(NAMES.filter(lambda n: isinstance(n, str))),
                         token=draw(st.text(max_size=140)))
    op = draw(st.sampled_from(["append", "read", "trim", "seal", "peek", "put", "get",
                               "delete", "batch", "scan", "none"]))
    blobs = st.lists(st.binary(max_size=30), max_size=4)
    if op == "append":
        data = draw(blobs)
        request.append.records.extend(data)
        request.append.token = draw(st.text(max_size=140))
        crcs = draw(st.sampled_from(["right", "wrong", "missing"]))
        if crcs == "right":
            request.append.crcs.extend(crc32c(r) for r in data)
        elif crcs == "wrong":
            request.append.crcs.extend(crc32c(r) ^ 1 for r in data)
    elif op == "read":
        request.read.from_seq = draw(st.integers(0, 2**64 - 1))
        request.read.limit = draw(st.integers(0, 2**32 - 1))
    elif op == "trim":
        request.trim.upto_seq = draw(st.integers(0, 2**64 - 1))
    elif op in ("seal", "peek"):
        getattr(request, op).SetInParent()
    elif op == "put":
        value = draw(st.binary(max_size=30))
        request.put.row = draw(st.binary(max_size=LIMITS.row_bytes_max + 2))
        request.put.value = value
        request.put.if_match = draw(st.text(max_size=10))
        request.put.if_none_match = draw(st.booleans())
        request.put.value_crc = crc32c(value) ^ draw(st.sampled_from([0, 0, 1]))
    elif op in ("get", "delete"):
        getattr(request, op).row = draw(st.binary(max_size=LIMITS.row_bytes_max + 2))
    elif op == "batch":
        for _ in range(draw(st.integers(0, 4))):
            value = draw(st.binary(max_size=10))
            request.batch.items.add(kind=draw(st.sampled_from(["put", "delete", "", "x"])),
                                    row=draw(st.binary(max_size=8)), value=value,
                                    value_crc=crc32c(value), if_match=draw(st.text(max_size=4)),
                                    if_none_match=draw(st.booleans()))
    elif op == "scan":
        request.scan.start_pname = draw(st.text(max_size=5))
    return request


def damaged(request: pb.Request, how: str, key: bytes) -> pb.Request:
    wire_request = pb.Request()
    wire_request.CopyFrom(request)
    # A request the signer itself refuses (an op Call does not take) goes unsigned.
    with contextlib.suppress(StampError):
        wire.sign_call(wire_request, wire.Credentials("fuzz", key=key),
                       time.time() + (900 if how == "stale" else 0))
    if how == "unsigned":
        wire_request.ClearField("auth")
    elif how == "bad-signature":
        wire_request.auth.signature = bytes(32)
    elif how == "other-account":
        wire_request.account = "other"
    return wire_request


@FUZZ
@given(requests=st.lists(raw_requests(), min_size=1, max_size=5),
       how=st.sampled_from(["signed", "signed", "signed", "unsigned", "bad-signature",
                            "stale", "other-account"]))
def test_fuzz_raw_calls(fuzz_stamp: LocalStamp, sdk: Client, stub: fe_grpc.FrontEndStub,
                        account: Account, requests: list[pb.Request], how: str) -> None:
    sent = [damaged(r, how, account.keys[0]) for r in requests]
    for i, request in enumerate(sent):
        request.id = i + 1
    answers = {}
    for batch in stub.Call(iter([pb.RequestBatch(requests=sent)]), timeout=CALL_TIMEOUT_S):
        for response in batch.responses:
            answers[response.id] = response
    assert sorted(answers) == [r.id for r in sent]  # every request answered, once
    for response in answers.values():
        assert response.error in ("", *ERRORS_BY_NAME) and response.error != "Internal", \
            (response.error, response.message)
        if how != "signed":
            assert response.error in ("Unauthenticated", "PermissionDenied",
                                      "InvalidArgument"), response
    still_answers(fuzz_stamp, sdk)


def stream_error(call: Callable[[], Iterator[Any]]) -> StampError | None:
    try:
        for _ in call():
            pass
    except grpc.RpcError as exc:
        return from_rpc_error(exc)
    return None


@FUZZ
@given(pname=NAMES.filter(lambda n: isinstance(n, str) and not _valid_log(n)),
       from_seq=st.integers(0, 2**64 - 1), signed=st.booleans())
def test_fuzz_raw_subscribes(fuzz_stamp: LocalStamp, sdk: Client, stub: fe_grpc.FrontEndStub,
                             account: Account, pname: str, from_seq: int, signed: bool
                             ) -> None:
    request = pb.SubscribeRequest(account="fuzz", pname=pname, from_seq=from_seq)
    if signed:
        try:
            wire.sign_subscribe(request, wire.Credentials("fuzz", key=account.keys[0]),
                                time.time())
        except InvalidArgument:  # a name not even the signer takes ('\n'): goes unsigned
            signed = False
    error = stream_error(lambda: stub.Subscribe(request, timeout=CALL_TIMEOUT_S))
    # A name no log can have is refused (not waited on, as a log yet to be written would be).
    # One longer than any name is refused for its size before credentials are looked at
    # (auth.check_field_sizes: nothing of it is kept or looked up), signed or not.
    oversized = len(pname) > NAME_CHARS_MAX
    assert error is not None and type(error).__name__ in (
        ("InvalidArgument",) if signed or oversized else ("Unauthenticated",)), error
    still_answers(fuzz_stamp, sdk)


def _valid_log(name: str) -> bool:
    try:
        names.check_log(name)
    except StampError:
        return False
    return True


@FUZZ
@given(start=st.text(max_size=8), start_row=st.binary(max_size=8), has_end=st.booleans(),
       end=st.text(max_size=8), end_row=st.binary(max_size=8), mode=st.sampled_from([0, 1, 7]),
       prefix=st.text(max_size=8), limit=st.integers(0, 2**64 - 1),
       page_rows=st.integers(0, 2**32 - 1), continuation=st.binary(max_size=64),
       seed=st.integers(0, 2**32))
def test_fuzz_raw_scans(fuzz_stamp: LocalStamp, sdk: Client, stub: fe_grpc.FrontEndStub,
                        account: Account, start: str, start_row: bytes, has_end: bool, end: str,
                        end_row: bytes, mode: int, prefix: str, limit: int, page_rows: int,
                        continuation: bytes, seed: int) -> None:
    request = fe_pb.ScanRequest(account="fuzz", start_pname=start, start_row=start_row,
                                has_end=has_end, end_pname=end, end_row=end_row, mode=mode,
                                prefix=prefix, limit=limit, page_rows=page_rows,
                                continuation=continuation if random.Random(seed).random() < 0.5
                                else b"")
    wire.sign_scan(request, wire.Credentials("fuzz", key=account.keys[0]), time.time())
    error = stream_error(lambda: stub.Scan(request, timeout=CALL_TIMEOUT_S))
    assert error is None or not isinstance(error, Internal), error
    assert error is None or type(error).__name__ in ERRORS_BY_NAME
    still_answers(fuzz_stamp, sdk)


# ---- damaged bytes on the wire (issue 28) ---------------------------------------------------

CALL_METHOD = "/stamp.frontend.FrontEnd/Call"
# A refusal quotes at most a short piece of what it was sent (names cut to 64 characters).
REFUSAL_CHARS_MAX = 400


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _batch_bytes(request_bytes: bytes) -> bytes:
    """A RequestBatch holding one request given as its bytes (field 1, length-delimited)."""
    return b"\x0a" + _varint(len(request_bytes)) + request_bytes


def _same_request(a: pb.Request, b: pb.Request) -> bool:
    """Equal but for the session's id (which the signature does not cover)."""
    a2, b2 = pb.Request(), pb.Request()
    a2.CopyFrom(a)
    b2.CopyFrom(b)
    a2.id = b2.id = 0
    return a2.SerializeToString(deterministic=True) == b2.SerializeToString(deterministic=True)


def _send_raw(stamp: LocalStamp, data: bytes) -> list[pb.Response] | grpc.RpcError:
    with sync_channel(stamp.address("fe-1"), LIMITS.rpc_message_bytes_max) as channel:
        call = channel.stream_stream(CALL_METHOD, request_serializer=None,
                                     response_deserializer=pb.ResponseBatch.FromString)
        try:
            return [response for batch in call(iter([data]), timeout=CALL_TIMEOUT_S)
                    for response in batch.responses]
        except grpc.RpcError as exc:
            return exc


@st.composite
def damages(draw: st.DrawFn, size: int) -> tuple[str, int, int]:
    how = draw(st.sampled_from(["flip", "flip", "flip", "truncate", "unknown-field"]))
    return how, draw(st.integers(0, max(0, size - 1))), draw(st.integers(0, 7))


@FUZZ
@given(data=st.data(), op=st.sampled_from(["append", "put", "delete"]))
def test_fuzz_damaged_bytes_write_nothing(fuzz_stamp: LocalStamp, sdk: Client,
                                          account: Account, data: st.DataObject,
                                          op: str) -> None:
    """A signed request with one bit flipped, cut short, or an unknown field added is
    refused with a typed error (or, if the damage left the same request, done): never
    written as something else, never an Internal error, the front end alive after."""
    name = f"wf{secrets.token_hex(6)}"  # hypothesis seeds `random`: names would repeat
    request = pb.Request(account="fuzz", pname=name, token=f"t-{name}")
    if op == "append":
        records = [b"record one", b"record two"]
        request.append.records.extend(records)
        request.append.crcs.extend(crc32c(r) for r in records)
        request.append.token = f"t-{name}"
    elif op == "put":
        request.put.row, request.put.value = b"row", b"value"
        request.put.value_crc = crc32c(b"value")
    else:
        request.delete.row = b"row"
    wire.sign_call(request, wire.Credentials("fuzz", key=account.keys[0]), time.time())
    request.id = 1
    original = request.SerializeToString()
    how, index, bit = data.draw(damages(len(original)))
    if how == "flip":
        damaged_bytes = bytearray(original)
        damaged_bytes[index] ^= 1 << bit
        sent = bytes(damaged_bytes)
    elif how == "truncate":
        sent = original[:index]
    else:
        sent = original + b"\x7d" + bytes([bit]) * 4
    outcome = _send_raw(fuzz_stamp, _batch_bytes(sent))
    try:
        parsed: pb.Request | None = pb.Request.FromString(sent)
    except Exception:
        parsed = None
    genuine = parsed is not None and how != "unknown-field" and _same_request(parsed, request)
    if isinstance(outcome, grpc.RpcError):
        # Only bytes that are no Request at all may end the stream, and as bad input.
        assert parsed is None, outcome
        assert outcome.code() in (grpc.StatusCode.INVALID_ARGUMENT,
                                  grpc.StatusCode.INTERNAL), outcome
    else:
        for response in outcome:
            assert response.error in ("", *ERRORS_BY_NAME) and response.error != "Internal", \
                (response.error, response.message)
            assert len(response.message) <= REFUSAL_CHARS_MAX, response.message
            if not genuine:
                assert response.error, (how, index, bit, "a damaged request was done")
    if not genuine and op == "append":
        assert sdk.peek(name) == (0, 0)
    elif not genuine and op == "put":
        with pytest.raises(sdk_errors.NotFound):
            sdk.get(name, b"row")
    still_answers(fuzz_stamp, sdk)


@pytest.mark.parametrize("field", ["account", "pname", "token", "signature", "sas", "row"])
def test_oversized_fields_are_refused_briefly(fuzz_stamp: LocalStamp, sdk: Client,
                                              stub: fe_grpc.FrontEndStub, account: Account,
                                              field: str) -> None:
    """A field of 1 MiB, signed or not, is refused with a message of a few hundred
    characters at most, and nothing is written."""
    huge = "x" * (1 << 20)
    request = pb.Request(account="fuzz", pname="oversized", token="t-big",
                         put=pb.PutOp(row=b"r", value=b"v", value_crc=crc32c(b"v")))
    if field in ("account", "pname", "token"):
        setattr(request, field, huge)
    elif field == "row":
        request.put.row = huge.encode()
    with contextlib.suppress(StampError):
        wire.sign_call(request, wire.Credentials("fuzz", key=account.keys[0]), time.time())
    if field == "signature":
        request.auth.signature = huge.encode()
    elif field == "sas":
        request.auth.sas = huge
    request.id = 1
    answers = list(stub.Call(iter([pb.RequestBatch(requests=[request])]),
                             timeout=CALL_TIMEOUT_S))
    (response,) = [r for batch in answers for r in batch.responses]
    assert response.error in ("Unauthenticated", "InvalidArgument", "PermissionDenied"), \
        response
    assert len(response.message) <= REFUSAL_CHARS_MAX, response.message[:500]
    with pytest.raises(sdk_errors.NotFound):
        sdk.get("oversized", b"r")
    still_answers(fuzz_stamp, sdk)
