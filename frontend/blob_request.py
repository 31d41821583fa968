"""One request of the front end's Azure Blob endpoint as its handlers see it
(frontend/blob_server.py parses and authorizes it, frontend/blob_handlers.py answers it): the
parsed request, the handler type, the account throttle's admission, and the time limits on
moving a body (blob_server.py's module docstring states them).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from common.config import FrontEndLimits
from common.errors import StampError
from frontend.blob_model import http_date
from frontend.blob_store import BlobStore
from frontend.server_call import UNROUTED, FrontEnd

DEFAULT_VERSION = "2021-12-02"  # answered when a request names none
REQUEST_OVERHEAD_BYTES = 256  # what the throttle charges a request beyond its body
# The slowest a body may move, beyond the headers timeout: 4 MiB in 16 s.
BYTES_PER_S_MIN = 256 * 1024
# x-ms-request-id: a GUID as the service's, unique per request: this process's random first
# 64 bits, then a counter (uuid4 per request read the OS's randomness every time).
_REQUEST_ID_PREFIX = str(uuid.uuid4())[:24]
_request_numbers = itertools.count()


def request_id() -> str:
    return f"{_REQUEST_ID_PREFIX}{next(_request_numbers) & 0xFFFF_FFFF_FFFF:012x}"


@dataclass
class BlobRequest:
    """One parsed request: the URL's account, container and blob (decoded), its query."""

    http: web.Request
    request_id: str
    account: str
    container: str
    blob: str
    query: dict[str, str]

    @property
    def comp(self) -> str:
        return self.query.get("comp", "")

    @property
    def restype(self) -> str:
        return self.query.get("restype", "")

    def header(self, name: str) -> str | None:
        return self.http.headers.get(name)

    def base_headers(self) -> dict[str, str]:
        """The headers of every answer."""
        headers = {"x-ms-request-id": self.request_id,
                   "x-ms-version": self.http.headers.get("x-ms-version", DEFAULT_VERSION),
                   "Date": http_date(int(time.time() * 1000)),
                   "Server": "Stamp-Blob"}
        client_id = self.http.headers.get("x-ms-client-request-id")
        if client_id is not None:
            headers["x-ms-client-request-id"] = client_id
        return headers

    def endpoint(self) -> str:
        return f"http://{self.http.host}/{self.account}/"


Handler = Callable[[BlobRequest, BlobStore, FrontEnd], Awaitable[web.StreamResponse]]


def admit(front_end: FrontEnd, request: BlobRequest, group: str, nbytes: int) -> None:
    """The front end's account throttle, for the partition server `group` routes to."""
    route = front_end.client.route_name(request.account, group)
    server = route[0] if route is not None else UNROUTED
    try:
        front_end.throttle.admit(request.account, server, nbytes).raise_if_refused()
    except StampError as exc:
        front_end.counters.refused(exc)
        raise


def transfer_timeout_s(limits: FrontEndLimits, nbytes: int) -> float:
    """How long moving `nbytes` of a body may take (the module's rule)."""
    return limits.blob_headers_timeout_ms / 1000 + nbytes / BYTES_PER_S_MIN


async def write_within(http: web.Request, response: web.StreamResponse, data: bytes,
                       limits: FrontEndLimits) -> None:
    """Write `data` of a prepared, streamed `response` (b"": end it) within
    transfer_timeout_s; a client that does not take it in time has its connection cut, and
    ConnectionResetError is raised (aiohttp then drops the request as one whose client went
    away)."""
    await within(http, limits, len(data),
                  response.write(data) if data else response.write_eof())


async def within(http: web.Request, limits: FrontEndLimits, nbytes: int,
                  step: Awaitable[None]) -> None:
    try:
        async with asyncio.timeout(transfer_timeout_s(limits, nbytes)):
            await step
    except TimeoutError:
        if http.transport is not None:
            http.transport.abort()
        raise ConnectionResetError(f"the client took no {nbytes} bytes of its answer in "
                                   f"time") from None
