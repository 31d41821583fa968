"""partition_layer.session.CallSession's front-end hooks (pure asyncio, a fake stream):
`submit` returns the future of the response without a coroutine, an abandoned (cancelled)
future is forgotten and never sent, and every ServerPressure the server reports reaches
`on_pressure` (front-end throttling, frontend/throttle.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from common.proto import partition_pb2 as pb
from partition_layer.session import CallSession


class _PressureCall:
    """A stream that answers each batch with its responses and a pressure report."""

    def __init__(self) -> None:
        self.sent: list[pb.Request] = []
        self._responses: asyncio.Queue[pb.ResponseBatch] = asyncio.Queue()

    async def write(self, batch: pb.RequestBatch) -> None:
        self.sent.extend(batch.requests)
        self._responses.put_nowait(pb.ResponseBatch(
            responses=[pb.Response(id=r.id, first_seq=r.id * 10) for r in batch.requests],
            pressure=pb.ServerPressure(server="ps-1", queue_ops=len(self.sent), p99_ms=7.5)))

    def __aiter__(self) -> _PressureCall:
        return self

    async def __anext__(self) -> pb.ResponseBatch:
        return await self._responses.get()

    def cancel(self) -> None:
        pass


class _Stub:
    def __init__(self, call: _PressureCall) -> None:
        self._call = call

    def Call(self) -> Any:  # the gRPC method's name
        return self._call


def test_submit_answers_by_future_and_pressure_reaches_the_hook() -> None:
    async def scenario() -> None:
        call = _PressureCall()
        reports: list[pb.ServerPressure] = []
        session = CallSession("fake:1", lambda: _Stub(call),  # type: ignore[arg-type, return-value]
                              on_pressure=reports.append)
        futures = [session.submit(pb.Request(account="a", pname=f"p{i}"), 30) for i in range(5)]
        responses = await asyncio.wait_for(asyncio.gather(*futures), 5)
        assert [r.first_seq for r in responses] == [r.id * 10 for r in call.sent]
        assert reports and reports[-1].server == "ps-1" and reports[-1].p99_ms == 7.5
        assert not session._waiting and not session._deadlines  # nothing left behind
        await session.close()
    asyncio.run(scenario())


def test_an_abandoned_submit_is_forgotten_and_not_sent() -> None:
    async def scenario() -> None:
        call = _PressureCall()
        session = CallSession("fake:1", lambda: _Stub(call))  # type: ignore[arg-type, return-value]
        abandoned = session.submit(pb.Request(account="a", pname="gone"), 30)
        kept = session.submit(pb.Request(account="a", pname="kept"), 30)
        abandoned.cancel()
        await asyncio.wait_for(kept, 5)
        assert [r.pname for r in call.sent] == ["kept"]
        assert not session._waiting and not session._deadlines
        await session.close()
    asyncio.run(scenario())
