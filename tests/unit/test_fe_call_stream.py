"""frontend/server.FrontEndServicer.Call on fakes (pure asyncio): every request is handed to
the front end's request path, answered on the stream with its own id, the stream ends only
once all are answered, and a client that sends faster than answers come, or reads them
slower, is held back: past CALL_INFLIGHT_MAX requests in flight or answers unwritten, or
`call_held_bytes_max` bytes of answers held or reserved, the stream is not read until both
are down to half (issue 28: a client that never reads its answers held them all)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from common.config import FrontEndLimits, PartitionLimits
from common.proto import partition_pb2 as pb
from frontend import server

Reply = Callable[[pb.Response], None]


class HeldFrontEnd:
    """Takes requests and answers only when told."""

    def __init__(self, held_bytes_max: int = 128 << 20) -> None:
        self.held: list[tuple[pb.Request, Reply]] = []
        self.limits = PartitionLimits()
        self.fe_limits = FrontEndLimits(call_held_bytes_max=held_bytes_max)
        self.peers: set[str] = set()
        self.started = 0

    def start(self, request: pb.Request, reply: Reply, peer: str = "",
              sdk_clock: object = None, secondary_read: bool = False) -> None:
        self.held.append((request, reply))
        self.started += 1
        self.peers.add(peer)

    def answer(self, count: int, value_bytes: int = 0) -> None:
        for request, reply in self.held[:count]:
            reply(pb.Response(id=request.id, first_seq=request.id, value=b"v" * value_bytes))
        del self.held[:count]


class Context:
    """A stream's server side; `blocked` holds writes (a client that does not read)."""

    def __init__(self) -> None:
        self.written: list[pb.ResponseBatch] = []
        self.blocked = asyncio.Event()
        self.blocked.set()

    async def write(self, message: pb.ResponseBatch) -> None:
        await self.blocked.wait()
        self.written.append(message)

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5555"

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()


async def until(check: Callable[[], bool]) -> None:
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition not reached")


def test_a_fast_client_is_held_back_and_every_request_answered(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "CALL_INFLIGHT_MAX", 10)

    async def scenario() -> None:
        front_end = HeldFrontEnd()
        read = 0

        async def requests() -> AsyncIterator[pb.RequestBatch]:
            nonlocal read
            for b in range(5):
                read += 1
                yield pb.RequestBatch(requests=[pb.Request(id=b * 4 + i + 1) for i in range(4)])

        servicer = server.FrontEndServicer(front_end, "fe-1", "x")  # type: ignore[arg-type]
        context = Context()
        call = asyncio.ensure_future(servicer.Call(requests(), context))  # type: ignore[arg-type]
        await until(lambda: len(front_end.held) == 10)
        await asyncio.sleep(0.01)
        # 10 in flight: not read on, not even the rest of the batch being read
        assert read == 3 and len(front_end.held) == 10
        front_end.answer(4)  # 6 in flight: still more than half of 10
        await asyncio.sleep(0.01)
        assert read == 3 and len(front_end.held) == 6
        front_end.answer(1)  # 5: reading resumes, up to 10 again
        await until(lambda: read == 4 and len(front_end.held) == 10)
        front_end.answer(5)
        await until(lambda: read == 5 and len(front_end.held) == 10)
        assert not call.done()  # unanswered requests keep the stream open
        assert front_end.peers == {"ipv4:127.0.0.1:5555"}  # lookups count against the peer
        front_end.answer(10)
        await asyncio.wait_for(call, 5)
        ids = [r.id for batch in context.written for r in batch.responses]
        assert sorted(ids) == list(range(1, 21))
        assert all(r.first_seq == r.id for batch in context.written for r in batch.responses)
    asyncio.run(scenario())


def get(request_id: int) -> pb.Request:
    return pb.Request(id=request_id, account="acme", pname="things", get=pb.GetOp(row=b"r"))


def test_a_client_that_does_not_read_its_answers_is_not_read_past_the_bytes_held() -> None:
    """Gets reserve the largest value (4 MiB) while in flight and hold their answers' bytes
    until written: with writes blocked (the client reads nothing), the stream is not read
    past `call_held_bytes_max`, and reading resumes once the writes drain to half."""
    held_max = 20 << 20

    async def scenario() -> None:
        front_end = HeldFrontEnd(held_bytes_max=held_max)
        sent = 0

        async def requests() -> AsyncIterator[pb.RequestBatch]:
            nonlocal sent
            for b in range(100):
                sent += 10
                yield pb.RequestBatch(requests=[get(b * 10 + i + 1) for i in range(10)])

        servicer = server.FrontEndServicer(front_end, "fe-1", "x")  # type: ignore[arg-type]
        context = Context()
        context.blocked.clear()
        call = asyncio.ensure_future(servicer.Call(requests(), context))  # type: ignore[arg-type]
        reserved = server.answer_bytes_max(get(1), front_end.limits)
        assert reserved > 4_000_000
        started = -(-held_max // reserved)  # the request that reaches the bound is the last
        await until(lambda: len(front_end.held) == started)
        for _ in range(50):  # answers of 1 MiB, none written: each frees 3 MiB of reserve
            front_end.answer(len(front_end.held), value_bytes=1 << 20)
            await asyncio.sleep(0.001)
        # The stream was read until the unwritten answers held 10 MiB (half the bound) and
        # more requests reserved the rest: bounded, not the 1,000 the client sent.
        assert front_end.started <= held_max // (1 << 20) + started
        assert sent < 100
        assert not context.written and not call.done()
        context.blocked.set()  # the client reads: the stream runs to its end
        while not call.done():
            front_end.answer(len(front_end.held), value_bytes=1 << 20)
            await asyncio.sleep(0.001)
        ids = sorted(r.id for batch in context.written for r in batch.responses)
        assert ids == list(range(1, 1001))
        assert max(batch.ByteSize() for batch in context.written) <= (
            server.RESPONSE_MESSAGE_BYTES_MAX + (1 << 20) + 64)
    asyncio.run(asyncio.wait_for(scenario(), 30))
