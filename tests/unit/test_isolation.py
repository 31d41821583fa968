"""common/isolation.py on a real gRPC server and channel in one process: every gRPC path in
and out of an isolated process is cut, both directions, calls under way included; the
operator's Faults service is not; a heal lifts the cut.

Client and server share this process's cut set, so cutting the server's *address* tests the
outgoing side (the channel), and cutting this process's *name* tests the incoming side (the
server guard refuses its own process's calls as it would a cut peer's)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import grpc
import pytest
from grpc import aio

from common import isolation, rpc
from common.isolation_grpc import CUT_DETAILS, caller_name
from common.proto import faults_pb2, faults_pb2_grpc

SAY = "/test.Echo/Say"
CHAT = "/test.Echo/Chat"
MESSAGE_MAX = 1 << 20


@pytest.fixture(autouse=True)
def healed() -> Iterator[None]:
    isolation.set_process_name("unit-client")
    isolation.heal()
    yield
    isolation.heal()


async def _say(request: bytes, context: aio.ServicerContext) -> bytes:
    return b"echo:" + request


async def _chat(requests: AsyncIterator[bytes], context: aio.ServicerContext
                ) -> AsyncIterator[bytes]:
    async for request in requests:
        yield b"echo:" + request


async def _serve() -> tuple[aio.Server, str]:
    server = rpc.aio_server(MESSAGE_MAX)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", {
        "Say": grpc.unary_unary_rpc_method_handler(_say),
        "Chat": grpc.stream_stream_rpc_method_handler(_chat)}),))
    faults_pb2_grpc.add_FaultsServicer_to_server(rpc.FaultsServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


def _run(scenario: Callable[[aio.Server, str], Awaitable[None]]) -> None:
    async def main() -> None:
        server, address = await _serve()
        try:
            await scenario(server, address)
        finally:
            await server.stop(None)
    asyncio.run(main())


async def _code_of(awaitable: Awaitable[Any]) -> tuple[grpc.StatusCode, str]:
    try:
        await awaitable
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    raise AssertionError("the call went through the cut")


def test_outgoing_call_to_a_cut_address_fails_unavailable_at_once_until_healed() -> None:
    async def scenario(server: aio.Server, address: str) -> None:
        async with rpc.aio_channel(address, MESSAGE_MAX) as channel:
            say = channel.unary_unary(SAY)
            assert await say(b"a", timeout=5) == b"echo:a"
            isolation.isolate([address])
            started = time.monotonic()
            code, _ = await _code_of(say(b"b", timeout=10))
            assert code == grpc.StatusCode.UNAVAILABLE
            assert time.monotonic() - started < 5  # refused, not timed out
            isolation.heal([address])
            assert await say(b"c", timeout=5) == b"echo:c"
    _run(scenario)


def test_a_cut_call_fails_unavailable_in_every_event_loop_of_the_process() -> None:
    """A cut call goes to a channel of its own loop: a second asyncio.run in the same process
    (unit tests, tools) gets UNAVAILABLE too, not 'Event loop is closed'."""
    async def scenario(server: aio.Server, address: str) -> None:
        async with rpc.aio_channel(address, MESSAGE_MAX) as channel:
            isolation.isolate([address])
            code, _ = await _code_of(channel.unary_unary(SAY)(b"x", timeout=10))
            assert code == grpc.StatusCode.UNAVAILABLE
            isolation.heal([address])
    _run(scenario)
    _run(scenario)


def test_incoming_call_from_a_cut_process_is_refused_but_faults_service_answers() -> None:
    async def scenario(server: aio.Server, address: str) -> None:
        async with rpc.aio_channel(address, MESSAGE_MAX) as channel:
            isolation.isolate([isolation.process_name()])
            code, details = await _code_of(channel.unary_unary(SAY)(b"a", timeout=5))
            assert (code, details) == (grpc.StatusCode.UNAVAILABLE, CUT_DETAILS)
            chat = channel.stream_stream(CHAT)()
            code, details = await _code_of(chat.read())
            assert (code, details) == (grpc.StatusCode.UNAVAILABLE, CUT_DETAILS)
            # The operator's channel stays open: this is how a heal reaches the process.
            reply = await faults_pb2_grpc.FaultsStub(channel).Heal(
                faults_pb2.HealRequest(), timeout=5)
            assert list(reply.cut) == []
            assert await channel.unary_unary(SAY)(b"b", timeout=5) == b"echo:b"
    _run(scenario)


def test_a_caller_that_is_not_a_stamp_process_is_not_cut_by_name() -> None:
    async def scenario(server: aio.Server, address: str) -> None:
        isolation.isolate([isolation.process_name()])
        async with aio.insecure_channel(address) as raw:  # no stamp-process user agent
            assert await raw.unary_unary(SAY)(b"a", timeout=5) == b"echo:a"
    _run(scenario)


@pytest.mark.parametrize("side", ["outgoing", "incoming"])
def test_a_stream_under_way_is_cut_when_the_peer_is_isolated(side: str) -> None:
    """A stream opened before the cut carries nothing across it: it ends at the cut."""
    async def scenario(server: aio.Server, address: str) -> None:
        async with rpc.aio_channel(address, MESSAGE_MAX) as channel:
            chat = channel.stream_stream(CHAT)()
            await chat.write(b"1")
            assert await chat.read() == b"echo:1"
            isolation.isolate([address if side == "outgoing" else isolation.process_name()])
            # Nothing written: the cut alone ends the stream (no message needs to cross).
            code, details = await _code_of(asyncio.wait_for(chat.read(), 10))
            assert (code, details) == (grpc.StatusCode.UNAVAILABLE, CUT_DETAILS)
            # Nor can a message cross later (a write on the ended call fails as the peer's
            # transport reports it: UNAVAILABLE or INTERNAL, both rpc.from_rpc_error's
            # Unavailable).
            with pytest.raises((grpc.RpcError, asyncio.InvalidStateError)):
                await _write_and_read(chat)
    _run(scenario)


async def _write_and_read(chat: Any) -> None:
    await chat.write(b"2")
    await chat.read()


def test_sync_channel_to_a_cut_address_fails_unavailable() -> None:
    async def scenario(server: aio.Server, address: str) -> None:
        isolation.isolate([address])

        def blocking_call() -> grpc.StatusCode:
            with rpc.sync_channel(address, MESSAGE_MAX) as channel:
                try:
                    channel.unary_unary(SAY)(b"a", timeout=10)
                except grpc.RpcError as exc:
                    return exc.code()
            raise AssertionError("the call went through the cut")
        assert await asyncio.to_thread(blocking_call) == grpc.StatusCode.UNAVAILABLE
        isolation.heal()
        assert await asyncio.to_thread(rpc.heal_remote, address) == []
    _run(scenario)


def test_isolate_and_heal_through_the_faults_service() -> None:
    async def scenario(server: aio.Server, address: str) -> None:
        cut = await asyncio.to_thread(rpc.isolate_remote, address, ["en-1", "127.0.0.1:9"])
        assert cut == ["127.0.0.1:9", "en-1"]
        assert isolation.is_cut("en-1") and not isolation.is_cut("en-2")
        assert await asyncio.to_thread(rpc.heal_remote, address, ["en-1"]) == ["127.0.0.1:9"]
        assert await asyncio.to_thread(rpc.heal_remote, address) == []
    _run(scenario)


def test_armed_from_the_environment_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(isolation.ENV_VAR, " en-1, 127.0.0.1:7001 ,,")
    isolation.arm_from_env()
    assert isolation.cut_peers() == {"en-1", "127.0.0.1:7001"}
    assert isolation.heal(["en-1"]) == {"127.0.0.1:7001"}


def test_caller_name_is_read_from_a_stamp_user_agent_only() -> None:
    agent = f"{isolation.USER_AGENT_PREFIX}ps-1 grpc-python-asyncio/1.85.1 grpc-c/44.0.0"
    assert caller_name([("x", "y"), ("user-agent", agent)]) == "ps-1"
    assert caller_name([("user-agent", "grpc-python/1.85.1")]) is None
    assert caller_name(None) is None
