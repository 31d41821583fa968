"""Probe tests of the front end (issue 16, DESIGN §6) on a real stamp: requests built and
signed here with frontend/wire.py (what the SDK does) go to a front end process over a raw
gRPC stub; what they write is checked directly on the partition layer.

Every refused request is checked for its error *and* for having written nothing."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common import process
from common.clock import SystemClock
from common.errors import (
    ERRORS_BY_NAME,
    ChecksumError,
    InvalidArgument,
    PermissionDenied,
    StampError,
    Unauthenticated,
)
from common.process import LOG_FILE
from common.proto import frontend_pb2 as fe_pb
from common.proto import frontend_pb2_grpc as fe_grpc
from common.proto import partition_pb2 as pb
from common.rpc import from_rpc_error, sync_channel
from frontend import connection_string, sas, wire
from frontend.accounts import AccountStore
from lock_service.client import LockClient
from partition_layer.client import PartitionClient
from partition_layer.payload_crc import payload_crcs
from partition_layer.requests import route_key
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

T = TypeVar("T")
StampFactory = Callable[..., LocalStamp]
MESSAGE_BYTES_MAX = 64 * 1024 * 1024


def wait_for(check: Callable[[], T | None], timeout_s: float, what: str) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g}s: {what}")
        time.sleep(0.05)


class RawFrontEnd:
    """A front end through its raw stub: one Call stream per `call`."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._channel = sync_channel(address, MESSAGE_BYTES_MAX)
        self.stub = fe_grpc.FrontEndStub(self._channel)

    def call_many(self, requests: list[pb.Request], timeout_s: float = 30.0
                  ) -> dict[int, pb.Response]:
        for i, request in enumerate(requests):
            request.id = i + 1
        answers: dict[int, pb.Response] = {}
        for batch in self.stub.Call(iter([pb.RequestBatch(requests=requests)]),
                                    timeout=timeout_s):
            for response in batch.responses:
                answers[response.id] = response
        assert sorted(answers) == [r.id for r in requests], answers
        return answers

    def call(self, request: pb.Request) -> pb.Response:
        return self.call_many([request])[1]

    def status(self) -> fe_pb.FrontEndStatus:
        return self.stub.Status(fe_pb.FrontEndStatusRequest(), timeout=10)

    def close(self) -> None:
        self._channel.close()


def append_request(account: str, log: str, records: list[bytes], token: str = "") -> pb.Request:
    return pb.Request(account=account, pname=log, append=pb.AppendOp(
        records=records, crcs=payload_crcs(records), token=token or f"t-{time.time_ns()}"))


def signed(request: pb.Request, credentials: wire.Credentials, skew_s: float = 0.0
           ) -> pb.Request:
    wire.sign_call(request, credentials, time.time() + skew_s)
    return request


def refused(response: pb.Response, error: type[StampError], *words: str) -> None:
    assert response.error == error.__name__, (response.error, response.message)
    for word in words:
        assert word in response.message, (word, response.message)


@pytest.fixture
def fe_stamp(stamp_factory: StampFactory) -> LocalStamp:
    return stamp_factory(3, 1, lock_servers=3, partition_managers=1, partition_servers=2,
                         front_ends=2)


@pytest.fixture
def accounts(fe_stamp: LocalStamp) -> Iterator[AccountStore]:
    with LockClient.from_stamp(fe_stamp.data_dir, holder="test") as locks:
        yield AccountStore(locks, SystemClock(), cache_ttl_s=0)


@pytest.fixture
def pc(fe_stamp: LocalStamp) -> Iterator[PartitionClient]:
    with PartitionClient.from_stamp(str(fe_stamp.data_dir)) as client:
        yield client


@pytest.fixture
def fe(fe_stamp: LocalStamp) -> Iterator[RawFrontEnd]:
    front_end = RawFrontEnd(fe_stamp.address("fe-1"))
    yield front_end
    front_end.close()


def test_stamp_up_writes_the_admin_connection_string(fe_stamp: LocalStamp,
                                                     accounts: AccountStore) -> None:
    path = fe_stamp.admin_connection_string_file
    assert path.stat().st_mode & 0o777 == 0o600
    parsed = connection_string.parse(path.read_text().strip())
    assert parsed.account == "admin"
    assert list(parsed.endpoints) == [r.address for r in fe_stamp.front_ends()]
    assert parsed.key == accounts.get("admin").keys[0]
    fe_stamp.ensure_admin_account()  # again (a second `stamp up`): the same account kept
    assert connection_string.parse(path.read_text().strip()).key == parsed.key


def test_signed_requests_reach_the_partition_servers(
        fe: RawFrontEnd, accounts: AccountStore, pc: PartitionClient) -> None:
    acme = wire.Credentials("acme", key=accounts.create("acme").keys[1])
    first = fe.call(signed(append_request("acme", "orders", [b"a", b"b"]), acme))
    assert not first.error, first.message
    second = fe.call(signed(append_request("acme", "orders", [b"c"]), acme))
    assert (first.first_seq, second.first_seq) == (0, 2)
    assert pc.read("acme", "orders", 0, 10) == [(0, b"a"), (1, b"b"), (2, b"c")]
    read = fe.call(signed(pb.Request(account="acme", pname="orders",
                                     read=pb.ReadOp(from_seq=1, limit=10)), acme))
    assert [(r.seq, r.data) for r in read.records] == [(1, b"b"), (2, b"c")]
    value = b"v" * 100
    put = fe.call(signed(pb.Request(account="acme", pname="users", token="p1", put=pb.PutOp(
        row=b"alice", value=value, value_crc=payload_crcs([value])[0])), acme))
    assert put.etag, put.message
    assert pc.get("acme", "users", b"alice") == (value, put.etag)
    # Many requests on one stream, answered each with its own id.
    many = fe.call_many([signed(append_request("acme", f"log-{i % 4}", [b"x"]), acme)
                         for i in range(200)])
    assert all(not r.error for r in many.values())
    assert sum(pc.peek("acme", f"log-{i}")[1] for i in range(4)) == 200
    assert fe.status().requests >= 204


def test_bad_credentials_are_refused_and_write_nothing(
        fe: RawFrontEnd, accounts: AccountStore, pc: PartitionClient) -> None:
    acme_account = accounts.create("acme")
    acme = wire.Credentials("acme", key=acme_account.keys[0])
    other = wire.Credentials("other", key=accounts.create("other").keys[0])
    assert not fe.call(signed(append_request("acme", "orders", [b"ok"]), acme)).error

    refused(fe.call(append_request("acme", "orders", [b"unsigned"])), Unauthenticated,
            "not signed")
    wrong = wire.Credentials("acme", key=b"k" * 32)
    refused(fe.call(signed(append_request("acme", "orders", [b"wrong"]), wrong)),
            Unauthenticated, "bad signature")
    refused(fe.call(signed(append_request("acme", "orders", [b"stale"]), acme, -360)),
            Unauthenticated, "timestamp", "behind", "300 s")
    changed = signed(append_request("acme", "orders", [b"signed"]), acme)
    changed.append.records[0] = b"change"  # a consistent CRC, but not what was signed
    changed.append.crcs[0] = payload_crcs([b"change"])[0]
    refused(fe.call(changed), Unauthenticated, "bad signature")
    refused(fe.call(signed(append_request("acme", "orders", [b"foreign"]), other)),
            PermissionDenied, "may not act")
    now = time.time()
    expired = sas.mint("acme", 1, acme_account.keys[0], ["append"], "", int(now) - 10,
                       now - 100)
    refused(fe.call(signed(append_request("acme", "orders", [b"expired"]),
                           wire.Credentials("acme", sas=expired))),
            Unauthenticated, "expired")
    read_only = sas.mint("acme", 1, acme_account.keys[0], ["read"], "", int(now) + 3600, now)
    refused(fe.call(signed(append_request("acme", "orders", [b"read-only"]),
                           wire.Credentials("acme", sas=read_only))),
            PermissionDenied, "does not grant append")
    other_prefix = sas.mint("acme", 1, acme_account.keys[0], ["append"], "inv",
                            int(now) + 3600, now)
    refused(fe.call(signed(append_request("acme", "orders", [b"prefix"]),
                           wire.Credentials("acme", sas=other_prefix))),
            PermissionDenied, "covers names starting with")
    # A good token works.
    granted = sas.mint("acme", 2, acme_account.keys[1], ["append"], "ord", int(now) + 3600, now)
    assert not fe.call(signed(append_request("acme", "orders", [b"sas"]),
                              wire.Credentials("acme", sas=granted))).error
    assert [d for _, d in pc.read("acme", "orders", 0, 100)] == [b"ok", b"sas"]
    status = fe.status()
    assert status.refused_unauthenticated >= 4 and status.refused_permission >= 3


def test_a_rotated_key_stops_working_within_10_s(
        fe: RawFrontEnd, accounts: AccountStore, pc: PartitionClient) -> None:
    old = wire.Credentials("acme", key=accounts.create("acme").keys[0])
    assert not fe.call(signed(append_request("acme", "orders", [b"before"]), old)).error
    rotated_at = time.monotonic()
    new = wire.Credentials("acme", key=accounts.rotate("acme", 1).keys[0])

    def old_key_refused() -> bool:
        response = fe.call(signed(append_request("acme", "orders", [b"old"]), old))
        return response.error == "Unauthenticated"

    wait_for(old_key_refused, 15, "the rotated key refused")
    assert time.monotonic() - rotated_at < 10 + 1  # 1 s for the request's own round trip
    assert not fe.call(signed(append_request("acme", "orders", [b"new"]), new)).error
    data = [d for _, d in pc.read("acme", "orders", 0, 1000)]
    assert data[0] == b"before" and data[-1] == b"new"


def test_checksums_names_and_limits(fe: RawFrontEnd, accounts: AccountStore,
                                    pc: PartitionClient) -> None:
    acme = wire.Credentials("acme", key=accounts.create("acme").keys[0])
    corrupt = append_request("acme", "orders", [b"good", b"flipped"])
    corrupt.append.crcs[1] ^= 1
    refused(fe.call(signed(corrupt, acme)), ChecksumError, "record 1")
    refused(fe.call(signed(append_request("acme", "Bad_Name", [b"x"]), acme)),
            InvalidArgument, "log name")
    refused(fe.call(signed(append_request("acme", "orders", [b"x"] * 10_001), acme)),
            InvalidArgument, "partition.append_records_max")
    big = b"x" * (1024 * 1024 + 1)
    refused(fe.call(signed(append_request("acme", "orders", [big]), acme)),
            InvalidArgument, "partition.record_bytes_max")
    refused(fe.call(signed(pb.Request(account="acme", pname="users", get=pb.GetOp(
        row=b"r" * 1025)), acme)), InvalidArgument, "partition.row_bytes_max")
    items = [pb.BatchItem(kind="delete", row=b"r%d" % i) for i in range(101)]
    refused(fe.call(signed(pb.Request(account="acme", pname="users", token="b",
                                      batch=pb.BatchOp(items=items)), acme)),
            InvalidArgument, "partition.batch_ops_max")
    assert pc.peek("acme", "orders") == (0, 0)  # nothing written
    assert fe.status().refused_invalid >= 6


def test_subscribe_through_a_front_end(fe: RawFrontEnd, accounts: AccountStore,
                                       pc: PartitionClient) -> None:
    acme = wire.Credentials("acme", key=accounts.create("acme").keys[0])
    pc.append("acme", "events", [b"e0", b"e1"])
    pc.seal("acme", "events")
    request = pb.SubscribeRequest(account="acme", pname="events", from_seq=1)
    wire.sign_subscribe(request, acme, time.time())
    replies = list(fe.stub.Subscribe(request, timeout=30))
    assert [(r.seq, r.data) for reply in replies for r in reply.records] == [(1, b"e1")]
    unsigned = pb.SubscribeRequest(account="acme", pname="events")
    with pytest.raises(grpc.RpcError) as caught:
        list(fe.stub.Subscribe(unsigned, timeout=30))
    assert type(from_rpc_error(caught.value)).__name__ == "Unauthenticated"


def test_killing_a_front_end_loses_nothing(fe_stamp: LocalStamp, accounts: AccountStore,
                                          pc: PartitionClient) -> None:
    acme = wire.Credentials("acme", key=accounts.create("acme").keys[0])
    fe1, fe2 = (RawFrontEnd(fe_stamp.address(n)) for n in ("fe-1", "fe-2"))
    try:
        assert not fe1.call(signed(append_request("acme", "orders", [b"a"]), acme)).error
        fe_stamp.kill("fe-1")
        with pytest.raises(grpc.RpcError):
            fe1.call(signed(append_request("acme", "orders", [b"lost"]), acme))
        assert not fe2.call(signed(append_request("acme", "orders", [b"b"]), acme)).error
        fe_stamp.start("fe-1")
        fe1b = RawFrontEnd(fe_stamp.address("fe-1"))
        try:
            assert not fe1b.call(signed(append_request("acme", "orders", [b"c"]), acme)).error
        finally:
            fe1b.close()
        assert [d for _, d in pc.read("acme", "orders", 0, 10)] == [b"a", b"b", b"c"]
        pid = fe_stamp.record("fe-2").pid
        fe_stamp.kill("fe-2", signal.SIGTERM)  # a clean stop: it ends on its own, and says so
        wait_for(lambda: not process.is_alive(pid), 30, "fe-2 stopped on SIGTERM")
        log = (Path(fe_stamp.record("fe-2").dir) / LOG_FILE).read_text()
        assert "fe-2 stopping" in log and "Traceback" not in log
    finally:
        fe1.close()
        fe2.close()


def test_a_noisy_account_is_throttled_while_a_quiet_one_is_not(
        stamp_factory: StampFactory) -> None:
    """Per-account rate limits at a front end: an account that floods it is refused with
    Throttled and a retry-after, and what it was refused is not written; another account's
    requests at the same time all go through."""
    stamp = stamp_factory(3, 1, lock_servers=1, partition_managers=1, partition_servers=1,
                          front_ends=1, front_end={"account_requests_per_s_max": 50.0,
                                                   "account_burst_requests_max": 20})
    with LockClient.from_stamp(stamp.data_dir, holder="test") as locks:
        store = AccountStore(locks, SystemClock(), cache_ttl_s=0)
        noisy = wire.Credentials("noisy", key=store.create("noisy").keys[0])
        quiet = wire.Credentials("quiet", key=store.create("quiet").keys[0])
    fe = RawFrontEnd(stamp.address("fe-1"))
    try:
        # One stream, the quiet account's requests among the flood.
        requests = [signed(append_request("noisy", "flood", [b"n%d" % i]), noisy)
                    for i in range(400)]
        for i in range(15):
            requests.insert(i * 27, signed(append_request("quiet", "calm", [b"q"]), quiet))
        answers = fe.call_many(requests)
        flood = {i: r for i, r in answers.items() if requests[i - 1].account == "noisy"}
        quiet_answers = {i: r for i, r in answers.items() if requests[i - 1].account == "quiet"}
        throttled = [r for r in flood.values() if r.error == "Throttled"]
        admitted = [r for r in flood.values() if not r.error]
        assert len(admitted) + len(throttled) == 400
        # 20 at once, then 50/s: however slow the machine, most of a 400-request burst waits.
        assert len(throttled) >= 200, len(throttled)
        assert all(r.retry_after_s > 0 and "request rate" in r.message for r in throttled)
        assert all(not r.error for r in quiet_answers.values())
        assert fe.status().throttled == len(throttled)
        with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
            assert pc.peek("noisy", "flood")[1] == len(admitted)  # refused: not written
            assert pc.peek("quiet", "calm")[1] == 15
    finally:
        fe.close()


_NAMES = st.one_of(st.sampled_from(["acme", "orders", "users", "", "Acme", "a-", "a--b",
                                    "x" * 64]), st.text(max_size=70))
_BYTES = st.binary(max_size=64)


@st.composite
def _fuzzed_request(draw: st.DrawFn) -> pb.Request:
    request = pb.Request(account=draw(st.sampled_from(["acme", "other", "", "ACME"])),
                         pname=draw(_NAMES), token=draw(st.text(max_size=140)))
    op = draw(st.sampled_from(["append", "read", "trim", "seal", "peek", "put", "get",
                               "delete", "batch", "scan", "none"]))
    if op == "append":
        records = draw(st.lists(_BYTES, max_size=5))
        crcs = payload_crcs(records) if draw(st.booleans()) else draw(
            st.lists(st.integers(0, 2**32 - 1), max_size=5))
        request.append.CopyFrom(pb.AppendOp(records=records, crcs=crcs,
                                            token=draw(st.text(max_size=140))))
    elif op == "read":
        request.read.CopyFrom(pb.ReadOp(from_seq=draw(st.integers(0, 2**64 - 1)),
                                        limit=draw(st.integers(0, 2**32 - 1))))
    elif op == "trim":
        request.trim.upto_seq = draw(st.integers(0, 2**64 - 1))
    elif op in ("seal", "peek"):
        getattr(request, op).SetInParent()
    elif op == "put":
        value = draw(_BYTES)
        request.put.CopyFrom(pb.PutOp(row=draw(_BYTES), value=value, value_crc=draw(
            st.sampled_from([payload_crcs([value])[0], 0])), if_match=draw(st.text(max_size=8))))
    elif op in ("get", "delete"):
        getattr(request, op).row = draw(_BYTES)
    elif op == "batch":
        items = draw(st.lists(st.builds(pb.BatchItem, kind=st.sampled_from(["put", "delete",
                                                                              "x"]),
                                        row=_BYTES, value=_BYTES), max_size=4))
        for item in items:
            item.value_crc = payload_crcs([item.value])[0]
        request.batch.CopyFrom(pb.BatchOp(items=items))
    elif op == "scan":
        request.scan.limit = draw(st.integers(0, 100))
    return request


def test_fuzzed_requests_get_typed_errors_never_a_crash(fe: RawFrontEnd,
                                                        accounts: AccountStore) -> None:
    """Property: whatever a client sends, signed or not, each request gets exactly one typed
    answer (never Internal) and the front end keeps serving."""
    acme = wire.Credentials("acme", key=accounts.create("acme").keys[0])
    known = set(ERRORS_BY_NAME) - {"Internal", "StampError"}

    @settings(max_examples=15, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(st.tuples(_fuzzed_request(), st.booleans()), min_size=1, max_size=30))
    def property_(cases: list[tuple[pb.Request, bool]]) -> None:
        requests = []
        for request, sign in cases:
            if sign and request.WhichOneof("op") not in (None, "scan"):
                request = signed(request, acme)
            requests.append(request)
        for i, response in fe.call_many(requests).items():
            assert not response.error or response.error in known, response
            if not requests[i - 1].HasField("auth"):  # unsigned: never past the door
                assert response.error in ("Unauthenticated", "InvalidArgument"), response
        assert fe.status().name == "fe-1"

    property_()


def test_a_subscription_through_a_front_end_survives_a_partition_server_kill(
        fe: RawFrontEnd, fe_stamp: LocalStamp, accounts: AccountStore,
        pc: PartitionClient) -> None:
    """The front end follows the log to its new partition server: the subscriber sees every
    record once, in order, and the stream ends when the log is sealed."""
    acme = wire.Credentials("acme", key=accounts.create("acme").keys[0])
    pc.append("acme", "events", [b"e0", b"e1"])
    request = pb.SubscribeRequest(account="acme", pname="events", from_seq=0)
    wire.sign_subscribe(request, acme, time.time())
    seen: list[tuple[int, bytes]] = []
    stream = fe.stub.Subscribe(request, timeout=120)
    errors: list[BaseException] = []

    def follow() -> None:
        try:
            for reply in stream:
                seen.extend((r.seq, r.data) for r in reply.records)
        except BaseException as exc:  # reported by the test below
            errors.append(exc)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    wait_for(lambda: len(seen) == 2, 30, "the first records through the front end")
    owner = pc.partition_map()[0].lookup(route_key("acme", "events")).server
    fe_stamp.kill(owner)
    pc.append("acme", "events", [b"e2", b"e3"])  # the partition client waits for the move
    pc.seal("acme", "events")
    follower.join(60)
    assert not follower.is_alive() and not errors, errors
    assert seen == [(0, b"e0"), (1, b"e1"), (2, b"e2"), (3, b"e3")]
