"""Probe tests of the front end (issue 16, DESIGN §6) on a real stamp: requests built and
signed here with frontend/wire.py (what the SDK does) go to a front end process over a raw
gRPC stub; what they write is checked directly on the partition layer.

Every refused request is checked for its error *and* for having written nothing."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from stampsdk import connection_string

from common import process, rpc
from common.clock import SystemClock
from common.errors import (
    ChecksumError,
    DeadlineExceeded,
    InvalidArgument,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from common.process import LOG_FILE
from common.proto import frontend_pb2 as fe_pb
from common.proto import frontend_pb2_grpc as fe_grpc
from common.proto import frontend_v1_pb2 as v1
from common.proto import frontend_v1_pb2_grpc as v1_grpc
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from common.rpc import from_rpc_error
from frontend import sas, wire
from frontend.accounts import AccountStore
from lock_service.client import LockClient
from partition_layer.client import PartitionClient
from partition_layer.payload_crc import payload_crcs
from partition_layer.requests import route_key
from partition_layer.session import CallSession
from tests.front_end_raw import (
    MESSAGE_BYTES_MAX,
    RawFrontEnd,
    account_store,
    append_request,
    raw_front_end,
    refused,
    signed,
)
from tests.support.waiting import wait_until
from tools.chaos.extents import check_logs
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow


@pytest.fixture
def accounts(front_end_stamp: LocalStamp) -> Iterator[AccountStore]:
    yield from account_store(front_end_stamp)


@pytest.fixture
def fe(front_end_stamp: LocalStamp) -> Iterator[RawFrontEnd]:
    yield from raw_front_end(front_end_stamp)


@pytest.fixture
def pc(front_end_stamp: LocalStamp) -> Iterator[PartitionClient]:
    with PartitionClient.from_stamp(str(front_end_stamp.data_dir)) as client:
        yield client


def test_stamp_up_writes_the_admin_connection_string(front_end_stamp: LocalStamp,
                                                     accounts: AccountStore) -> None:
    path = front_end_stamp.admin_connection_string_file
    assert path.stat().st_mode & 0o777 == 0o600
    parsed = connection_string.parse(path.read_text().strip())
    assert parsed.account == "admin"
    assert list(parsed.endpoints) == [r.address for r in front_end_stamp.front_ends()]
    assert parsed.key == accounts.get("admin").keys[0]
    front_end_stamp.ensure_admin_account()  # again (a second `stamp up`): the same account kept
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
    _check_deadlines(fe, acme, pc)


def _check_deadlines(fe: RawFrontEnd, acme: wire.Credentials, pc: PartitionClient) -> None:
    """Deadlines that travel (common/deadline.py): the front end sets a request's deadline
    from the SDK's timeout, whatever the sender wrote there; a front end and a partition
    server drop, having written nothing, a request taken up after its deadline."""
    forged = append_request("acme", "deadlines", [b"d0"])
    forged.deadline_ms = 1  # long past: the front end's to set, so replaced
    forged.timeout_ms = 30_000
    answer = fe.call(signed(forged, acme))
    assert not answer.error, answer.message
    # On one stream: an attempt the SDK sent just now, and one it sent 6 s ago with a 1 s
    # wait (held in a frozen front end's socket, say), judged by the SDK's clock.
    sdk_fresh = append_request("acme", "deadlines-sdk", [b"s0"], token="sdk-1")
    sdk_fresh.timeout_ms = 30_000
    sdk_late = append_request("acme", "deadlines-sdk", [b"late"], token="sdk-2")
    sdk_late.timeout_ms = 1_000
    answers = fe.call_many([signed(sdk_fresh, acme), signed(sdk_late, acme, skew_s=-6.0)])
    taken_fe, dropped_fe = answers[1], answers[2]  # by id: answered in any order
    assert not taken_fe.error, taken_fe.message
    refused(dropped_fe, DeadlineExceeded, "front end: dropped")
    assert pc.read("acme", "deadlines-sdk", 0, 10) == [(0, b"s0")]
    pmap, addresses = pc.partition_map()
    owner = addresses[pmap.lookup(route_key("acme", "deadlines")).server]
    # On one stream, as a front end sends them: a request taken up just now, then one taken
    # up 6 s ago with a 1 s wait (held in a frozen server's socket, say).
    now_ms = int(time.time() * 1000)
    fresh = append_request("acme", "deadlines", [b"d1"], token="fresh-1")
    fresh.timeout_ms, fresh.deadline_ms = 30_000, now_ms + 30_000
    late = append_request("acme", "deadlines", [b"late"], token="late-1")
    late.timeout_ms, late.deadline_ms = 1_000, now_ms - 5_000

    async def send_to_owner() -> list[pb.Response]:
        session = CallSession(owner, lambda: pb_grpc.PartitionServerStub(
            rpc.aio_channel(owner, MESSAGE_BYTES_MAX)))
        try:
            return [await session.call(request, 30.0) for request in (fresh, late)]
        finally:
            await session.close()

    taken, dropped = asyncio.run(send_to_owner())
    assert not taken.error, taken.message
    refused(dropped, DeadlineExceeded, "deadline passed")
    assert pc.read("acme", "deadlines", 0, 10) == [(0, b"d0"), (1, b"d1")]


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

    wait_until(old_key_refused, 15, "the rotated key refused")
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


def test_subscribe_and_scan_through_a_front_end(fe: RawFrontEnd, accounts: AccountStore,
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
    assert isinstance(from_rpc_error(caught.value), Unauthenticated)
    # Scans are authenticated before anything is read (pages: frontend/scan.py's tests).
    now = time.time()
    read_only = sas.mint("acme", 1, accounts.get("acme").keys[0], ["read"], "",
                         int(now) + 3600, now)
    for credentials, error in ((None, Unauthenticated),
                               (wire.Credentials("acme", sas=read_only), PermissionDenied)):
        scan = fe_pb.ScanRequest(account="acme", start_pname="events")
        if credentials is not None:
            wire.sign_scan(scan, credentials, now)
        with pytest.raises(grpc.RpcError) as caught:
            list(fe.stub.Scan(scan, timeout=30))
        assert isinstance(from_rpc_error(caught.value), error)
    _check_public_protocol(fe, acme)


def _check_public_protocol(fe: RawFrontEnd, acme: wire.Credentials) -> None:
    """The same front end speaks the public protocol (protocol/frontend_v1.proto, issue 31):
    the requests signed above, sent as its messages (they mirror the internal ones byte for
    byte), are answered in its messages; a request that sets a field that is not public
    (`deadline_ms`, the front end's to set) is refused as unauthenticated, as it was signed
    with the field the front end drops."""
    stub = v1_grpc.FrontEndStub(fe._channel)

    def public(message: pb.Request) -> v1.Request:
        return v1.Request.FromString(message.SerializeToString())

    requests = [public(signed(append_request("acme", "public", [b"p0", b"p1"]), acme))]
    smuggled = append_request("acme", "public", [b"never"])
    smuggled.deadline_ms = int(time.time() * 1000) + 3_600_000
    requests.append(public(signed(smuggled, acme)))
    for i, request in enumerate(requests):
        request.id = i + 1
    answers = {r.id: r for batch in stub.Call(iter([v1.RequestBatch(requests=requests)]),
                                              timeout=30) for r in batch.responses}
    assert isinstance(answers[1], v1.Response)
    assert (answers[1].error, answers[1].first_seq) == ("", 0), answers[1].message
    assert answers[2].error == Unauthenticated.__name__, answers[2]
    subscribe = pb.SubscribeRequest(account="acme", pname="events", from_seq=0)
    wire.sign_subscribe(subscribe, acme, time.time())
    replies = list(stub.Subscribe(v1.SubscribeRequest.FromString(
        subscribe.SerializeToString()), timeout=30))
    assert [r.data for reply in replies for r in reply.records] == [b"e0", b"e1"]
    assert stub.Status(v1.FrontEndStatusRequest(), timeout=10).requests > 0


def test_killing_a_front_end_loses_nothing(front_end_stamp: LocalStamp, accounts: AccountStore,
                                          pc: PartitionClient) -> None:
    acme = wire.Credentials("acme", key=accounts.create("acme").keys[0])
    fe1, fe2 = (RawFrontEnd(front_end_stamp.address(n)) for n in ("fe-1", "fe-2"))
    try:
        assert not fe1.call(signed(append_request("acme", "orders", [b"a"]), acme)).error
        front_end_stamp.kill("fe-1")
        with pytest.raises(grpc.RpcError):
            fe1.call(signed(append_request("acme", "orders", [b"lost"]), acme))
        assert not fe2.call(signed(append_request("acme", "orders", [b"b"]), acme)).error
        front_end_stamp.start("fe-1")
        fe1b = RawFrontEnd(front_end_stamp.address("fe-1"))
        try:
            assert not fe1b.call(signed(append_request("acme", "orders", [b"c"]), acme)).error
        finally:
            fe1b.close()
        assert [d for _, d in pc.read("acme", "orders", 0, 10)] == [b"a", b"b", b"c"]
        pid = front_end_stamp.record("fe-2").pid
        front_end_stamp.kill("fe-2", signal.SIGTERM)  # a clean stop: it ends itself, says so
        wait_until(lambda: not process.is_alive(pid), 30, "fe-2 stopped on SIGTERM")
        log = (Path(front_end_stamp.record("fe-2").dir) / LOG_FILE).read_text()
        assert "fe-2 stopping" in log and "Traceback" not in log
    finally:
        fe1.close()
        fe2.close()


def test_a_subscription_through_a_front_end_survives_a_partition_server_kill(
        fe: RawFrontEnd, front_end_stamp: LocalStamp, accounts: AccountStore,
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
    wait_until(lambda: len(seen) == 2, 30, "the first records through the front end")
    owner = pc.partition_map()[0].lookup(route_key("acme", "events")).server
    front_end_stamp.kill(owner)
    pc.append("acme", "events", [b"e2", b"e3"])  # the partition client waits for the move
    pc.seal("acme", "events")
    follower.join(60)
    assert not follower.is_alive() and not errors, errors
    assert seen == [(0, b"e0"), (1, b"e1"), (2, b"e2"), (3, b"e3")]


def test_appends_through_a_front_end_survive_a_partition_server_kill(
        front_end_stamp: LocalStamp, pc: PartitionClient) -> None:
    """32 writers through a front end while the partition's server is SIGKILLed: the front
    end refreshes its map and retries (safely: every append carries a token), so every
    acknowledged append reads back once, at its sequence number."""
    with LockClient.from_stamp(front_end_stamp.data_dir, holder="test") as locks:
        key = AccountStore(locks, SystemClock()).create("acct").keys[0]
    acct = wire.Credentials("acct", key=key)
    acked: list[tuple[str, int, bytes]] = []
    address = front_end_stamp.address("fe-1")

    async def scenario() -> None:
        channels = rpc.ChannelCache(MESSAGE_BYTES_MAX)
        session = CallSession(address, lambda: fe_grpc.FrontEndStub(  # type: ignore[arg-type, return-value]
            channels.get(address)))
        stop = asyncio.Event()

        async def writer(index: int) -> None:
            n = 0
            while not stop.is_set():
                log, record = f"log-{index % 4}", f"w{index}-{n}".encode()
                give_up = time.monotonic() + 60
                while True:  # the SDK's retry: the same token every time
                    assert time.monotonic() < give_up, "an append failed for a minute"
                    request = signed(append_request("acct", log, [record], f"w{index}-{n}"),
                                     acct)
                    try:
                        response = await session.call(request, 30)
                    except (Unavailable, DeadlineExceeded):
                        await asyncio.sleep(0.05)
                        continue
                    if not response.error:
                        break
                    assert response.error in RETRYABLE, response
                    await asyncio.sleep(0.05)
                acked.append((log, response.first_seq, record))
                n += 1

        writers = asyncio.gather(*(writer(i) for i in range(32)))
        await until_async(lambda: len(acked) >= 200, 60, "appends before the kill")
        owner = pc.partition_map()[0].lookup(route_key("acct", "log-0")).server
        await asyncio.to_thread(front_end_stamp.kill, owner)
        killed_at = len(acked)
        await until_async(lambda: len(acked) >= killed_at + 200, 90, "appends after the kill")
        stop.set()
        await asyncio.wait_for(writers, 60)
        await session.close()
        await channels.close()

    asyncio.run(scenario())
    check_logs(pc, acked)


RETRYABLE = {"Unavailable", "NotOwner", "DeadlineExceeded", "Throttled"}


async def until_async(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g}s: {what}")
        await asyncio.sleep(0.05)
