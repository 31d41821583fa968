"""partition_layer.session.CallSession against a stream that never answers (pure asyncio):
a call fails with DeadlineExceeded once its own deadline passes, while a later call with a
longer deadline keeps waiting; every call is matched to its response by id."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from common.errors import DeadlineExceeded, Unavailable
from common.proto import partition_pb2 as pb
from partition_layer.session import CallSession


class _SilentCall:
    """A bidi stream that takes every batch and answers only the requests released."""

    def __init__(self) -> None:
        self.sent: list[pb.Request] = []
        self._responses: asyncio.Queue[pb.ResponseBatch] = asyncio.Queue()

    async def write(self, batch: pb.RequestBatch) -> None:
        self.sent.extend(batch.requests)

    def release(self, request: pb.Request) -> None:
        self._responses.put_nowait(pb.ResponseBatch(
            responses=[pb.Response(id=request.id, first_seq=7)]))

    def __aiter__(self) -> _SilentCall:
        return self

    async def __anext__(self) -> pb.ResponseBatch:
        return await self._responses.get()

    def cancel(self) -> None:
        pass


class _Stub:
    def __init__(self, call: _SilentCall) -> None:
        self._call = call

    def Call(self) -> Any:  # the gRPC method's name
        return self._call


def test_each_call_times_out_on_its_own_deadline() -> None:
    async def scenario() -> None:
        call = _SilentCall()
        session = CallSession("fake:1", lambda: _Stub(call))  # type: ignore[arg-type, return-value]
        short = asyncio.ensure_future(session.call(pb.Request(account="a", pname="p"), 0.1))
        long = asyncio.ensure_future(session.call(pb.Request(account="a", pname="q"), 30))
        with pytest.raises(DeadlineExceeded, match=r"within 0\.1s"):
            await asyncio.wait_for(short, 5)  # a broken watchdog fails here, not hangs
        assert not long.done(), "a call failed before its own deadline"
        (_, second) = call.sent
        call.release(second)
        assert (await long).first_seq == 7
        await session.close()
    asyncio.run(scenario())


class _BreakingCall(_SilentCall):
    """A stream whose writes wait until `allow_write` is set (`writing` tells that one has
    begun), and whose responses end (the stream broke) once `end()` is called."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = asyncio.Event()
        self.allow_write = asyncio.Event()
        self._ended = asyncio.Event()

    async def write(self, batch: pb.RequestBatch) -> None:
        self.writing.set()
        await self.allow_write.wait()
        await super().write(batch)

    def end(self) -> None:
        self._ended.set()

    async def __anext__(self) -> pb.ResponseBatch:
        await self._ended.wait()
        raise StopAsyncIteration


class _Stubs:
    def __init__(self, *calls: _SilentCall) -> None:
        self._calls = list(calls)

    def Call(self) -> Any:
        return self._calls.pop(0)


def test_a_broken_stream_fails_what_it_sent_and_sends_the_rest_on_a_new_one() -> None:
    async def scenario() -> None:
        first, second = _BreakingCall(), _SilentCall()
        stubs = _Stubs(first, second)
        session = CallSession("fake:1", lambda: stubs)  # type: ignore[arg-type, return-value]
        sent = asyncio.ensure_future(session.call(pb.Request(account="a", pname="p"), 30))
        await asyncio.wait_for(first.writing.wait(), 5)  # "p" is being written: held there
        queued = asyncio.ensure_future(session.call(pb.Request(account="a", pname="q"), 30))
        await asyncio.sleep(0)  # the call queues "q" behind the write and waits
        first.end()
        first.allow_write.set()
        with pytest.raises(Unavailable):
            await asyncio.wait_for(sent, 5)  # may or may not have run: the caller decides
        for _ in range(100):
            if second.sent:
                break
            await asyncio.sleep(0.01)
        assert [r.pname for r in first.sent] == ["p"]
        assert [r.pname for r in second.sent] == ["q"]
        second.release(second.sent[0])
        assert (await asyncio.wait_for(queued, 5)).first_seq == 7
        await session.close()
    asyncio.run(scenario())


class _StuckCall(_SilentCall):
    """A stream whose first write never completes (a peer that stopped reading): what
    comes after it stays queued, unsent."""

    async def write(self, batch: pb.RequestBatch) -> None:
        self.sent.extend(batch.requests)
        await asyncio.Event().wait()


def test_close_fails_sent_and_queued_calls_and_later_ones() -> None:
    async def scenario() -> None:
        call = _StuckCall()
        session = CallSession("fake:1", lambda: _Stub(call))  # type: ignore[arg-type, return-value]
        sent = session.submit(pb.Request(account="a", pname="p"), 30)
        while not call.sent:  # the first batch is being written (and stays so)
            await asyncio.sleep(0)
        queued = [session.submit(pb.Request(account="a", pname=f"q{i}"), 30) for i in range(3)]
        await session.close()
        for future in [sent, *queued]:
            with pytest.raises(Unavailable):
                await asyncio.wait_for(future, 5)  # without the fix: waits until this fails
        later = session.submit(pb.Request(account="a", pname="late"), 30)
        with pytest.raises(Unavailable, match="closed"):
            await asyncio.wait_for(later, 5)
        assert [r.pname for r in call.sent] == ["p"]  # nothing queued went out
        assert not session._waiting and not session._deadlines
    asyncio.run(scenario())
