"""Probe tests of a front end under abuse (issue 16, DESIGN §6): an account flooding it is
throttled while another is not, and fuzzed requests (hypothesis), signed or not, each get one
typed answer and never crash it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.clock import SystemClock
from common.errors import ERRORS_BY_NAME, InvalidArgument
from common.proto import partition_pb2 as pb
from frontend import wire
from frontend.accounts import AccountStore
from lock_service.client import LockClient
from partition_layer.client import PartitionClient
from partition_layer.payload_crc import payload_crcs
from tests.front_end_raw import (
    RawFrontEnd,
    account_store,
    append_request,
    raw_front_end,
    signed,
)
from tools.local_stamp import LocalStamp

# serial: its bounds are timings (or it freezes processes); `make test` runs it alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial]


@pytest.fixture
def accounts(front_end_stamp: LocalStamp) -> Iterator[AccountStore]:
    yield from account_store(front_end_stamp)


@pytest.fixture
def fe(front_end_stamp: LocalStamp) -> Iterator[RawFrontEnd]:
    yield from raw_front_end(front_end_stamp)

StampFactory = Callable[..., LocalStamp]


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
                with contextlib.suppress(InvalidArgument):  # a name no SDK can sign: unsigned
                    request = signed(request, acme)
            requests.append(request)
        for i, response in fe.call_many(requests).items():
            assert not response.error or response.error in known, response
            if not requests[i - 1].HasField("auth"):  # unsigned: never past the door
                assert response.error in ("Unauthenticated", "InvalidArgument"), response
        assert fe.status().name == "fe-1"

    property_()
