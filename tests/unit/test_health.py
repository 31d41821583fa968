"""common/health.py on a real gRPC server in one process: NOT_SERVING until checked, then
whatever the server's check says, re-checked every interval; NOT_SERVING for good once it
stops; no answer (a stopped server) is UNREACHABLE within the deadline."""

from __future__ import annotations

import asyncio
import time

from common import health, rpc
from common.config import WatchConfig

FAST = WatchConfig(health_check_interval_ms=20)


async def _until(address: str, wanted: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (found := await health.check_one(address, 1.0)) != wanted:
        assert time.monotonic() < deadline, f"health stayed {found}, never {wanted}"
        await asyncio.sleep(0.01)


def test_health_follows_the_check_and_goes_not_serving_when_stopping() -> None:
    async def scenario() -> None:
        server = rpc.aio_server(1 << 20)
        watched = health.Health(FAST)
        await watched.attach(server)
        address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        try:
            assert await health.check_one(address, 1.0) == health.NOT_SERVING  # unchecked
            why: list[str | None] = [None]

            async def check() -> str | None:  # an async check (a dependency's, say)
                return why[0]
            watched.start(check)
            await _until(address, health.SERVING)
            why[0] = "lost its lease"
            await _until(address, health.NOT_SERVING)
            assert watched.reason == "lost its lease"
            why[0] = None
            await _until(address, health.SERVING)
            await watched.stop()
            assert await health.check_one(address, 1.0) == health.NOT_SERVING
        finally:
            await server.stop(None)
        started = time.monotonic()
        assert await health.check_many([address], 1.0) == {address: health.UNREACHABLE}
        assert time.monotonic() - started < 1.5
    asyncio.run(scenario())


def test_a_check_that_raises_is_an_unhealthy_server_not_a_dead_loop() -> None:
    async def scenario() -> None:
        server = rpc.aio_server(1 << 20)
        watched = health.Health(FAST)
        await watched.attach(server)
        address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        calls = [0]

        def check() -> str | None:
            calls[0] += 1
            if calls[0] < 3:
                raise RuntimeError("broken")
            return None
        try:
            watched.start(check)
            await _until(address, health.SERVING)  # checked again after the failures
            assert calls[0] >= 3
        finally:
            await watched.stop()
            await server.stop(None)
    asyncio.run(scenario())


def test_a_server_without_a_check_serves_until_it_stops_with_no_loop() -> None:
    async def scenario() -> None:
        server = rpc.aio_server(1 << 20)
        watched = health.Health(FAST)
        await watched.attach(server)
        address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        try:
            watched.start(None)
            await _until(address, health.SERVING)
            assert watched._task is not None and watched._task.done()  # nothing re-checks
            await watched.stop()
            assert await health.check_one(address, 1.0) == health.NOT_SERVING
        finally:
            await server.stop(None)
    asyncio.run(scenario())
