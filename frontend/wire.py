"""What a request to a front end signs and what it may do (DESIGN §5, §6): the one contract
the SDK (which signs) and the front end (which verifies) share.

Every request names its account and carries `Auth` (partition.proto): a timestamp and either
an HMAC-SHA256 made with one of the account's keys (frontend/signing.py) or a shared access
token (frontend/sas.py) in its place. What is signed:

- METHOD: the operation, `METHODS` (a Call's op, `Subscribe`, `Scan`, `ListLogs` or
  `ScanRanges`);
- RESOURCE: `/ACCOUNT/NAME` for an operation on one log or partition name, `/ACCOUNT` for a
  scan or a listing;
- REQUEST SHA-256: SHA-256 of the request message serialized deterministically, with `auth`
  cleared (and a Call request's `id`, which the SDK's session renumbers, set to 0): every
  other byte, records and values included, so no byte of a signed request can change without
  breaking its signature. The CRC32Cs the request carries are covered like any field; they
  are for corruption (the front end and the partition server check records against them),
  not for authentication: CRC32C is affine, so four chosen bytes forge any checksum.

A request holding fields this front end does not know (protobuf keeps unknown fields) is
refused with InvalidArgument before authentication: what it cannot read it cannot vouch for.
Deterministic serialization of what the front end parsed is what it hashes, so a request sent
in another (non-canonical) encoding of the same fields verifies, and one of other fields does
not.

What a replay inside the signature's window (`signing.CLOCK_SKEW_MAX_S`) can do: resend the
same request, no other. A mutation carrying a token (the SDK sets one on every append, put,
delete and batch) is answered from its first outcome and writes nothing again; a read or a
peek is answered again. See SECURITY.md.

A read a client means for the account's secondary stamp (issue 30, read access to the
secondary) says so in gRPC metadata, READ_FROM_KEY: READ_FROM_SECONDARY, on its Call stream
or its Subscribe, Scan or ScanRanges call (`secondary_read`, which the claim carries); it is
not signed, as it grants nothing: it only lets a secondary answer a read that may be behind
the primary (frontend/accounts.py GeoRole.check_serves). A front end of the account's
secondary answers any other read with Moved.

A shared access token is checked for the permission its method needs (`PERMISSION_OF`) on the
request's name (a scan's or listing's range must lie under the token's prefix: the front end
checks that with `sas_prefix`).

Contract of `authenticate`: returns only if the request is signed by (or carries a token of)
its own account, timely, and allowed; raises Unauthenticated, then PermissionDenied, as
signing.verify and sas.check do, never anything else for any bytes a client may send.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from google.protobuf.message import Message

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
SCAN_RANGES = "ScanRanges"
# gRPC metadata by which a client says its reads are for the secondary (module docstring).
READ_FROM_KEY = "stamp-read-from"
READ_FROM_SECONDARY = "secondary"
# The shared-access permission each method needs (sas.PERMISSIONS).
PERMISSION_OF: dict[str, str] = {
    "Append": "append", "Read": "read", "Peek": "read", "Get": "read", "Subscribe": "read",
    "Trim": "trim", "Seal": "seal", "Put": "write", "Delete": "write", "Batch": "write",
    "Scan": "scan", "ListLogs": "scan", "ScanRanges": "scan",
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
    request_sha256: bytes
    auth: pb.Auth
    secondary_read: bool = False  # a read its client means for the secondary (docstring)

    @property
    def resource(self) -> str:
        return signing.resource(self.account, self.name)


# ---- the signed view of each request --------------------------------------------------------

def secondary_read(metadata: Iterable[tuple[str, str | bytes]] | None) -> bool:
    """Whether a call's invocation metadata marks its reads as reads of the secondary."""
    return any(key == READ_FROM_KEY and value == READ_FROM_SECONDARY
               for key, value in metadata or ())


def call_claim(request: pb.Request, secondary_read: bool = False) -> Claim:
    """The claim of a Call request; InvalidArgument for an op a front end does not take or
    for unknown fields. Takes the credentials out of `request` (the claim holds them: a
    partition server never sees them), and leaves it otherwise as it was."""
    op = request.WhichOneof("op")
    method = METHODS.get(op or "")
    if method is None:
        raise InvalidArgument(f"a front end does not take {op or 'an empty'} requests on Call"
                              + ("; use the Scan RPC" if op == "scan" else ""))
    auth = _take_auth(request)
    # Hashed in place rather than from a copy: a copy would copy every record (the front end
    # takes tens of thousands of requests a second). The id is the session's, not signed.
    sdk_id = request.id
    request.id = 0
    try:
        digest = _digest(request)
    finally:
        request.id = sdk_id
    return Claim(method, request.account, request.pname, digest, auth, secondary_read)


def subscribe_claim(request: pb.SubscribeRequest, secondary_read: bool = False) -> Claim:
    view = pb.SubscribeRequest()
    view.CopyFrom(request)
    auth = _take_auth(view)
    return Claim(SUBSCRIBE, request.account, request.pname, _digest(view), auth,
                 secondary_read)


def scan_claim(request: fe_pb.ScanRequest, secondary_read: bool = False) -> Claim:
    view = fe_pb.ScanRequest()
    view.CopyFrom(request)
    auth = _take_auth(view)
    method = LIST_LOGS if request.mode == pb.SCAN_LOG_NAMES else SCAN
    return Claim(method, request.account, None, _digest(view), auth, secondary_read)


def scan_ranges_claim(request: fe_pb.ScanRangesRequest, secondary_read: bool = False
                      ) -> Claim:
    view = fe_pb.ScanRangesRequest()
    view.CopyFrom(request)
    auth = _take_auth(view)
    return Claim(SCAN_RANGES, request.account, None, _digest(view), auth, secondary_read)


def _take_auth(message: pb.Request | pb.SubscribeRequest | fe_pb.ScanRequest
               | fe_pb.ScanRangesRequest) -> pb.Auth:
    """A copy of `message`'s credentials, cleared from it; InvalidArgument if they carry
    unknown fields."""
    auth = pb.Auth()
    auth.CopyFrom(message.auth)
    message.ClearField("auth")
    _refuse_unknown_fields(auth, auth.ByteSize())
    return auth


def _digest(message: Message) -> bytes:
    """SHA-256 of `message` serialized deterministically (its credentials already out);
    InvalidArgument if it carries unknown fields, at any depth."""
    data = message.SerializeToString(deterministic=True)
    _refuse_unknown_fields(message, len(data))
    return signing.digest_of(data)


def _refuse_unknown_fields(message: Message, size: int) -> None:
    """InvalidArgument if `message` (of `size` bytes serialized) holds fields unknown to this
    build. Dropping them (in C, at every depth) and measuring again is the cheap test; what is
    refused is not forwarded anyway."""
    message.DiscardUnknownFields()
    if message.ByteSize() != size:
        raise InvalidArgument("the request holds fields this front end does not know "
                              "(a newer SDK?); they are refused rather than passed on "
                              "unverified")


# ---- the SDK's side -------------------------------------------------------------------------

def sign(claim: Claim, credentials: Credentials, now_s: float) -> pb.Auth:
    """The Auth to set on the request `claim` was made of, at time `now_s`."""
    timestamp_ms = int(now_s * 1000)
    if credentials.sas is not None:
        return pb.Auth(account=credentials.account, timestamp_ms=timestamp_ms,
                       sas=credentials.sas)
    assert credentials.key is not None
    signed = signing.sign(credentials.key, credentials.account, claim.method, claim.resource,
                          claim.request_sha256, now_s)
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
                                       claim.resource, claim.request_sha256, timestamp_ms)


def sign_subscribe(request: pb.SubscribeRequest, credentials: Credentials, now_s: float
                   ) -> None:
    request.auth.CopyFrom(sign(subscribe_claim(request), credentials, now_s))


def sign_scan(request: fe_pb.ScanRequest, credentials: Credentials, now_s: float) -> None:
    request.auth.CopyFrom(sign(scan_claim(request), credentials, now_s))


def sign_scan_ranges(request: fe_pb.ScanRangesRequest, credentials: Credentials,
                     now_s: float) -> None:
    request.auth.CopyFrom(sign(scan_ranges_claim(request), credentials, now_s))


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
                          claim.request_sha256, auth.signature or None, keys_of=keys_of,
                          now_s=now_s)
    return None


def sas_prefix(token: sas.SasToken | None) -> str:
    """The name prefix a request's range must stay under: the token's, '' for a key."""
    return "" if token is None else token.prefix
