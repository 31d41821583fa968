"""What a request to a front end signs and what it may do (DESIGN §5, §6): the one contract
the SDK (which signs) and the front end (which verifies) share.

Every request names its account and carries `Auth` (partition.proto): a timestamp and either
an HMAC-SHA256 made with one of the account's keys (frontend/signing.py) or a shared access
token (frontend/sas.py) in its place. What is signed:

- METHOD: the operation, `METHODS` (a Call's op, `Subscribe`, `Scan` or `ListLogs`);
- RESOURCE: `/ACCOUNT/NAME` for an operation on one log or partition name, `/ACCOUNT` for a
  scan or a listing;
- PAYLOAD CRC32C: CRC32C of the request message serialized deterministically, with `id`
  and `auth` cleared and every bulk byte string (an append's records, a put's or a batch
  item's value) emptied. Those enter through their own CRC32C fields, which travel with them
  end to end and which the front end checks against the bytes it received
  (`verify_payload`), so one changed byte anywhere in a request breaks either a CRC or the
  signature, and the bulk is not serialized twice.

A shared access token is checked for the permission its method needs (`PERMISSION_OF`) on the
request's name (a scan's or listing's range must lie under the token's prefix: the front end
checks that with `sas_prefix`).

Contract of `authenticate`: returns only if the request is signed by (or carries a token of)
its own account, timely, and allowed; raises Unauthenticated, then PermissionDenied, as
signing.verify and sas.check do, never anything else for any bytes a client may send.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from common.checksums import crc32c
from common.errors import InvalidArgument, Unauthenticated
from common.proto import frontend_pb2 as fe_pb
from common.proto import partition_pb2 as pb
from frontend import sas, signing

# A Call's op (the `op` oneof) -> the method it signs as.
METHODS: dict[str, str] = {
    "append": "Append", "read": "Read", "trim": "Trim", "seal": "Seal", "peek": "Peek",
    "put": "Put", "get": "Get", "delete": "Delete", "batch": "Batch",
}
SUBSCRIBE = "Subscribe"
SCAN = "Scan"
LIST_LOGS = "ListLogs"
# The shared-access permission each method needs (sas.PERMISSIONS).
PERMISSION_OF: dict[str, str] = {
    "Append": "append", "Read": "read", "Peek": "read", "Get": "read", "Subscribe": "read",
    "Trim": "trim", "Seal": "seal", "Put": "write", "Delete": "write", "Batch": "write",
    "Scan": "scan", "ListLogs": "scan",
}


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


class Claim(NamedTuple):
    """What a request says about itself, for `authenticate` (a tuple: one is made per
    request, and a frozen dataclass costs twice as much to make)."""

    method: str
    account: str
    name: str | None  # the log or partition name; None for an account-wide request
    payload_crc32c: int
    auth: pb.Auth

    @property
    def resource(self) -> str:
        return signing.resource(self.account, self.name)


# ---- the signed view of each request --------------------------------------------------------

def call_claim(request: pb.Request) -> Claim:
    """The claim of a Call request; InvalidArgument for an op a front end does not take."""
    op = request.WhichOneof("op")
    method = METHODS.get(op or "")
    if method is None:
        raise InvalidArgument(f"a front end does not take {op or 'an empty'} requests on Call"
                              + ("; use the Scan RPC" if op == "scan" else ""))
    view = pb.Request()
    view.CopyFrom(request)
    view.ClearField("auth")
    view.id = 0
    if op == "append":
        del view.append.records[:]
    elif op == "put":
        view.put.value = b""
    elif op == "batch":
        for item in view.batch.items:
            item.value = b""
    return Claim(method, request.account, request.pname, _crc(view), request.auth)


def subscribe_claim(request: pb.SubscribeRequest) -> Claim:
    view = pb.SubscribeRequest()
    view.CopyFrom(request)
    view.ClearField("auth")
    return Claim(SUBSCRIBE, request.account, request.pname, _crc(view), request.auth)


def scan_claim(request: fe_pb.ScanRequest) -> Claim:
    view = fe_pb.ScanRequest()
    view.CopyFrom(request)
    view.ClearField("auth")
    method = LIST_LOGS if request.mode == pb.SCAN_LOG_NAMES else SCAN
    return Claim(method, request.account, None, _crc(view), request.auth)


def _crc(view: pb.Request | pb.SubscribeRequest | fe_pb.ScanRequest) -> int:
    return crc32c(view.SerializeToString(deterministic=True))


# ---- the SDK's side -------------------------------------------------------------------------

def sign(claim: Claim, credentials: Credentials, now_s: float) -> pb.Auth:
    """The Auth to set on the request `claim` was made of, at time `now_s`."""
    timestamp_ms = int(now_s * 1000)
    if credentials.sas is not None:
        return pb.Auth(account=credentials.account, timestamp_ms=timestamp_ms,
                       sas=credentials.sas)
    assert credentials.key is not None
    signed = signing.sign(credentials.key, credentials.account, claim.method, claim.resource,
                          claim.payload_crc32c, now_s)
    return pb.Auth(account=credentials.account, timestamp_ms=signed.timestamp_ms,
                   signature=signed.signature or b"")


def sign_call(request: pb.Request, credentials: Credentials, now_s: float) -> None:
    """`sign`, written straight into the request's `auth` (no Auth message to copy: the SDK
    signs every request it sends)."""
    claim = call_claim(request)
    auth = request.auth
    auth.Clear()
    auth.account = credentials.account
    timestamp_ms = auth.timestamp_ms = int(now_s * 1000)
    if credentials.sas is not None:
        auth.sas = credentials.sas
        return
    assert credentials.key is not None
    auth.signature = signing.signature(credentials.key, credentials.account, claim.method,
                                       claim.resource, claim.payload_crc32c, timestamp_ms)


def sign_subscribe(request: pb.SubscribeRequest, credentials: Credentials, now_s: float
                   ) -> None:
    request.auth.CopyFrom(sign(subscribe_claim(request), credentials, now_s))


def sign_scan(request: fe_pb.ScanRequest, credentials: Credentials, now_s: float) -> None:
    request.auth.CopyFrom(sign(scan_claim(request), credentials, now_s))


# ---- the front end's side -------------------------------------------------------------------

def authenticate(claim: Claim, *, keys_of: Callable[[str], Sequence[bytes] | None],
                 now_s: float) -> sas.SasToken | None:
    """Check the claim's credentials (module contract); the token it carried, if any (the
    caller checks a scan's range against its prefix with `sas_prefix`)."""
    auth = claim.auth
    if not auth.account:
        raise Unauthenticated("request names no account in its credentials (not signed)")
    if auth.sas:
        token = sas.check(auth.sas, account=claim.account, permission=PERMISSION_OF[
            claim.method], name=claim.name, now_s=now_s, keys_of=keys_of)
        if auth.account != token.account:
            raise Unauthenticated(f"credentials name account {auth.account!r} but carry a "
                                  f"token of {token.account!r}")
        return token
    signing.verify_fields(auth.account, claim.method, claim.resource, auth.timestamp_ms,
                          claim.payload_crc32c, auth.signature or None, keys_of=keys_of,
                          now_s=now_s)
    return None


def sas_prefix(token: sas.SasToken | None) -> str:
    """The name prefix a request's range must stay under: the token's, '' for a key."""
    return "" if token is None else token.prefix
