"""partition_layer.session.CallSession's front-end hooks (pure asyncio, a fake stream):
`submit` returns the future of the response without a coroutine, an abandoned (cancelled)
future is forgotten and never sent, every ServerPressure the server reports reaches
`on_pressure` (front-end throttling, frontend/throttle.py), and `send` answers a caller's own
Waiter exactly once (its response, its deadline, or a closed session) and keeps nothing of it
afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from common.errors import DeadlineExceeded, Unavailable
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


class _Recorder:
    """A caller's own Waiter (the front end's `_Forward`): records each call made to it."""

    def __init__(self) -> None:
        self.calls: list[pb.Response | BaseException] = []
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, response: pb.Response) -> None:
        self._done = True
        self.calls.append(response)

    def set_exception(self, error: BaseException) -> None:
        self._done = True
        self.calls.append(error)


class _SilentCall(_PressureCall):
    """Takes batches and never answers them."""

    async def write(self, batch: pb.RequestBatch) -> None:
        self.sent.extend(batch.requests)


def test_send_answers_a_callers_waiter_once_and_leaves_nothing_behind() -> None:
    async def scenario() -> None:
        call = _PressureCall()
        session = CallSession("fake:1", lambda: _Stub(call))  # type: ignore[arg-type, return-value]
        waiters = [_Recorder() for _ in range(4)]
        ids = [session.send(pb.Request(account="a", pname=f"p{i}"), 30, 64, w)
               for i, w in enumerate(waiters)]
        await until(lambda: all(w.done() for w in waiters))
        assert [len(w.calls) for w in waiters] == [1, 1, 1, 1]
        assert [w.calls[0].first_seq for w in waiters] == [i * 10 for i in ids]  # type: ignore[union-attr]
        assert not session._waiting and not session._deadlines
        await session.close()
        late = _Recorder()
        session.send(pb.Request(account="a", pname="late"), 30, 64, late)
        assert len(late.calls) == 1 and isinstance(late.calls[0], Unavailable)
    asyncio.run(scenario())


def test_a_sent_request_past_its_deadline_fails_its_waiter_once_and_is_forgotten() -> None:
    async def scenario() -> None:
        call = _SilentCall()
        session = CallSession("fake:1", lambda: _Stub(call))  # type: ignore[arg-type, return-value]
        waiter = _Recorder()
        session.send(pb.Request(account="a", pname="slow"), 0.1, 64, waiter)
        await until(waiter.done)
        assert len(waiter.calls) == 1 and isinstance(waiter.calls[0], DeadlineExceeded)
        assert not session._waiting and not session._deadlines
        await session.close()
        assert len(waiter.calls) == 1  # closing does not answer it again
    asyncio.run(scenario())


async def until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.005)
