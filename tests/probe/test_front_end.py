"""Probe tests of the front end (issue 16, DESIGN §6) on a real stamp: requests built and
signed here with frontend/wire.py (what the SDK does) go to a front end process over a raw
gRPC stub; what they write is checked directly on the partition layer.

Every refused request is checked for its error *and* for having written nothing."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import grpc
import pytest

from common.clock import SystemClock
from common.errors import (
    ChecksumError,
    InvalidArgument,
    PermissionDenied,
    StampError,
    Unauthenticated,
)
from common.proto import frontend_pb2 as fe_pb
from common.proto import frontend_pb2_grpc as fe_grpc
from common.proto import partition_pb2 as pb
from common.rpc import from_rpc_error, sync_channel
from frontend import connection_string, sas, wire
from frontend.accounts import AccountStore
from lock_service.client import LockClient
from partition_layer.client import PartitionClient
from partition_layer.payload_crc import payload_crcs
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
    finally:
        fe1.close()
        fe2.close()
