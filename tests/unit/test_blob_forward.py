"""A secondary's blob requests passed on to the primary (frontend/blob_forward.py, issue 30),
reads streamed whole; when it must answer Moved itself instead (the forwarding path is
tested against two real stamps in tests/probe/test_geo_failover.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from common.errors import Moved, Unavailable
from frontend.blob_forward import FORWARDED_HEADER, BlobForwarder
from location.geo_auth import GeoSettings

SETTINGS = GeoSettings("west-1", ("127.0.0.1:9",), b"s" * 32)
MOVED = Moved.of("acme", "east-1", 2)


def forward(settings: GeoSettings | None, headers: dict[str, str],
            primary: tuple[str, tuple[str, ...]] | Exception | None = None) -> Any:
    async def read() -> GeoSettings | None:
        return settings

    forwarder = BlobForwarder(read)

    async def where(settings: GeoSettings, account: str) -> tuple[str, tuple[str, ...]]:
        if isinstance(primary, Exception):
            raise primary
        assert primary is not None, "the location was asked"
        return primary

    forwarder._primary = where  # type: ignore[method-assign]
    return asyncio.run(forwarder.forward(SimpleNamespace(headers=headers),  # type: ignore[arg-type]
                                         "acme", MOVED))


@pytest.mark.parametrize(("settings", "headers", "primary"), [
    (None, {}, None),  # in no location
    (SETTINGS, {FORWARDED_HEADER: "east-1"}, None),  # forwarded once already: no loop
    (SETTINGS, {}, Unavailable("the location is down")),
    (SETTINGS, {}, ("east-1", ())),  # the primary has no blob endpoint
    (SETTINGS, {}, ("west-1", ("http://127.0.0.2:1",))),  # names this stamp
])
def test_the_secondary_answers_moved_itself_when_it_cannot_pass_a_write_on(
        settings: GeoSettings | None, headers: dict[str, str], primary: Any) -> None:
    with pytest.raises(Moved, match="its primary is stamp east-1"):
        forward(settings, headers, primary)


def test_a_read_is_relayed_whole_however_large_and_a_write_answered() -> None:
    """A read's answer streams through (a blob larger than a write's answer may be, with its
    Content-Length; a HEAD's without a body), a write's comes back in one piece: against a
    real HTTP server as the primary, through a real one as the secondary."""
    blob = bytes(range(256)) * (3 * 4096)  # 3 MiB: past ANSWER_BYTES_MAX

    async def primary_handler(http: web.Request) -> web.Response:
        assert http.headers[FORWARDED_HEADER] == "west-1"
        if http.method == "PUT":
            return web.Response(status=201, headers={"ETag": "e1"}, body=b"")
        return web.Response(body=blob if http.method == "GET" else None,
                            headers={"x-ms-blob-type": "AppendBlob",
                                     "Content-Length": str(len(blob))})

    async def scenario() -> None:
        primary = await _serve(primary_handler)

        async def settings() -> GeoSettings:
            return SETTINGS

        forwarder = BlobForwarder(settings)

        async def where(settings: GeoSettings, account: str) -> tuple[str, tuple[str, ...]]:
            return "east-1", (primary[1],)

        forwarder._primary = where  # type: ignore[method-assign]

        async def secondary_handler(http: web.Request) -> web.StreamResponse:
            return await forwarder.forward(http, "acme", MOVED)

        secondary = await _serve(secondary_handler)
        try:
            async with aiohttp.ClientSession() as client:
                async with client.get(secondary[1] + "/acme/c/b") as answer:
                    assert answer.status == 200 and answer.content_length == len(blob)
                    assert answer.headers["x-ms-blob-type"] == "AppendBlob"
                    assert await answer.read() == blob
                async with client.head(secondary[1] + "/acme/c/b") as answer:
                    assert answer.content_length == len(blob)
                async with client.put(secondary[1] + "/acme/c/b", data=b"x") as answer:
                    assert answer.status == 201 and answer.headers["ETag"] == "e1"
            assert forwarder.forwarded == 3
        finally:
            await forwarder.close()
            for runner, _ in (primary, secondary):
                await runner.cleanup()
    asyncio.run(scenario())


async def _serve(handler: Any) -> tuple[web.AppRunner, str]:
    """An HTTP server of one catch-all route on a free loopback port, and its URL."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"
