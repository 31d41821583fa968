"""frontend/server.FrontEndServicer.Call on fakes (pure asyncio): every request is handed to
the front end's request path, answered on the stream with its own id, the stream ends only
once all are answered, and a client that sends faster than answers come is held back: past
CALL_INFLIGHT_MAX requests in flight the stream is not read until half are answered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from common.proto import partition_pb2 as pb
from frontend import server

Reply = Callable[[pb.Response], None]


class HeldFrontEnd:
    """Takes requests and answers only when told."""

    def __init__(self) -> None:
        self.held: list[tuple[pb.Request, Reply]] = []

    def start(self, request: pb.Request, reply: Reply) -> None:
        self.held.append((request, reply))

    def answer(self, count: int) -> None:
        for request, reply in self.held[:count]:
            reply(pb.Response(id=request.id, first_seq=request.id))
        del self.held[:count]


class Context:
    def __init__(self) -> None:
        self.written: list[pb.ResponseBatch] = []

    async def write(self, message: pb.ResponseBatch) -> None:
        self.written.append(message)


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
        await until(lambda: len(front_end.held) == 12)
        await asyncio.sleep(0.01)
        assert read == 3 and len(front_end.held) == 12  # 12 >= 10 in flight: not read on
        front_end.answer(6)  # 6 in flight: still more than half of 10
        await asyncio.sleep(0.01)
        assert read == 3
        front_end.answer(1)  # 5: reading resumes
        await until(lambda: read == 5 and len(front_end.held) == 13)
        assert not call.done()  # unanswered requests keep the stream open
        front_end.answer(13)
        await asyncio.wait_for(call, 5)
        ids = [r.id for batch in context.written for r in batch.responses]
        assert sorted(ids) == list(range(1, 21))
        assert all(r.first_seq == r.id for batch in context.written for r in batch.responses)
    asyncio.run(scenario())
