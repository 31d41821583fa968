"""frontend/witness_calls.WitnessCalls on fake witnesses: the records of one event-loop turn
go out in one Record call per (witness, partition) — more only past the per-call bounds —,
each record's verdict comes back to its own waiter (None when the call failed, timed out or
answered short), never from within `record`, `in_flight` counts what is queued or
unanswered, and a witness whose call failed is not `usable` for a while; and the same on a
real channel to a real witness in this process."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import rpc
from common.clock import ManualClock
from common.config import ExtentNodeLimits
from common.errors import Unavailable
from common.proto import witness_pb2 as wpb
from common.proto import witness_pb2_grpc as wpb_grpc
from frontend.witness_calls import WitnessCalls
from stream_layer.extent_node.witness import WitnessStore
from stream_layer.extent_node.witness_server import WitnessServicer

ACCEPTED = wpb.Verdict.Value("ACCEPTED")
CONFLICT = wpb.Verdict.Value("CONFLICT")


class FakeWitness:
    """One witness: answers every record with `verdict`; "fail" raises, "silent" never
    answers, "short" answers one verdict fewer than asked."""

    def __init__(self, address: str, behaviour: Any = ACCEPTED) -> None:
        self.address = address
        self.behaviour = behaviour
        self.calls: list[wpb.RecordRequest] = []
        self.timeouts: list[float] = []

    def Record(self, request: wpb.RecordRequest, timeout: float) -> Any:
        self.calls.append(request)
        self.timeouts.append(timeout)
        return self._answer(request)

    async def _answer(self, request: wpb.RecordRequest) -> wpb.RecordReply:
        if self.behaviour == "fail":
            raise Unavailable(f"{self.address} is down")
        if self.behaviour == "silent":
            await asyncio.Event().wait()
        count = len(request.records) - (1 if self.behaviour == "short" else 0)
        return wpb.RecordReply(verdicts=[self.behaviour if isinstance(self.behaviour, int)
                                         else ACCEPTED] * count)


class Waiter:
    def __init__(self) -> None:
        self.verdicts: list[int | None] = []

    def witnessed(self, verdict: int | None) -> None:
        self.verdicts.append(verdict)


def calls_over(witnesses: dict[str, FakeWitness], records_max: int = 1024,
               bytes_max: int = 1 << 20, in_flight_max: int = 10_000,
               clock: ManualClock | None = None) -> WitnessCalls:
    return WitnessCalls(lambda address: witnesses[address], 0.5, records_max, bytes_max,
                        in_flight_max, suspect_s=1.0,
                        monotonic=(clock or ManualClock()).monotonic)


def record(token: str, payload: bytes = b"p") -> wpb.WitnessRecord:
    return wpb.WitnessRecord(token=token.encode(), epoch=3, exclusive=[token.encode()],
                             payload=payload)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_turns_records_go_out_in_one_call_per_witness_and_partition() -> None:
    async def scenario() -> None:
        witnesses = {a: FakeWitness(a) for a in ("en-1", "en-2")}
        calls = calls_over(witnesses)
        waiters = [Waiter() for _ in range(6)]
        for index, waiter in enumerate(waiters):
            partition = 1 if index < 4 else 2
            for address in witnesses:
                calls.record(address, partition, record(f"t{index}"), waiter)
        assert all(w.verdicts == [] for w in waiters)  # never answered from within record
        assert calls.in_flight == 12
        await settle()
        for witness in witnesses.values():
            assert sorted((c.partition_id, len(c.records)) for c in witness.calls) == [
                (1, 4), (2, 2)]
            first = next(c for c in witness.calls if c.partition_id == 1)
            assert [r.token for r in first.records] == [b"t0", b"t1", b"t2", b"t3"]
        assert calls.calls == 4 and calls.in_flight == 0
        assert all(w.verdicts == [ACCEPTED, ACCEPTED] for w in waiters)
        calls.record("en-1", 1, record("later"), Waiter())  # a new turn: a new call
        await settle()
        assert len(witnesses["en-1"].calls) == 3
    asyncio.run(scenario())


def test_each_verdict_goes_back_to_its_own_record() -> None:
    async def scenario() -> None:
        verdicts = iter([ACCEPTED, CONFLICT, ACCEPTED])

        class Mixed(FakeWitness):
            async def _answer(self, request: wpb.RecordRequest) -> wpb.RecordReply:
                return wpb.RecordReply(verdicts=[next(verdicts) for _ in request.records])
        calls = calls_over({"en-1": Mixed("en-1")})
        waiters = [Waiter() for _ in range(3)]
        for index, waiter in enumerate(waiters):
            calls.record("en-1", 1, record(f"t{index}"), waiter)
        await settle()
        assert [w.verdicts for w in waiters] == [[ACCEPTED], [CONFLICT], [ACCEPTED]]
    asyncio.run(scenario())


def test_a_failed_or_short_call_answers_none() -> None:
    async def scenario() -> None:
        witnesses = {"down": FakeWitness("down", "fail"), "short": FakeWitness("short", "short")}
        calls = calls_over(witnesses)
        down, short = [Waiter(), Waiter()], [Waiter(), Waiter()]
        for waiter in down:
            calls.record("down", 1, record("t"), waiter)
        for waiter in short:
            calls.record("short", 1, record("t"), waiter)
        await settle()
        assert [w.verdicts for w in down] == [[None], [None]]
        assert [w.verdicts for w in short] == [[ACCEPTED], [None]]
        assert calls.in_flight == 0
    asyncio.run(scenario())


def test_a_witness_whose_call_failed_is_suspect_for_a_while() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        witnesses = {"down": FakeWitness("down", "fail"), "up": FakeWitness("up")}
        calls = calls_over(witnesses, clock=clock)
        assert calls.usable(("down", "up"))
        calls.record("down", 1, record("t"), Waiter())
        calls.record("up", 1, record("t"), Waiter())
        await settle()
        assert not calls.usable(("up", "down")) and calls.usable(("up",))
        clock.advance(1.5)
        assert calls.usable(("up", "down"))  # one call may find out whether it is back
        witnesses["down"].behaviour = CONFLICT  # a refusal is no failure of the witness
        calls.record("down", 1, record("t"), Waiter())
        await settle()
        assert calls.usable(("down",))
    asyncio.run(scenario())


def test_a_call_is_cut_at_its_bounds() -> None:
    async def scenario() -> None:
        witness = FakeWitness("en-1")
        calls = calls_over({"en-1": witness}, records_max=3)
        for index in range(7):
            calls.record("en-1", 1, record(f"t{index}"), Waiter())
        await settle()
        assert [len(c.records) for c in witness.calls] == [3, 3, 1]
        by_bytes = FakeWitness("en-2")
        calls = calls_over({"en-2": by_bytes}, bytes_max=250)
        for index in range(3):
            calls.record("en-2", 1, record(f"t{index}", payload=b"x" * 100), Waiter())
        await settle()
        assert [len(c.records) for c in by_bytes.calls] == [2, 1]
    asyncio.run(scenario())


def test_room_counts_what_is_in_flight_and_close_answers_the_silent() -> None:
    async def scenario() -> None:
        calls = calls_over({"en-1": FakeWitness("en-1", "silent")}, in_flight_max=3)
        waiters = [Waiter(), Waiter()]
        for waiter in waiters:
            calls.record("en-1", 1, record("t"), waiter)
        await settle()
        assert calls.in_flight == 2
        assert calls.room(1) and not calls.room(2)
        await calls.close()
        assert [w.verdicts for w in waiters] == [[None], [None]]
        assert calls.in_flight == 0 and calls.room(3)
    asyncio.run(scenario())


def test_over_grpc_a_real_witness_answers_each_record(tmp_path: Path) -> None:
    """The calls on a real channel (common/rpc, as every internal channel of the front end)
    to a real witness in this process: one call for the turn, verdicts in order."""
    async def scenario() -> None:
        store = await WitnessStore.open(tmp_path, ExtentNodeLimits().witness,
                                        ManualClock(1_700_000_000.0))
        server = rpc.aio_server(1 << 22)
        wpb_grpc.add_WitnessServicer_to_server(WitnessServicer(store), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        calls = WitnessCalls.over_grpc(1 << 22, 5.0, 1024, 1 << 20, 100, 1.0)
        try:
            waiters = [Waiter(), Waiter(), Waiter()]
            for token, waiter in zip(("a", "a2", "b"), waiters, strict=True):
                # "a" and "a2" hold the same key exclusively: the second conflicts.
                calls.record(f"127.0.0.1:{port}", 5, wpb.WitnessRecord(
                    token=token.encode(), epoch=1, exclusive=[token[0].encode()],
                    payload=b"request"), waiter)
            await until(lambda: all(w.verdicts for w in waiters))
            assert [w.verdicts for w in waiters] == [[ACCEPTED], [CONFLICT], [ACCEPTED]]
            assert calls.calls == 1
        finally:
            await calls.close()
            await server.stop(None)
            await store.stop()
    asyncio.run(scenario())


async def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.01)
