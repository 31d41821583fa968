"""What a request to a front end signs (DESIGN §5, §6), the SDK's side: the contract the SDK
(which signs) and a front end (which verifies, with its own copy: frontend/wire.py in the
server) share.

Every request names its account and carries `Auth` (stamp.frontend.v1): a timestamp and
either an HMAC-SHA256 made with one of the account's keys (stampsdk/signing.py) or a shared
access token (stampsdk/sas.py) in its place. What is signed:

- METHOD: the operation, `METHODS` (a Call's op, `Subscribe`, `Scan`, `ListLogs` or
  `ScanRanges`);
- RESOURCE: `/ACCOUNT/NAME` for an operation on one log or partition name, `/ACCOUNT` for a
  scan or a listing;
- REQUEST SHA-256: SHA-256 of the request message serialized deterministically, with `auth`
  cleared (and a Call request's `id`, which the SDK's session renumbers, set to 0): every
  other byte, records and values included.

Requests are signed at send time, so each attempt of a retried call carries a fresh
timestamp.

A client reading from the account's secondary on purpose (`ReadFrom=secondary`) says so in
the gRPC metadata of its reads' Call stream and of its Subscribe, Scan and ScanRanges calls,
`READ_FROM_METADATA` (not signed: it grants nothing). A front end of the account's secondary
answers only such reads, and any other request with Moved: a read not so marked is meant for
the primary, and must see every write acknowledged before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stampsdk import signing
from stampsdk._proto import frontend_v1_pb2 as v1
from stampsdk.errors import InvalidArgument

# A Call's op (the `op` oneof) -> the method it signs as.
METHODS: dict[str, str] = {
    "append": "Append", "read": "Read", "trim": "Trim", "seal": "Seal", "peek": "Peek",
    "put": "Put", "get": "Get", "delete": "Delete", "batch": "Batch",
}
SUBSCRIBE = "Subscribe"
SCAN = "Scan"
LIST_LOGS = "ListLogs"
SCAN_RANGES = "ScanRanges"
# The metadata of the calls of a client reading from the secondary (module docstring).
READ_FROM_METADATA = (("stamp-read-from", "secondary"),)


@dataclass(frozen=True)
class Credentials:
    """Who the SDK acts as: an account and one of its keys, or a shared access token."""

    account: str
    key: bytes | None = None
    sas: str | None = None

    def __post_init__(self) -> None:
        if (self.key is None) == (self.sas is None):
            raise InvalidArgument("credentials are an account key or a shared access token, "
                                  "exactly one")

    def __repr__(self) -> str:  # never print a secret into a log by accident
        return f"Credentials(account={self.account!r}, <secret>)"


def _digest(message: Any) -> bytes:
    """SHA-256 of `message` serialized deterministically (its credentials already out)."""
    return signing.digest_of(message.SerializeToString(deterministic=True))


def _write_auth(auth: Any, method: str, resource: str, digest: bytes,
                credentials: Credentials, now_s: float) -> None:
    """Fill `auth` (cleared) with the credentials for (method, resource, digest) at `now_s`."""
    auth.Clear()
    auth.account = credentials.account
    timestamp_ms = auth.timestamp_ms = int(now_s * 1000)
    if credentials.sas is not None:
        auth.sas = credentials.sas
        return
    assert credentials.key is not None
    auth.signature = signing.signature(credentials.key, credentials.account, method, resource,
                                       digest, timestamp_ms)


def sign_call(request: v1.Request, credentials: Credentials, now_s: float) -> None:
    """Sign a Call request in place (its `auth` replaced); InvalidArgument for an op a front
    end does not take on Call."""
    op = request.WhichOneof("op")
    method = METHODS.get(op or "")
    if method is None:
        raise InvalidArgument(f"a front end does not take {op or 'an empty'} requests on Call")
    # Hashed in place rather than from a copy: a copy would copy every record. The id is
    # the session's, not signed.
    request.ClearField("auth")
    sdk_id, request.id = request.id, 0
    try:
        digest = _digest(request)
    finally:
        request.id = sdk_id
    _write_auth(request.auth, method, signing.resource(request.account, request.pname),
                digest, credentials, now_s)


def sign_subscribe(request: v1.SubscribeRequest, credentials: Credentials, now_s: float
                   ) -> None:
    """Sign a Subscribe request in place (its `auth` replaced), as method SUBSCRIBE on
    /ACCOUNT/LOG."""
    request.ClearField("auth")
    _write_auth(request.auth, SUBSCRIBE, signing.resource(request.account, request.pname),
                _digest(request), credentials, now_s)


def sign_scan(request: v1.ScanRequest, credentials: Credentials, now_s: float) -> None:
    """Sign a Scan request in place (its `auth` replaced), as method LIST_LOGS for a
    log-name scan, else SCAN, on /ACCOUNT."""
    request.ClearField("auth")
    method = LIST_LOGS if request.mode == v1.SCAN_LOG_NAMES else SCAN
    _write_auth(request.auth, method, signing.resource(request.account), _digest(request),
                credentials, now_s)


def sign_scan_ranges(request: v1.ScanRangesRequest, credentials: Credentials,
                     now_s: float) -> None:
    """Sign a ScanRanges request in place (its `auth` replaced), as method SCAN_RANGES on
    /ACCOUNT."""
    request.ClearField("auth")
    _write_auth(request.auth, SCAN_RANGES, signing.resource(request.account),
                _digest(request), credentials, now_s)
