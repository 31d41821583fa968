"""frontend/curp_path.py, CURP's fast path (curp.py step 3), driven through FrontEnd.start on a
fake owner session (answers scripted by each test) and fake witnesses (verdicts scripted, or
silence), with an injected clock: off, the front end forwards as before; on, a fast write
carries a strictly increasing version hint, goes to the witnesses the owner named (none
while unknown), and is acknowledged on a synced answer, or a speculative one with three
acceptances — else after a SyncOp; a "not executed" answer after records went out is in
doubt (Unavailable); nothing internal reaches the SDK."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from common.clock import ManualClock
from common.config import FrontEndLimits, PartitionLimits
from common.errors import DeadlineExceeded, NotOwner, Throttled, Unavailable
from common.proto import partition_pb2 as pb
from common.proto import witness_pb2 as wpb
from common.retry import AttemptTimer
from frontend import wire
from frontend.auth import Authenticator
from frontend.curp_path import (
    CurpSettings,
    HybridClock,
    WitnessSet,
    WitnessSets,
    clear_internal,
)
from frontend.server_call import FrontEnd
from frontend.throttle import AccountThrottle
from frontend.witness_calls import WitnessCalls
from partition_layer.curp import footprint_of
from partition_layer.payload_crc import payload_crcs
from partition_layer.requests import route_key
from partition_layer.rows import etag_of
from partition_layer.session import Waiter

KEY = b"k" * 32
WITNESSES = ("en-1:1", "en-4:1", "en-7:1")
ACCEPTED = wpb.Verdict.Value("ACCEPTED")
CONFLICT = wpb.Verdict.Value("CONFLICT")
PARTITIONS = {"users": 7, "orders": 8}  # partition name -> the id the map gives it


@dataclass(frozen=True)
class Entry:
    id: int


class FakeMap:
    def __init__(self) -> None:
        self.ids = {route_key("acme", name): pid for name, pid in PARTITIONS.items()}

    def lookup(self, key: bytes) -> Entry:
        return Entry(self.ids[key])


class OwnerSession:
    """The owner's session: keeps what was sent (a copy as it was sent) for the test to
    answer through its waiter."""

    def __init__(self) -> None:
        self.sent: list[tuple[pb.Request, Waiter]] = []
        self._ids = 100

    def send(self, request: pb.Request, timeout_s: float, nbytes: int, waiter: Waiter) -> int:
        self._ids += 1
        request.id = self._ids
        copy = pb.Request()
        copy.CopyFrom(request)
        self.sent.append((copy, waiter))
        return request.id

    def syncs(self) -> list[tuple[pb.Request, Waiter]]:
        return [(r, w) for r, w in self.sent if r.HasField("sync")]


class Client:
    def __init__(self) -> None:
        self.map = FakeMap()
        self.owner = OwnerSession()
        self.attempts = AttemptTimer()
        self.retried: list[pb.Request] = []
        self.retry_answer = pb.Response(etag=etag_of(5))

    def route(self, key: bytes) -> tuple[str, str]:
        return "ps-1", "127.0.0.1:1"

    def route_name(self, account: str, pname: str) -> tuple[str, str]:
        return "ps-1", "127.0.0.1:1"

    def session(self, address: str) -> OwnerSession:
        return self.owner

    async def refresh_map(self) -> None:
        pass

    async def call(self, request: pb.Request, idempotent: bool, nbytes: int) -> pb.Response:
        copy = pb.Request()
        copy.CopyFrom(request)
        self.retried.append(copy)
        answer = pb.Response()
        answer.CopyFrom(self.retry_answer)
        return answer

    async def close(self) -> None:
        pass


class Witness:
    """A witness's stub: each Record call's future, for the test to answer (or not)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.calls: list[tuple[wpb.RecordRequest, asyncio.Future[wpb.RecordReply]]] = []

    def Record(self, request: wpb.RecordRequest, timeout: float) -> Any:
        future: asyncio.Future[wpb.RecordReply] = asyncio.get_running_loop().create_future()
        self.calls.append((request, future))
        return future

    def answer(self, verdict: int) -> None:
        for request, future in self.calls:
            if not future.done():
                future.set_result(wpb.RecordReply(verdicts=[verdict] * len(request.records)))


class Stamp:
    """A front end over the fakes, and what it answered."""

    def __init__(self, enabled: bool = True, witness_timeout_ms: int = 10_000,
                 recent_key_ms: int = 0) -> None:
        self.clock = ManualClock(start=1_700_000_000.0)
        self.client = Client()
        self.witnesses = {address: Witness(address) for address in WITNESSES}
        limits = FrontEndLimits()
        auth = Authenticator(lambda account: (KEY, KEY), self.clock, ttl_s=10.0)
        self.fe = FrontEnd(auth, self.client,  # type: ignore[arg-type]
                           AccountThrottle(limits, self.clock, random.Random(1)),
                           PartitionLimits(), limits, self.clock,
                           CurpSettings(enabled=enabled, witness_timeout_ms=witness_timeout_ms,
                                        recent_key_ms=recent_key_ms))
        self.fe.curp.witness_calls = WitnessCalls(
            lambda address: self.witnesses[address], 1.0, 1024, 1 << 22, 10_000,
            suspect_s=1.0, monotonic=self.clock.monotonic)
        self.answers: dict[int, pb.Response] = {}

    async def warm(self) -> None:
        """The account's keys cached: requests take the hot path."""
        probe = self.request(put_op(), token="probe")
        await self.fe.auth.check(wire.call_claim(probe))

    def request(self, op: dict[str, Any], token: str = "t1", pname: str = "users",
                sdk_id: int = 5) -> pb.Request:
        request = pb.Request(id=sdk_id, account="acme", pname=pname, token=token,
                             timeout_ms=5000, **op)
        wire.sign_call(request, wire.Credentials("acme", key=KEY), self.clock.wall())
        return request

    def start(self, request: pb.Request) -> None:
        sdk_id = request.id
        self.fe.start(request, lambda response: self.answers.__setitem__(sdk_id, response))

    def owner_answers(self, index: int, **fields: Any) -> None:
        request, waiter = self.client.owner.sent[index]
        waiter.set_result(pb.Response(id=request.id, **fields))

    def learn(self, epoch: int = 4) -> None:
        """The witnesses of partition 7 known, as an earlier answer told them."""
        self.fe.curp.witness_sets.learn(7, pb.Response(epoch=epoch, witnesses=WITNESSES))

    def all_witnesses(self, verdict: int) -> None:
        for witness in self.witnesses.values():
            witness.answer(verdict)


def put_op(row: bytes = b"r", **conditions: Any) -> dict[str, Any]:
    return {"put": pb.PutOp(row=row, value=b"v", value_crc=payload_crcs([b"v"])[0],
                            **conditions)}


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait for `condition` (a real timer's effect), failing after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.005)


INTERNAL = ("speculative", "epoch", "lsn", "witnesses")


def internal_fields(response: pb.Response) -> list[str]:
    return [name for name in INTERNAL if getattr(response, name)]


def test_off_the_front_end_forwards_as_before_and_still_clears_internal_fields() -> None:
    async def scenario() -> None:
        stamp = Stamp(enabled=False)
        await stamp.warm()
        stamp.learn()
        stamp.start(stamp.request(put_op()))
        await settle()
        [(sent, _)] = stamp.client.owner.sent
        assert (sent.version_hint, sent.curp_epoch, sent.HasField("auth")) == (0, 0, False)
        assert all(w.calls == [] for w in stamp.witnesses.values())
        assert stamp.fe.curp.calls.calls == 0
        stamp.owner_answers(0, etag=etag_of(9), speculative=True, epoch=4, lsn=3,
                            witnesses=WITNESSES)  # a misbehaving owner: nothing leaks
        answer = stamp.answers[5]
        assert (answer.id, answer.etag, internal_fields(answer)) == (5, etag_of(9), [])
        assert stamp.fe.curp.counters.records_sent == 0
    asyncio.run(scenario())


def test_off_no_witness_channel_is_opened() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        limits = FrontEndLimits()
        fe = FrontEnd(Authenticator(lambda account: (KEY, KEY), clock, ttl_s=1.0),
                      Client(),  # type: ignore[arg-type]
                      AccountThrottle(limits, clock, random.Random(1)), PartitionLimits(),
                      limits)
        assert not fe.curp.enabled and fe.curp.witness_calls is None
        await fe.close()
        assert fe.curp.witness_calls is None
    asyncio.run(scenario())


def test_unknown_witnesses_no_records_epoch_0_and_learned_from_the_answer() -> None:
    async def scenario() -> None:
        stamp = Stamp()
        await stamp.warm()
        stamp.start(stamp.request(put_op()))
        await settle()
        [(sent, _)] = stamp.client.owner.sent
        assert sent.version_hint > 0 and sent.curp_epoch == 0
        assert all(w.calls == [] for w in stamp.witnesses.values())
        stamp.owner_answers(0, etag=etag_of(sent.version_hint), epoch=4, witnesses=WITNESSES)
        answer = stamp.answers[5]
        assert (answer.id, answer.etag, internal_fields(answer)) == (
            5, etag_of(sent.version_hint), [])
        assert stamp.fe.curp.witness_sets.get(7) == WitnessSet(4, WITNESSES)
        counters = stamp.fe.curp.counters
        assert (counters.synced, counters.witness_sets_learned, counters.fast) == (1, 1, 0)
        # The next write of the partition goes to them, under that epoch.
        stamp.start(stamp.request(put_op(), token="t2", sdk_id=6))
        await settle()
        assert stamp.client.owner.sent[1][0].curp_epoch == 4
        assert all(len(w.calls) == 1 for w in stamp.witnesses.values())
    asyncio.run(scenario())


def test_a_speculative_answer_and_three_acceptances_acknowledge_it() -> None:
    async def scenario() -> None:
        for owner_first in (True, False):
            stamp = Stamp()
            await stamp.warm()
            stamp.learn()
            stamp.start(stamp.request(put_op()))
            await settle()
            if owner_first:
                stamp.owner_answers(0, etag=etag_of(11), speculative=True, epoch=4, lsn=3)
                assert 5 not in stamp.answers  # not before the witnesses
            stamp.all_witnesses(ACCEPTED)
            await settle()
            if not owner_first:
                assert 5 not in stamp.answers  # not before the owner
                stamp.owner_answers(0, etag=etag_of(11), speculative=True, epoch=4, lsn=3)
            answer = stamp.answers[5]
            assert (answer.id, answer.etag, internal_fields(answer)) == (5, etag_of(11), [])
            assert stamp.client.owner.syncs() == []
            counters = stamp.fe.curp.counters
            assert (counters.fast, counters.records_sent, counters.fast_share()) == (1, 3, 1.0)
    asyncio.run(scenario())


def test_one_conflict_asks_the_owner_to_sync_and_answers_after() -> None:
    async def scenario() -> None:
        stamp = Stamp()
        await stamp.warm()
        stamp.learn()
        stamp.start(stamp.request(put_op()))
        await settle()
        stamp.owner_answers(0, etag=etag_of(11), speculative=True, epoch=4, lsn=3)
        stamp.witnesses["en-1:1"].answer(ACCEPTED)
        stamp.witnesses["en-4:1"].answer(CONFLICT)
        await settle()
        [(sync, waiter)] = stamp.client.owner.syncs()
        assert (sync.sync.epoch, sync.sync.lsn, sync.account, sync.pname) == (
            4, 3, "acme", "users")
        # The write's deadline and timeout both: the owner's SenderClock dates every
        # request by (deadline - timeout), and a deadline alone taught it a wrong offset.
        (write, _), = [(r, w) for r, w in stamp.client.owner.sent if not r.HasField("sync")]
        assert (sync.deadline_ms, sync.timeout_ms) == (write.deadline_ms, write.timeout_ms)
        assert sync.timeout_ms > 0
        assert 5 not in stamp.answers  # not before the sync
        waiter.set_result(pb.Response(id=sync.id))
        answer = stamp.answers[5]
        assert (answer.id, answer.error, answer.etag, internal_fields(answer)) == (
            5, "", etag_of(11), [])
        stamp.all_witnesses(ACCEPTED)  # a late verdict changes nothing
        await settle()
        counters = stamp.fe.curp.counters
        assert (counters.fast, counters.fallback_refused, counters.fallback_acked) == (0, 1, 1)
    asyncio.run(scenario())


def test_a_silent_witness_times_out_into_a_sync() -> None:
    async def scenario() -> None:
        stamp = Stamp(witness_timeout_ms=20)
        await stamp.warm()
        stamp.learn()
        stamp.start(stamp.request(put_op()))
        await settle()
        stamp.owner_answers(0, etag=etag_of(11), speculative=True, epoch=4, lsn=3)
        stamp.witnesses["en-1:1"].answer(ACCEPTED)
        stamp.witnesses["en-4:1"].answer(ACCEPTED)  # en-7 stays silent
        await settle()
        assert stamp.client.owner.syncs() == []
        await until(lambda: bool(stamp.client.owner.syncs()))  # the timer's, 20 ms on
        [(sync, waiter)] = stamp.client.owner.syncs()
        assert (sync.sync.epoch, sync.sync.lsn) == (4, 3)
        waiter.set_result(pb.Response(id=sync.id))
        assert stamp.answers[5].etag == etag_of(11)
        assert stamp.fe.curp.counters.fallback_timeout == 1
        await stamp.fe.close()  # the silent call is cancelled
    asyncio.run(scenario())


def test_a_failed_sync_answers_unavailable() -> None:
    async def scenario() -> None:
        stamp = Stamp()
        await stamp.warm()
        stamp.learn()
        stamp.start(stamp.request(put_op()))
        await settle()
        stamp.owner_answers(0, etag=etag_of(11), speculative=True, epoch=4, lsn=3)
        stamp.all_witnesses(CONFLICT)
        await settle()
        [(sync, waiter)] = stamp.client.owner.syncs()
        waiter.set_result(pb.Response(id=sync.id, error="Unavailable", message="owner gone"))
        answer = stamp.answers[5]
        assert (answer.id, answer.error, answer.etag) == (5, "Unavailable", "")
        assert "may or may not" in answer.message
        assert stamp.fe.curp.counters.fallback_failed == 1
    asyncio.run(scenario())


def test_a_synced_answer_is_acknowledged_without_waiting_for_witnesses() -> None:
    async def scenario() -> None:
        stamp = Stamp()
        await stamp.warm()
        stamp.learn()
        stamp.start(stamp.request(put_op()))
        await settle()
        stamp.owner_answers(0, etag=etag_of(11))  # durable: no speculative flag
        answer = stamp.answers[5]
        assert (answer.id, answer.etag) == (5, etag_of(11))
        assert stamp.fe.curp.counters.synced == 1
        stamp.all_witnesses(ACCEPTED)
        await settle()
        assert stamp.client.owner.syncs() == [] and stamp.fe.curp.counters.fast == 0
    asyncio.run(scenario())


def test_a_speculative_answer_without_records_at_its_epoch_is_synced() -> None:
    """An owner that answers early a write not recorded at its witnesses (it named no
    epoch): only a sync makes it safe to acknowledge."""
    async def scenario() -> None:
        stamp = Stamp()
        await stamp.warm()
        stamp.start(stamp.request(put_op()))
        await settle()
        stamp.owner_answers(0, etag=etag_of(11), speculative=True, epoch=4, lsn=3)
        [(sync, waiter)] = stamp.client.owner.syncs()
        waiter.set_result(pb.Response(id=sync.id))
        assert stamp.answers[5].etag == etag_of(11)
        assert stamp.fe.curp.counters.fallback_unrecorded == 1
    asyncio.run(scenario())


@pytest.mark.parametrize("error", [Throttled.__name__, DeadlineExceeded.__name__])
def test_not_executed_after_records_went_out_is_in_doubt(error: str) -> None:
    async def scenario() -> None:
        stamp = Stamp()
        await stamp.warm()
        stamp.learn()
        stamp.start(stamp.request(put_op()))
        await settle()
        stamp.owner_answers(0, error=error, message="not now", retry_after_s=1.0)
        answer = stamp.answers[5]
        assert (answer.id, answer.error, answer.retry_after_s) == (5, "Unavailable", 0.0)
        assert "may still happen" in answer.message
        assert stamp.fe.curp.counters.in_doubt == 1
    asyncio.run(scenario())


def test_throttled_without_records_is_a_refusal_as_ever() -> None:
    async def scenario() -> None:
        stamp = Stamp()  # witnesses unknown: no records went out
        await stamp.warm()
        stamp.start(stamp.request(put_op()))
        await settle()
        stamp.owner_answers(0, error=Throttled.__name__, message="busy", retry_after_s=1.0)
        assert (stamp.answers[5].error, stamp.answers[5].retry_after_s) == ("Throttled", 1.0)
    asyncio.run(scenario())


def test_not_owner_is_retried_on_the_sync_path_and_its_refusal_stays_in_doubt() -> None:
    async def scenario() -> None:
        stamp = Stamp()
        await stamp.warm()
        stamp.learn()
        stamp.start(stamp.request(put_op()))
        await settle()
        stamp.owner_answers(0, error=NotOwner.__name__)
        await settle()
        [retried] = stamp.client.retried
        assert (retried.token, retried.version_hint, retried.curp_epoch) == ("t1", 0, 0)
        assert (stamp.answers[5].id, stamp.answers[5].etag) == (5, etag_of(5))
        stamp.client.retry_answer = pb.Response(error="DeadlineExceeded", message="late")
        stamp.start(stamp.request(put_op(), token="t2", sdk_id=6))
        await settle()
        stamp.owner_answers(1, error=NotOwner.__name__)
        await settle()
        assert stamp.answers[6].error == "Unavailable"
    asyncio.run(scenario())


def test_a_broken_stream_is_retried_on_the_sync_path_in_doubt_once_recorded() -> None:
    async def scenario() -> None:
        stamp = Stamp()
        await stamp.warm()
        stamp.learn()
        stamp.client.retry_answer = pb.Response(error="DeadlineExceeded", message="late")
        stamp.start(stamp.request(put_op()))
        await settle()
        stamp.client.owner.sent[0][1].set_exception(Unavailable("stream to ps-1 broke"))
        await settle()
        [retried] = stamp.client.retried
        assert (retried.version_hint, retried.curp_epoch) == (0, 0)
        assert stamp.answers[5].error == "Unavailable"  # not DeadlineExceeded: recorded
        stamp.start(stamp.request(put_op(), pname="orders", token="t2", sdk_id=6))
        await settle()  # partition 8: witnesses unknown, nothing recorded
        stamp.client.owner.sent[1][1].set_exception(Unavailable("stream to ps-1 broke"))
        await settle()
        assert stamp.answers[6].error == "DeadlineExceeded"  # as the plain path answers
    asyncio.run(scenario())


def test_what_an_answer_says_of_the_witnesses() -> None:
    sets = WitnessSets(16)
    assert sets.learn(7, pb.Response(epoch=4, witnesses=WITNESSES))
    assert not sets.learn(7, pb.Response(epoch=4, witnesses=WITNESSES))  # nothing new
    assert not sets.learn(7, pb.Response(epoch=4, speculative=True, lsn=3))
    assert not sets.learn(7, pb.Response(epoch=4))  # the epoch known, no witnesses named
    assert sets.get(7) == WitnessSet(4, WITNESSES)
    moved = ("en-2:1", "en-5:1", "en-8:1")
    assert sets.learn(7, pb.Response(epoch=5, witnesses=moved))  # a new owner's
    assert sets.get(7) == WitnessSet(5, moved)
    assert not sets.learn(7, pb.Response(epoch=6, witnesses=moved[:2]))  # too few: forgotten
    assert sets.get(7) is None
    sets.learn(7, pb.Response(epoch=6, witnesses=moved))
    assert not sets.learn(7, pb.Response(epoch=7))  # an owner of another epoch has none
    assert sets.get(7) is None and len(sets) == 0


def test_the_version_hint_increases_strictly_and_passes_every_etag_seen() -> None:
    async def scenario() -> None:
        stamp = Stamp()  # its clock stands still
        await stamp.warm()
        for index in range(3):
            stamp.start(stamp.request(put_op(), token=f"t{index}", sdk_id=index))
        await settle()
        hints = [sent.version_hint for sent, _ in stamp.client.owner.sent]
        assert hints[0] >= int(stamp.clock.wall() * 1_000_000)
        assert hints == sorted(set(hints))
        ahead = hints[-1] + 10**9  # a version of another front end's clock, ahead of ours
        stamp.owner_answers(0, etag=etag_of(ahead))
        stamp.start(stamp.request(put_op(), token="t9", sdk_id=9))
        assert stamp.client.owner.sent[-1][0].version_hint > ahead
    asyncio.run(scenario())


def test_hybrid_clock() -> None:
    now = [10.0]
    clock = HybridClock(lambda: now[0])
    assert clock.next() == 10_000_000 and clock.next() == 10_000_001
    clock.observe_etag(etag_of(20_000_000))
    clock.observe_etag("*")  # not a version: ignored
    clock.observe_etag('"zz"')
    assert clock.next() == 20_000_001
    now[0] = 30.0
    assert clock.next() == 30_000_000


def test_one_turns_records_go_in_one_call_per_witness_and_partition() -> None:
    async def scenario() -> None:
        stamp = Stamp()
        await stamp.warm()
        stamp.learn()
        stamp.fe.curp.witness_sets.learn(8, pb.Response(epoch=2, witnesses=WITNESSES))
        for index in range(10):
            stamp.start(stamp.request(put_op(), pname="users" if index < 6 else "orders",
                                      token=f"t{index}", sdk_id=index))
        await settle()
        for witness in stamp.witnesses.values():
            assert sorted((r.partition_id, len(r.records)) for r, _ in witness.calls) == [
                (7, 6), (8, 4)]
        assert stamp.fe.curp.counters.records_sent == 30
        assert stamp.fe.curp.calls.calls == 6
    asyncio.run(scenario())


def test_a_record_is_the_request_as_forwarded() -> None:
    async def scenario() -> None:
        stamp = Stamp()
        await stamp.warm()
        stamp.learn()
        stamp.start(stamp.request(put_op()))
        await settle()
        [(sent, _)] = stamp.client.owner.sent
        [(call, _)] = stamp.witnesses["en-1:1"].calls
        [record] = call.records
        payload = pb.Request.FromString(record.payload)
        assert payload == sent
        assert payload.version_hint > 0 and payload.curp_epoch == 4
        assert not payload.HasField("auth") and payload.deadline_ms > 0
        assert (record.token, record.epoch, record.deadline_ms) == (b"t1", 4, sent.deadline_ms)
        footprint = footprint_of(sent)
        assert footprint is not None
        assert (set(record.exclusive), set(record.shared)) == (footprint.exclusive,
                                                               footprint.shared)
    asyncio.run(scenario())


def test_what_takes_the_fast_path() -> None:
    """An unconditional put does; a conditional one (its refusal may flip) and a seal (no
    token for the owner's sweep to judge its records by) keep the plain path."""
    async def scenario() -> None:
        stamp = Stamp()
        await stamp.warm()
        stamp.learn()
        stamp.start(stamp.request({"seal": pb.Empty()}, token="", pname="log", sdk_id=1))
        stamp.start(stamp.request(put_op(if_match=etag_of(3)), sdk_id=2))  # may flip
        stamp.start(stamp.request(put_op(b"r2"), token="t3", sdk_id=3))
        await settle()
        seal, conditional, put = (sent for sent, _ in stamp.client.owner.sent)
        assert seal.version_hint == 0 and conditional.version_hint == 0
        assert put.version_hint > 0
        [(call, _)] = stamp.witnesses["en-1:1"].calls
        assert [record.token for record in call.records] == [b"t3"]
    asyncio.run(scenario())


def test_no_records_for_a_write_without_deadline_or_past_the_records_in_flight() -> None:
    async def scenario() -> None:
        stamp = Stamp()
        await stamp.warm()
        stamp.learn()
        undated = stamp.request(put_op(), token="t1", sdk_id=1)
        undated.timeout_ms = 0
        wire.sign_call(undated, wire.Credentials("acme", key=KEY), stamp.clock.wall())
        stamp.start(undated)
        stamp.fe.curp.calls.records_in_flight_max = 2  # fewer than three witnesses' worth
        stamp.start(stamp.request(put_op(), token="t2", sdk_id=2))
        await settle()
        assert [(s.version_hint > 0, s.curp_epoch) for s, _ in stamp.client.owner.sent] == [
            (True, 0), (True, 0)]
        assert all(w.calls == [] for w in stamp.witnesses.values())
        assert stamp.fe.curp.counters.records_skipped == 2
    asyncio.run(scenario())


def test_a_failed_witness_call_keeps_its_sets_writes_off_the_witnesses_for_a_while() -> None:
    async def scenario() -> None:
        stamp = Stamp()
        await stamp.warm()
        stamp.learn()
        stamp.start(stamp.request(put_op(), token="t1", sdk_id=1))
        await settle()
        [(_, future)] = stamp.witnesses["en-4:1"].calls
        future.set_exception(Unavailable("en-4 is down"))
        await settle()
        stamp.owner_answers(0, etag=etag_of(11), speculative=True, epoch=4, lsn=3)
        [(sync, waiter)] = stamp.client.owner.syncs()  # the failed call: a sync
        waiter.set_result(pb.Response(id=sync.id))
        assert stamp.fe.curp.counters.fallback_refused == 1
        stamp.start(stamp.request(put_op(), token="t2", sdk_id=2))
        await settle()
        assert stamp.client.owner.sent[-1][0].curp_epoch == 0  # no records while suspect
        assert [len(w.calls) for w in stamp.witnesses.values()] == [1, 1, 1]
        stamp.clock.advance(2.0)  # the suspicion (1 s here) is over
        stamp.start(stamp.request(put_op(), token="t3", sdk_id=3))
        await settle()
        assert stamp.client.owner.sent[-1][0].curp_epoch == 4
        assert [len(w.calls) for w in stamp.witnesses.values()] == [2, 2, 2]
    asyncio.run(scenario())


def test_clear_internal() -> None:
    response = pb.Response(etag="e", speculative=True, epoch=3, lsn=9, witnesses=["a"])
    clear_internal(response)
    assert response == pb.Response(etag="e")


def test_a_key_recorded_moments_ago_takes_the_plain_path() -> None:
    """Its record is likely still held (the owner drops it once durable): a new record of
    the key would be refused and cost a sync. Another key, or the same one later, is fast;
    a key written again and again within the window stays on the plain path, not every
    other write of it."""
    async def scenario() -> None:
        stamp = Stamp(recent_key_ms=10)
        await stamp.warm()
        stamp.learn()
        stamp.start(stamp.request(put_op(b"a"), token="t1", sdk_id=1))
        stamp.start(stamp.request(put_op(b"b"), token="t2", sdk_id=2))
        stamp.clock.advance(0.006)
        stamp.start(stamp.request(put_op(b"a"), token="t3", sdk_id=3))
        await settle()
        assert stamp.fe.curp.counters.records_sent == 6  # t1 and t2, three records each
        sent = {r.token: r for r, _ in stamp.client.owner.sent}
        assert not sent["t3"].version_hint and not sent["t3"].curp_epoch
        stamp.clock.advance(0.006)  # 6 ms after t3 (plain), 12 after t1 (the last fast)
        stamp.start(stamp.request(put_op(b"a"), token="t4", sdk_id=4))
        await settle()
        assert stamp.fe.curp.counters.records_sent == 6
        stamp.clock.advance(0.011)
        stamp.start(stamp.request(put_op(b"a"), token="t5", sdk_id=5))
        await settle()
        assert stamp.fe.curp.counters.records_sent == 9
    asyncio.run(scenario())


def test_a_key_a_witness_refused_as_conflicting_keeps_the_plain_path_a_while() -> None:
    """Its record is still held where the owner's drop has not come yet: under load longer
    than the writer takes to come back, so each of its next writes would conflict and sync
    too. Past `conflict_hold_ms` the key tries the fast path again."""
    async def scenario() -> None:
        stamp = Stamp(recent_key_ms=10)
        await stamp.warm()
        stamp.learn()
        stamp.start(stamp.request(put_op(b"a"), token="t1", sdk_id=1))
        await settle()
        stamp.witnesses["en-1:1"].answer(CONFLICT)
        await settle()
        assert stamp.fe.curp.counters.records_sent == 3
        stamp.clock.advance(0.1)  # past recent_key_ms, within the hold
        stamp.start(stamp.request(put_op(b"a"), token="t2", sdk_id=2))
        stamp.start(stamp.request(put_op(b"b"), token="t3", sdk_id=3))  # another key: fast
        await settle()
        assert stamp.fe.curp.counters.records_sent == 6
        sent = {r.token: r for r, _ in stamp.client.owner.sent}
        assert not sent["t2"].version_hint and sent["t3"].version_hint
        stamp.clock.advance(CurpSettings().conflict_hold_ms / 1000)
        stamp.start(stamp.request(put_op(b"a"), token="t4", sdk_id=4))
        await settle()
        assert stamp.fe.curp.counters.records_sent == 9
    asyncio.run(scenario())


def test_a_write_over_fast_bytes_max_takes_the_plain_path() -> None:
    """Three witnesses would journal it once more each: past a size the round trip saved
    costs less than shipping it three more times."""
    async def scenario() -> None:
        stamp = Stamp()
        await stamp.warm()
        stamp.learn()
        big = b"v" * (CurpSettings().fast_bytes_max + 1)
        stamp.start(stamp.request({"put": pb.PutOp(row=b"big", value=big,
                                                   value_crc=payload_crcs([big])[0])},
                                  token="t1", sdk_id=1))
        stamp.start(stamp.request(put_op(b"small"), token="t2", sdk_id=2))
        await settle()
        sent = {r.token: r for r, _ in stamp.client.owner.sent}
        assert not sent["t1"].version_hint and sent["t2"].version_hint
        assert stamp.fe.curp.counters.records_sent == 3
    asyncio.run(scenario())
