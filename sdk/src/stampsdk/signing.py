"""Signed requests, the SDK's side (DESIGN §5): every request names its account and carries
a timestamp and an HMAC-SHA256, made with one of the account's two keys, over the request's
canonical string. The front end verifies it before doing anything else (its own copy of
this contract, frontend/signing.py in the server; a test signs here and verifies there).

Pure: no I/O, no clock; the caller passes the time (`now_s`, seconds since the epoch).

The canonical string (UTF-8), one field a line:

    stamp-hmac-sha256-v2
    ACCOUNT           the account the signer claims to be
    METHOD            the RPC, e.g. Append
    RESOURCE          /ACCOUNT[/NAME], the resource the request acts on
    TIMESTAMP         whole milliseconds since the epoch
    REQUEST SHA-256   64 lowercase hex digits: SHA-256 of every byte of the request but its
                      credentials (stampsdk/wire.py says which bytes), records and values
                      included

No field holds a newline (they are refused), so the string is injective. A front end
refuses a timestamp more than `CLOCK_SKEW_MAX_S` from its own clock.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Any

from stampsdk import names
from stampsdk.errors import InvalidArgument

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


def digest_of(data: bytes) -> bytes:
    """The SHA-256 a request's canonical string carries, of the request's signed bytes."""
    return hashlib.sha256(data).digest()


def canonical_string(account: str, method: str, resource_text: str, timestamp_ms: int,
                     request_sha256: bytes) -> bytes:
    """The bytes a signature covers (module docstring); InvalidArgument for a field that
    is empty, longer than FIELD_CHARS_MAX or holds a line break, a digest that is not
    DIGEST_BYTES long, or a timestamp before the epoch."""
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
