"""One multiplexed `Call` stream from the SDK to a front end (stamp.frontend.v1): requests
are queued, sent in batches, and matched to their responses by id.

Contract: `call` returns the server's Response (which may name an error), or raises
Unavailable when the stream broke or DeadlineExceeded when no answer came in time — in both
cases the request may or may not have been executed. Requests never written to a broken
stream go out on the next one. `close` fails every call not yet answered, sent or still
queued, with Unavailable, and so every call submitted after it. `submit` is the same without
a coroutine: it returns the future `call` awaits (no task per request).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import grpc

from stampsdk._proto import frontend_v1_pb2 as pb
from stampsdk.errors import DeadlineExceeded, StampError, Unavailable, from_rpc_error

BATCH_BYTES_MAX = 4 * 1024 * 1024
# How often a session looks for calls past their deadline (deadlines are 0.1 s or more).
WATCHDOG_INTERVAL_S = 0.05


class Waiter(Protocol):
    """What waits for one request's answer (an asyncio.Future). Once done, neither method is
    called again."""

    def done(self) -> bool:
        """Whether the answer (or failure) was given, or the waiter cancelled."""
        ...

    def set_result(self, response: pb.Response, /) -> None:
        """The front end's Response to the request (it may name an error)."""
        ...

    def set_exception(self, error: BaseException, /) -> None:
        """The request failed without a Response: Unavailable or DeadlineExceeded (module
        contract)."""
        ...


class CallSession:
    """The Call stream to one front end (module contract)."""

    def __init__(self, address: str, stub: Callable[[], Any],
                 metadata: tuple[tuple[str, str], ...] | None = None) -> None:
        """`metadata`: the gRPC metadata each of its Call streams is opened with."""
        self.address = address
        self._stub = stub
        self._metadata = metadata
        self._ids = itertools.count(1)
        self._queue: deque[tuple[pb.Request, int]] = deque()
        self._waiting: dict[int, Waiter] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # request id -> (deadline, timeout): one watchdog for them all, not a timer per call
        # (asyncio.timeout per call was a quarter of a small append's client time).
        self._deadlines: dict[int, tuple[float, float]] = {}
        self._watchdog: asyncio.Task[None] | None = None
        self._closed = False

    async def call(self, request: pb.Request, timeout_s: float, nbytes: int = 256
                   ) -> pb.Response:
        """`nbytes`: about how large the request is (ByteSize() would serialize it)."""
        return await self.submit(request, timeout_s, nbytes)

    def submit(self, request: pb.Request, timeout_s: float, nbytes: int = 256
               ) -> asyncio.Future[pb.Response]:
        """Queue `request` (its id is replaced by this session's) and return the future of
        its Response, failed as `call` raises; cancelling the future abandons the call."""
        future: asyncio.Future[pb.Response] = asyncio.get_running_loop().create_future()
        request_id = self.send(request, timeout_s, nbytes, future)
        # A future its caller cancelled is forgotten now, not at its deadline.
        future.add_done_callback(lambda _: self._forget(request_id))
        return future

    def send(self, request: pb.Request, timeout_s: float, nbytes: int, waiter: Waiter) -> int:
        """Queue `request` (its id is replaced by this session's, which is returned);
        `waiter` is answered as `submit`'s future would be (module docstring)."""
        request_id = request.id = next(self._ids)
        if self._closed:
            waiter.set_exception(Unavailable(f"{self.address}: the session is closed"))
            return request_id
        self._waiting[request_id] = waiter
        self._deadlines[request_id] = (time.monotonic() + timeout_s, timeout_s)
        self._queue.append((request, nbytes))
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self._expire())
        return request_id

    def _forget(self, request_id: int) -> None:
        self._waiting.pop(request_id, None)
        self._deadlines.pop(request_id, None)

    async def _expire(self) -> None:
        """Fail calls unanswered past their deadline (checked every WATCHDOG_INTERVAL_S)."""
        while self._deadlines:
            await asyncio.sleep(WATCHDOG_INTERVAL_S)
            now = time.monotonic()
            for request_id, (deadline, timeout_s) in list(self._deadlines.items()):
                if deadline > now:
                    continue
                del self._deadlines[request_id]
                waiter = self._waiting.pop(request_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_exception(DeadlineExceeded(
                        f"{self.address} did not answer within {timeout_s:g}s"))
        self._watchdog = None

    async def _run(self) -> None:
        call = self._stub().Call(metadata=self._metadata)
        reader = asyncio.get_running_loop().create_task(self._read(call))
        error: StampError = Unavailable(f"call stream to {self.address} ended")
        # Ids grow in call order and the queue is sent in that order: every request still
        # waiting with an id up to this one went out on this stream (a set of sent ids would
        # grow for as long as the stream lives).
        last_sent = 0
        try:
            while not reader.done():
                await self._wake.wait()
                self._wake.clear()
                while self._queue and not reader.done():
                    batch = pb.RequestBatch()
                    size = 0
                    while self._queue and (size == 0 or size + self._queue[0][1]
                                           <= BATCH_BYTES_MAX):
                        request, nbytes = self._queue.popleft()
                        waiter = self._waiting.get(request.id)
                        if waiter is None or waiter.done():
                            continue  # its caller gave up already
                        size += nbytes
                        batch.requests.append(request)
                    if batch.requests:
                        last_sent = batch.requests[-1].id
                        await call.write(batch)
        except asyncio.CancelledError:
            error = Unavailable("client closed")
            self._queue.clear()
            raise
        except Exception as exc:  # whatever gRPC raises for a dead stream
            error = from_rpc_error(exc) if isinstance(exc, grpc.RpcError) else Unavailable(
                f"call stream to {self.address} failed: {exc!r}")
        finally:
            call.cancel()
            reader.cancel()
            self._task = None
            for request_id in [r for r in self._waiting if r <= last_sent]:
                waiter = self._waiting.pop(request_id)
                self._deadlines.pop(request_id, None)
                if not waiter.done():
                    waiter.set_exception(Unavailable(f"{self.address}: {error}"))
            if self._queue and last_sent:
                self._task = asyncio.get_running_loop().create_task(self._run())
            elif self._queue:
                # Nothing got through: the server is unreachable. Fail the rest too.
                while self._queue:
                    request_id = self._queue.popleft()[0].id
                    waiter = self._waiting.pop(request_id, None)
                    self._deadlines.pop(request_id, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_exception(Unavailable(f"{self.address}: {error}"))

    async def _read(self, call: Any) -> None:
        try:
            async for batch in call:
                for response in batch.responses:
                    waiter = self._waiting.pop(response.id, None)
                    self._deadlines.pop(response.id, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(response)
        except grpc.RpcError:
            pass
        finally:
            self._wake.set()

    async def close(self) -> None:
        """Stop the stream and fail every call still waiting. The stream task fails only
        those it sent, and the watchdog that would expire the rest stops too: without this
        the callers of requests still queued would wait forever."""
        self._closed = True
        for task in (self._task, self._watchdog):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._queue.clear()
        waiting, self._waiting = self._waiting, {}
        self._deadlines.clear()
        for waiter in waiting.values():
            if not waiter.done():
                waiter.set_exception(Unavailable(f"{self.address}: the session is closed"))
