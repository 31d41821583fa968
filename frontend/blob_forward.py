"""A geo secondary's blob endpoint passes an account's requests on to its primary (issue 30):
Azure's SDKs reach an account at one fixed URL (Azure moves the account's DNS name on a
failover; a stamp on loopback has none to move), so a client still pointed at the account's
old primary, now its secondary, keeps working: its writes and reads are answered by the new
primary, through this stamp (a read answered here could miss writes the primary
acknowledged: frontend/blob_server.py).

Contract of `BlobForwarder.forward`, for a request whose credentials held here and which this
stamp refused with Moved (frontend/blob_server.py):
- the primary's blob endpoints are asked of the location (Resolve, its answer kept
  RESOLVE_TTL_S per account, at most RESOLVED_MAX accounts); the request goes to the first,
  as it came (method, path and query, body, every header but the hop-by-hop ones, none
  added that Shared Key signs: the signature covers the path and headers, not the host, so
  the primary checks it as its own), with FORWARDED_HEADER naming this stamp;
- the primary's answer is relayed as it is (status, headers but hop-by-hop ones, and body):
  a write's, of at most ANSWER_BYTES_MAX (a write's answer is small), in one piece; a
  read's (GET, HEAD), streamed in pieces of RELAY_CHUNK_BYTES as they come, with its
  Content-Length, whatever its size (a blob may be far larger than memory should hold);
- Moved is raised instead (the client gets 421 AccountMoved, as before) when the request
  was forwarded already (no loops between stamps that both think the other the primary),
  when this stamp is in no location, when the location names no blob endpoint for the
  primary or names this stamp, or when the primary cannot be reached (logged). A read
  whose answer breaks off after it began streaming ends the client's connection (its
  Content-Length is not met: never a short body taken as whole).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web

from common.errors import Moved, StampError
from frontend.blob_model import READ_METHODS
from location.client import LocationClient
from location.geo_auth import GeoSettings

log = logging.getLogger(__name__)

FORWARDED_HEADER = "x-stamp-forwarded-by"
RESOLVE_TTL_S = 5.0
RESOLVED_MAX = 10_000
RESOLVE_TIMEOUT_S = 2.0
FORWARD_TIMEOUT_S = 60.0
ANSWER_BYTES_MAX = 1024 * 1024
RELAY_CHUNK_BYTES = 256 * 1024
HOP_HEADERS = frozenset({"host", "connection", "keep-alive", "transfer-encoding", "te",
                         "trailer", "upgrade", "proxy-authorization", "proxy-connection",
                         "content-length"})
# aiohttp's client adds these unless told not to; Shared Key signs Content-Type.
NOT_ADDED = ("Content-Type", "User-Agent", "Accept", "Accept-Encoding")

SettingsReader = Callable[[], Awaitable[GeoSettings | None]]


class BlobForwarder:
    """Requests at a secondary's blob endpoint, answered by the primary (module contract)."""

    def __init__(self, settings: SettingsReader,
                 now: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self._now = now
        self._primaries: OrderedDict[str, tuple[float, str, tuple[str, ...]]] = OrderedDict()
        self._location = LocationClient()
        self._session: aiohttp.ClientSession | None = None
        self.forwarded = 0

    async def forward(self, http: web.Request, account: str, moved: Moved
                      ) -> web.StreamResponse:
        settings = await self._settings()
        if settings is None or FORWARDED_HEADER in http.headers:
            raise moved
        try:
            primary, endpoints = await self._primary(settings, account)
        except StampError as exc:
            log.warning("account %s: where its primary's blob endpoint is: %s", account, exc)
            raise moved from None
        if primary == settings.stamp or not endpoints:
            raise moved
        try:
            answer = await self._send(http, endpoints[0], settings.stamp)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("account %s: forwarding a %s to %s failed: %r", account, http.method,
                        primary, exc)
            raise moved from None
        self.forwarded += 1
        return answer

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        await self._location.close()

    async def _send(self, http: web.Request, endpoint: str, stamp: str) -> web.StreamResponse:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                auto_decompress=False, timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S))
        headers = [(k, v) for k, v in http.headers.items() if k.lower() not in HOP_HEADERS]
        headers.append((FORWARDED_HEADER, stamp))
        body = await http.read()
        async with self._session.request(
                http.method, endpoint.rstrip("/") + http.raw_path, headers=headers,
                data=body, skip_auto_headers=NOT_ADDED, allow_redirects=False) as answer:
            relayed = {k: v for k, v in answer.headers.items()
                       if k.lower() not in HOP_HEADERS}
            if http.method in READ_METHODS:
                return await _relay(http, answer, relayed)
            data = await answer.content.read(ANSWER_BYTES_MAX)
            return web.Response(status=answer.status, headers=relayed, body=data)

    async def _primary(self, settings: GeoSettings, account: str
                       ) -> tuple[str, tuple[str, ...]]:
        cached = self._primaries.get(account)
        if cached is not None and self._now() - cached[0] <= RESOLVE_TTL_S:
            return cached[1], cached[2]
        reply = await self._location.resolve(settings.location, account, RESOLVE_TIMEOUT_S)
        found = (reply.primary.name, tuple(reply.primary.blob_endpoints))
        self._primaries[account] = (self._now(), *found)
        self._primaries.move_to_end(account)
        while len(self._primaries) > RESOLVED_MAX:
            self._primaries.popitem(last=False)
        return found


async def _relay(http: web.Request, answer: aiohttp.ClientResponse, headers: dict[str, str]
                 ) -> web.StreamResponse:
    """A read's answer from the primary, streamed to the client as it comes (module
    contract): its status, `headers` and Content-Length, then its body piece by piece."""
    relayed = web.StreamResponse(status=answer.status, headers=headers)
    length = answer.headers.get("Content-Length")
    if length is not None and length.isdigit():
        relayed.content_length = int(length)
    await relayed.prepare(http)
    if http.method != "HEAD":
        try:
            async for chunk in answer.content.iter_chunked(RELAY_CHUNK_BYTES):
                await relayed.write(chunk)
        except (aiohttp.ClientError, TimeoutError) as exc:
            # Begun already: no refusal can be sent. The connection is cut, so the client
            # sees a body shorter than its Content-Length, never a short one as whole.
            log.warning("relaying a read from the primary broke off: %r", exc)
            if http.transport is not None:
                http.transport.close()
            return relayed
    await relayed.write_eof()
    return relayed
