"""The front end's Azure Blob REST endpoint (DESIGN §6): HTTP on its own port, path-style URLs
`http://HOST:PORT/ACCOUNT/CONTAINER/BLOB` as the emulator's, so Azure's own SDKs
(`BlobServiceClient.from_connection_string`) work against a stamp.

Each request: parsed, authorized (Shared Key, or a service SAS for reads: blob_auth.py, with
the account's keys from the front end's Authenticator), admitted by the front end's account
throttle, routed (on `comp` before `x-ms-blob-type`: an SDK has been seen sending both), and
answered by frontend/blob_handlers.py through frontend/blob_store.py. Every answer carries
`x-ms-request-id`, `x-ms-version` (the request's, echoed: every version an SDK sends is
accepted) and `Date`; every refusal the service's status, `x-ms-error-code` and XML body, so
the SDK raises its usual exceptions.

At an account's geo secondary (issue 30) every request — a write (any method but GET and
HEAD, HTTP's safe methods, which are all the reads `route` serves) and a read alike — is
refused once its credentials hold, with blob_store.MOVED_STATUS (421) and MOVED_CODE
("AccountMoved"), the message naming the primary stamp — unless it can be passed on to the
primary and answered there (frontend/blob_forward.py). A read is refused too: Azure's SDKs
reach an account at one URL, and a client still pointed at the old primary after a failover
must not read the copy behind the new primary (DESIGN §8: reads see every acknowledged
write). Read access to the secondary is the SDK's (`ReadFrom=secondary`), not this
endpoint's.

Before any account is looked up: a request without credentials (no Authorization header, no
SAS `sig`) is refused 401, and one whose URL names an account no account can have is
refused as a bad signature without asking (frontend/names.py; blob_auth.py says why a
refusal never tells whether an account exists). A query parameter or a signed header
(`x-ms-*`, and the standard ones Shared Key signs) given twice is refused 400: the signature
covers their values joined, and a handler would read one of them.

HTTP limits (aiohttp's parser, RequestHandler and client_max_size), sized to what Azure's
documented limits need: a request line of REQUEST_LINE_BYTES_MAX (a URL with two encoded
blob names and a SAS), a header of HEADER_FIELD_BYTES_MAX (all of a blob's 8 KiB metadata
in one), HEADERS_MAX headers, a body of `blob_append_bytes_max`; a request head must arrive
within `blob_headers_timeout_ms` of the connection's opening or its last answer (aiohttp's
keep-alive timer closes a connection still waiting for a head then: slowloris). Bodies
move at BYTES_PER_S_MIN at least, both ways: an Append Block's arrives within the headers
timeout plus its length at that rate (else 408), and an answer's every write is taken by
the client within the same (else its connection is cut): a client that stops reading holds
a front end's memory no longer than that (`write_within`). A request
aiohttp cannot parse is refused 400 by aiohttp and logged in one line, at most
HTTP_REFUSALS_LOGGED_PER_S a second (aiohttp logs each with its traceback, at ERROR: a
stranger could fill the front end's log).
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from common import durable_fs
from common.config import FrontEndLimits
from common.errors import InvalidArgument, Moved, StampError
from frontend import blob_auth, blob_xml, names
from frontend.auth import Held
from frontend.blob_forward import BlobForwarder
from frontend.blob_handlers import route
from frontend.blob_model import (
    BLOB_NAME_BYTES_MAX,
    METADATA_BYTES_MAX,
    READ_METHODS,
    BlobError,
)
from frontend.blob_request import (
    DEFAULT_VERSION,
    BlobRequest,
    request_id,
    within,
)
from frontend.blob_store import BlobStore, service_error
from frontend.server_call import FrontEnd

log = logging.getLogger(__name__)
http_log = logging.getLogger(__name__ + ".http")  # aiohttp's RequestHandler logs here

# Written beside ready.json: where the endpoint listens (`stamp up` records it in stamp.json).
HTTP_READY_FILE = "http.json"
# Room for the headers and framing of the largest Append Block body.
BODY_SLACK_BYTES = 64 * 1024
# Blob operations a service SAS with `r` admits: every read blob_handlers.route serves.
SAS_READS = {("GET", ""), ("HEAD", ""), ("GET", "metadata"), ("HEAD", "metadata")}
# On SIGTERM, requests under way get this long (as gRPC's streams do), then are cut.
SHUTDOWN_GRACE_S = 1.0
# The URL: an account and a container (63 characters each), a blob name and a List prefix or
# marker (BLOB_NAME_BYTES_MAX each, percent-encoded: 3 characters a byte), a SAS and the rest.
REQUEST_LINE_BYTES_MAX = 2 * 3 * BLOB_NAME_BYTES_MAX + 4 * 1024
HEADER_FIELD_BYTES_MAX = METADATA_BYTES_MAX + 1024  # one x-ms-meta- header may hold it all
HEADERS_MAX = 256  # metadata pairs and the ~20 headers an SDK sends
HTTP_REFUSALS_LOGGED_PER_S = 1.0
REFUSAL_SHOWN_CHARS_MAX = 200  # of aiohttp's reason (it quotes the offending bytes)


class _HttpRefusals(logging.Filter):
    """Turns aiohttp's record of a request it could not parse into one WARNING line, and
    drops those beyond HTTP_REFUSALS_LOGGED_PER_S (counting them in the next one)."""

    def __init__(self) -> None:
        super().__init__()
        self._next_s = 0.0
        self._dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        now = time.monotonic()
        if now < self._next_s:
            self._dropped += 1
            return False
        self._next_s = now + 1 / HTTP_REFUSALS_LOGGED_PER_S
        reason = " ".join(str(exc).split())[:REFUSAL_SHOWN_CHARS_MAX]
        record.msg = "refused a malformed HTTP request from %s (%d more unlogged): %s"
        record.args = (record.args[0] if record.args else "?", self._dropped, reason)
        record.exc_info = record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        self._dropped = 0
        return True


http_log.addFilter(_HttpRefusals())


def error_response(request: BlobRequest | None, exc: BlobError, head: bool
                   ) -> web.Response:
    base = request.base_headers() if request is not None else {
        "x-ms-request-id": request_id(), "x-ms-version": DEFAULT_VERSION}
    headers = {**base, **exc.headers}
    if exc.status == 304:  # not an error: the service names no code
        return web.Response(status=exc.status, headers=headers)
    headers["x-ms-error-code"] = exc.code
    if head:
        response = web.Response(status=exc.status, headers=headers)
    else:
        body = blob_xml.error(exc.code, exc.message, headers["x-ms-request-id"],
                              datetime.now(UTC).isoformat())
        response = web.Response(status=exc.status, body=body, headers=headers,
                                content_type="application/xml")
    if exc.headers.get("Connection") == "close":
        response.force_close()  # what is left of the request is not read
    return response


def parse(http: web.Request) -> BlobRequest:
    path = http.raw_path.partition("?")[0]
    parts = path.lstrip("/").split("/", 2)
    account = unquote(parts[0]) if parts else ""
    container = unquote(parts[1]) if len(parts) > 1 else ""
    blob = unquote(parts[2]) if len(parts) > 2 else ""
    if not account:
        raise BlobError(400, "InvalidUri", "The URL names no account: use "
                        "http://HOST:PORT/ACCOUNT/CONTAINER/BLOB.")
    query: dict[str, str] = {}
    for name, value in http.query.items():
        if name.lower() in query:
            raise BlobError(400, "InvalidQueryParameterValue", f"The query parameter "
                            f"{names.shown_name(name)!r} is given more than once.",
                            {"x-ms-invalid-query-parameter-name": names.shown_name(name)})
        query[name.lower()] = value
    _check_signed_headers_once(http)
    return BlobRequest(http, request_id(), account, container, blob, query)


def _check_signed_headers_once(http: web.Request) -> None:
    """Each header Shared Key signs is given at most once (the module's rule)."""
    seen: set[str] = set()
    for name, _ in http.headers.items():  # every header given (iterating names: each once)
        lower = name.lower()
        if not (lower.startswith("x-ms-") or lower in blob_auth.SIGNED_HEADERS):
            continue
        if lower in seen:
            raise BlobError(400, "InvalidHeaderValue", f"The header {lower!r} is given more "
                            f"than once.", {"x-ms-invalid-header-name": lower})
        seen.add(lower)


async def authorize(request: BlobRequest, front_end: FrontEnd, skew_s: float) -> None:
    """Shared Key for everything, a service SAS for reads (Get Blob, its properties and
    metadata; List Blobs with `l`); refusals as the service's 401/403 — and, once the
    credentials hold, Moved for any request of an account secondary here (module
    docstring)."""
    http = request.http
    front_end.counters.requests += 1
    authorization = http.headers.get("Authorization")
    if "sig" in request.query:
        if request.blob and (http.method, request.comp) in SAS_READS:
            permission = "r"
        elif (request.container and not request.blob and request.comp == "list"
              and http.method == "GET"):  # List Blobs; never the account's List Containers
            permission = "l"
        else:
            raise BlobError(403, "AuthorizationPermissionMismatch",
                            "This request is not authorized to perform this operation using "
                            "this permission: a SAS grants reads here.")
        held = await _account(front_end, request.account, _peer(http))
        blob_auth.check_sas(request.query, held.keys if held else None, request.account,
                            request.container, request.blob, permission, datetime.now(UTC),
                            http.remote or "", secure=False)
        if held is not None:
            held.geo.check_serves(request.account, write=False, secondary_read=False)
        return
    if authorization is None:
        raise BlobError(401, "NoAuthenticationInformation",
                        "Server failed to authenticate the request. Please refer to the "
                        "information in the www-authenticate header.")
    headers: dict[str, str] = {}
    for name, value in http.headers.items():
        lower = name.lower()
        headers[lower] = f"{headers[lower]},{value}" if lower in headers else value
    held = await _account(front_end, request.account, _peer(http))
    blob_auth.check_shared_key(authorization, held.keys if held else None, request.account,
                               http.method, headers, http.raw_path.partition("?")[0],
                               list(http.query.items()), datetime.now(UTC), skew_s)
    if held is not None:
        held.geo.check_serves(request.account, write=http.method not in READ_METHODS,
                              secondary_read=False)


def _peer(http: web.Request) -> str:
    """The connection a request came on, as the account cache counts lookups per peer
    (frontend/auth.py: as gRPC's `context.peer()`, one per connection); "" if it is gone."""
    transport = http.transport
    peername = transport.get_extra_info("peername") if transport is not None else None
    if not isinstance(peername, tuple) or len(peername) < 2:
        return ""
    return f"http:{peername[0]}:{peername[1]}"


async def _account(front_end: FrontEnd, account: str, peer: str) -> Held | None:
    """The account's keys and role; None for no such account — and, without asking the
    account cache, for a name no account can have (it would only fill the cache). The
    lookup counts against `peer`."""
    try:
        names.check_account(account)
    except InvalidArgument:
        return None
    return await front_end.auth.account(account, peer)


async def _answer(http: web.Request, response: web.StreamResponse,
                  limits: FrontEndLimits) -> web.StreamResponse:
    """`response` sent, its body within the time write_within allows it."""
    if response.prepared:  # streamed by its handler, write by write
        return response
    body = response.body if isinstance(response, web.Response) else None
    await response.prepare(http)
    # A Response's body goes out in write_eof.
    await within(http, limits, len(body) if isinstance(body, bytes) else 0,
                  response.write_eof())
    return response


def make_app(front_end: FrontEnd, store: BlobStore, forward: BlobForwarder | None = None
             ) -> web.Application:
    """The aiohttp application of the endpoint (one catch-all route: Azure's operations are
    told apart by method, path depth and query, not by path patterns); with `forward`, a
    request refused with Moved is passed on to the account's primary (blob_forward.py)."""
    limits = store.limits
    skew_s = limits.blob_request_skew_ms / 1000

    async def handle(http: web.Request) -> web.StreamResponse:
        request: BlobRequest | None = None
        head = http.method == "HEAD"
        try:
            request = parse(http)
            try:
                await authorize(request, front_end, skew_s)
            except Moved as moved:
                if forward is None:
                    raise
                return await forward.forward(http, request.account, moved)
            handler = route(request)
            return await _answer(http, await handler(request, store, front_end), limits)
        except BlobError as exc:
            if exc.status in (401, 403):
                front_end.counters.refused_unauthenticated += 1
            return error_response(request, exc, head)
        except StampError as exc:
            return error_response(request, service_error(exc), head)
        except (web.HTTPException, ConnectionError):
            raise
        except Exception:
            log.exception("Azure Blob request %s %s", http.method, http.path)
            return error_response(request, BlobError(500, "InternalError",
                                                     "The server encountered an internal "
                                                     "error."), head)

    app = web.Application(client_max_size=limits.blob_append_bytes_max + BODY_SLACK_BYTES)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


async def start(front_end: FrontEnd, store: BlobStore, host: str, port: int,
                ssl_context: ssl.SSLContext | None = None,
                forward: BlobForwarder | None = None) -> tuple[web.AppRunner, str]:
    """Serve the endpoint on host:port (0: a free port), HTTPS with `ssl_context` (the front
    end's public certificate, common/tls.py), plain HTTP without; (its runner, host:port
    bound)."""
    runner = web.AppRunner(make_app(front_end, store, forward), access_log=None,
                           handle_signals=False, logger=http_log,
                           keepalive_timeout=store.limits.blob_headers_timeout_ms / 1000,
                           max_line_size=REQUEST_LINE_BYTES_MAX,
                           max_field_size=HEADER_FIELD_BYTES_MAX, max_headers=HEADERS_MAX)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True,
                       shutdown_timeout=SHUTDOWN_GRACE_S, ssl_context=ssl_context)
    await site.start()
    server = site._server  # aiohttp keeps the listening socket here
    bound = server.sockets[0].getsockname()[1] if server is not None else port
    return runner, f"{host}:{bound}"


def write_http_ready(proc_dir: str | Path, address: str) -> None:
    """Record the endpoint's address (and this pid) in the process directory."""
    path = Path(proc_dir) / HTTP_READY_FILE
    durable_fs.replace_file(path, json.dumps({"pid": os.getpid(),
                                              "address": address}).encode())


def read_http_ready(proc_dir: str | Path, pid: int) -> str | None:
    """The endpoint address process `pid` recorded (None: none recorded by it)."""
    try:
        record = json.loads((Path(proc_dir) / HTTP_READY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record["address"] if record.get("pid") == pid else None
