"""Signed requests (issue 16, DESIGN §5): every request the SDK sends names its account and
carries a timestamp and an HMAC-SHA256, made with one of the account's two keys, over the
request's canonical string. The front end verifies it before doing anything else.

Pure: no I/O, no clock. The caller passes the time (`now_s`, seconds since the epoch, from
an injected Clock's `wall()`) and a function giving an account's current keys (the account
store's cache, frontend/accounts.py).

The canonical string (UTF-8), one field a line:

    stamp-hmac-sha256-v2
    ACCOUNT           the account the signer claims to be
    METHOD            the RPC, e.g. Append
    RESOURCE          /ACCOUNT[/NAME], the resource the request acts on
    TIMESTAMP         whole milliseconds since the epoch
    REQUEST SHA-256   64 lowercase hex digits: SHA-256 of every byte of the request but its
                      credentials (frontend/wire.py says which bytes), records and values
                      included

No field holds a newline (they are refused), so the string is injective. The request enters
through a SHA-256, not a CRC: a CRC32C is affine (four chosen bytes anywhere give any
checksum), so a signature over one let a captured request be rewritten into another with the
same CRC (issue 28). CRC32Cs still travel with every record and value, for corruption only.

Contract of `verify`, in this order, so no authorization answer leaks to an unauthenticated
caller:
1. no signature, an unknown account, or a signature made with neither of its keys ->
   Unauthenticated;
2. a timestamp more than `CLOCK_SKEW_MAX_S` from `now_s`, either way -> Unauthenticated,
   saying how far off it is;
3. a resource of another account than the signer's -> PermissionDenied.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from common.errors import InvalidArgument, PermissionDenied, Unauthenticated
from frontend import names

SCHEME = "stamp-hmac-sha256-v2"
CLOCK_SKEW_MAX_S = 300.0  # 5 minutes, Azure's SharedKey window
FIELD_CHARS_MAX = 1024
SIGNATURE_BYTES = 32
DIGEST_BYTES = 32  # the SHA-256 of the request
# The (account, method, resource) heads found well-formed, and the owners of resources,
# remembered: the same few come by thousands a second, to the SDK and the front end both.
# Heads are checked before the signature, so a stranger chooses what is remembered: only
# heads up to HEAD_CACHED_CHARS_MAX are, which bounds the cache at a few MB.
HEADS_CACHED_MAX = 16_384
HEAD_CACHED_CHARS_MAX = 192
# HMAC states keyed and ready (ipad/opad hashed), one per key in use: an account has two keys
# and a front end serves a bounded number of accounts at once (frontend/accounts.py).
KEYED_MACS_CACHED_MAX = 4096
SHA256_BLOCK_BYTES = 64  # HMAC pads the key to the hash's block
# A name echoed in an error is cut to this many characters: a stranger's 64 MiB name must not
# come back (nor sit in a log) whole.
SHOWN_CHARS_MAX = 64


@dataclass(frozen=True)
class SignedRequest:
    """What a request carries for authentication (gRPC metadata, or REST headers)."""

    account: str
    method: str
    resource: str
    timestamp_ms: int
    request_sha256: bytes
    signature: bytes | None


def resource(account: str, name: str | None = None) -> str:
    """The resource string of an account (`/acct`) or of one of its names (`/acct/name`)."""
    return f"/{account}" if name is None else f"/{account}/{name}"


@functools.lru_cache(maxsize=HEADS_CACHED_MAX)
def resource_account(resource_text: str) -> str:
    """The account a resource string belongs to (its first path segment)."""
    if not resource_text.startswith("/"):
        raise InvalidArgument(f"resource {resource_text!r} does not start with '/'")
    return resource_text[1:].split("/", 1)[0]


def digest_of(data: bytes) -> bytes:
    """The SHA-256 a request's canonical string carries, of the request's signed bytes."""
    return hashlib.sha256(data).digest()


def canonical_string(account: str, method: str, resource_text: str, timestamp_ms: int,
                     request_sha256: bytes) -> bytes:
    head = (_cached_head(account, method, resource_text)
            if len(account) + len(method) + len(resource_text) <= HEAD_CACHED_CHARS_MAX
            else _canonical_head(account, method, resource_text))
    if len(request_sha256) != DIGEST_BYTES:
        raise InvalidArgument(f"a request digest has {DIGEST_BYTES} bytes, not "
                              f"{len(request_sha256)}")
    if timestamp_ms < 0:
        raise InvalidArgument(f"timestamp {timestamp_ms} ms is before the epoch")
    return head + b"%d\n" % timestamp_ms + request_sha256.hex().encode()


def _canonical_head(account: str, method: str, resource_text: str) -> bytes:
    """The first four lines of a canonical string, each ended by a newline; InvalidArgument
    for a field that is empty, too long or holds a line break (not remembered)."""
    for what, text in (("account", account), ("method", method), ("resource", resource_text)):
        if not text or len(text) > FIELD_CHARS_MAX or "\n" in text or "\r" in text:
            raise InvalidArgument(f"a signed request's {what} is 1 to {FIELD_CHARS_MAX} "
                                  f"characters without line breaks, not {text[:64]!r}")
    return "\n".join([SCHEME, account, method, resource_text, ""]).encode()


_cached_head = functools.lru_cache(maxsize=HEADS_CACHED_MAX)(_canonical_head)


def _mac(key: bytes, canonical: bytes) -> bytes:
    """HMAC-SHA256 (RFC 2104) of `canonical` under `key`, from the key's two SHA-256 states
    hashed ahead (the padded key XOR ipad, and XOR opad), copied per message. Why not
    hmac.digest: it keys a new HMAC every time (and OpenSSL 3 looks the digest up, under
    locks), twice as slow; nor hmac.HMAC.copy: a Python-level copy, a quarter slower. The
    front end verifies every request with it, the SDK signs every request. Equal to
    hmac.digest(key, canonical, "sha256") (tests/unit/test_fe_signing.py)."""
    inner_ready, outer_ready = _keyed(key)
    inner = inner_ready.copy()
    inner.update(canonical)
    outer = outer_ready.copy()
    outer.update(inner.digest())
    return outer.digest()


@functools.lru_cache(maxsize=KEYED_MACS_CACHED_MAX)
def _keyed(key: bytes) -> tuple[Any, Any]:
    """The SHA-256 states after absorbing the padded key XOR ipad and XOR opad."""
    if len(key) > SHA256_BLOCK_BYTES:
        key = hashlib.sha256(key).digest()
    padded = key.ljust(SHA256_BLOCK_BYTES, b"\0")
    return (hashlib.sha256(bytes(b ^ 0x36 for b in padded)),
            hashlib.sha256(bytes(b ^ 0x5C for b in padded)))


def sign(key: bytes, account: str, method: str, resource_text: str, request_sha256: bytes,
         now_s: float) -> SignedRequest:
    """The request signed with `key` (either of the account's keys) at time `now_s`."""
    timestamp_ms = int(now_s * 1000)
    return SignedRequest(account, method, resource_text, timestamp_ms, request_sha256,
                         signature(key, account, method, resource_text, request_sha256,
                                   timestamp_ms))


def signature(key: bytes, account: str, method: str, resource_text: str,
              request_sha256: bytes, timestamp_ms: int) -> bytes:
    """`sign`'s signature alone, for a request stamped `timestamp_ms` (the SDK writes it
    straight into the request it sends)."""
    names.check_account(account)
    return _mac(key, canonical_string(account, method, resource_text, timestamp_ms,
                                      request_sha256))


def verify(request: SignedRequest, *, keys_of: Callable[[str], Sequence[bytes] | None],
           now_s: float) -> None:
    """Return if `request` is signed by its account with a current key, timely and on that
    account's own resource; raise as the module's contract says otherwise.

    `request.request_sha256` must be the digest the front end computed of the request it
    actually received, never one the caller merely claimed."""
    verify_fields(request.account, request.method, request.resource, request.timestamp_ms,
                  request.request_sha256, request.signature, keys_of=keys_of, now_s=now_s)


def verify_fields(account: str, method: str, resource_text: str, timestamp_ms: int,
                  request_sha256: bytes, signature: bytes | None, *,
                  keys_of: Callable[[str], Sequence[bytes] | None], now_s: float) -> None:
    """`verify` of a SignedRequest with these fields, without making one (the front end
    verifies every request it takes)."""
    if not signature:
        raise Unauthenticated("request is not signed (no signature)")
    try:
        # First: a field too long or malformed is refused before any key is looked up.
        canonical = canonical_string(account, method, resource_text, timestamp_ms,
                                     request_sha256)
    except InvalidArgument as exc:
        raise Unauthenticated(f"malformed signed request: {exc}") from None
    keys = keys_of(account)
    if keys is None:
        # Said as a bad signature, not "no such account", so unsigned probing cannot list
        # the accounts.
        raise Unauthenticated(f"bad signature for account {shown(account)}")
    # Each comparison is constant-time (compare_digest): the time taken never says how much
    # of a signature matched. The keys are tried in turn and the first match ends it, so a
    # request signed with the first key costs one HMAC, not two (the front end verifies
    # every request); the time then says only which of its own account's keys the signer
    # used, which the signer knows, and a refused request costs the same whatever it holds.
    if not any(hmac.compare_digest(_mac(key, canonical), signature) for key in keys):
        raise Unauthenticated(f"bad signature for account {shown(account)} (made with "
                              f"neither of its current keys, or the request was altered)")
    skew_s = timestamp_ms / 1000 - now_s
    if abs(skew_s) > CLOCK_SKEW_MAX_S:
        raise Unauthenticated(f"request timestamp is {abs(skew_s):.0f} s "
                              f"{'ahead of' if skew_s > 0 else 'behind'} the server's clock; "
                              f"at most {CLOCK_SKEW_MAX_S:.0f} s either way is accepted")
    owner = resource_account(resource_text)
    if owner != account:
        raise PermissionDenied(f"account {shown(account)} may not act on {shown(owner)}'s "
                               f"resource {shown(resource_text)}")


def shown(text: str) -> str:
    """`text` as an error message quotes it: repr, cut to SHOWN_CHARS_MAX characters."""
    if len(text) <= SHOWN_CHARS_MAX:
        return repr(text)
    return f"{text[:SHOWN_CHARS_MAX]!r}... ({len(text)} characters)"


def encode_signature(signature: bytes) -> str:
    """Base64 text of a signature, as it travels in metadata or a header."""
    return base64.b64encode(signature).decode()


def decode_signature(text: str) -> bytes:
    """The signature bytes of `encode_signature`'s text; Unauthenticated if malformed."""
    try:
        signature = base64.b64decode(text, validate=True)
    except ValueError:
        raise Unauthenticated("request signature is not base64") from None
    if len(signature) != SIGNATURE_BYTES:
        raise Unauthenticated(f"request signature has {len(signature)} bytes, not "
                              f"{SIGNATURE_BYTES}")
    return signature
