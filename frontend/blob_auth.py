"""Authorization of the Azure Blob REST endpoint (DESIGN §6), exactly as the service signs:
Shared Key ("Authorize with Shared Key", Blob service, version 2009-09-19 and later) and
service SAS tokens (version 2020-12-06 and later) for reads.

Shared Key: `Authorization: SharedKey ACCOUNT:BASE64(HMAC-SHA256(key, StringToSign))` with

    VERB \\n Content-Encoding \\n Content-Language \\n Content-Length (empty when 0) \\n
    Content-MD5 \\n Content-Type \\n Date \\n If-Modified-Since \\n If-Match \\n If-None-Match \\n
    If-Unmodified-Since \\n Range \\n CanonicalizedHeaders CanonicalizedResource

CanonicalizedHeaders: every `x-ms-` header, name lowercased, as `name:value\\n`, in the
service's own order (`compare_header_names`: a two-level collation in which hyphens weigh
nothing at first, not plain byte order). CanonicalizedResource: `/ACCOUNT` then the URL's
encoded path — which in a path-style URL starts with the account again — then, for each
query parameter by lowercased name, `\\nname:value[,value...]` with values decoded and sorted.

The key is an account key of frontend/accounts.py; the connection string carries it in
base64, as Azure's do. Contract of both checks: return, or raise BlobError 403
AuthenticationFailed (or AuthorizationPermissionMismatch) whose message says what is wrong.

What a refusal does not say: whether the account exists. `keys` None (no such account, or a
name no account can have) is refused exactly as a bad signature is — same checks in the same
order, an HMAC computed with a key nobody holds, the same message — as the gRPC path does
(frontend/wire.py). Signatures are compared as bytes (a header or query value may hold any
character); names a refusal echoes are cut (frontend/names.shown_name), and so is the string
to sign it shows (STRING_TO_SIGN_SHOWN_CHARS_MAX).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from urllib.parse import unquote

from frontend.blob_model import BlobError
from frontend.names import shown_name

SIGNED_HEADERS = ("content-encoding", "content-language", "content-length", "content-md5",
                  "content-type", "date", "if-modified-since", "if-match", "if-none-match",
                  "if-unmodified-since", "range")
SAS_VERSION_MIN = "2020-12-06"
# The service's collation of header names (ASCII), as two levels of weights: level 0 first
# (0: the character is skipped, as hyphens are), then level 4 (hyphens, apostrophes).
_LEVEL0 = (
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x71C, 0x0, 0x71F,
    0x721, 0x723, 0x725, 0x0, 0x0, 0x0, 0x72D, 0x803, 0x0, 0x0, 0x733, 0x0,
    0xD03, 0xD1A, 0xD1C, 0xD1E, 0xD20, 0xD22, 0xD24, 0xD26, 0xD28, 0xD2A, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x0, 0x0, 0xE02, 0xE09, 0xE0A, 0xE1A, 0xE21, 0xE23, 0xE25,
    0xE2C, 0xE32, 0xE35, 0xE36, 0xE48, 0xE51, 0xE70, 0xE7C, 0xE7E, 0xE89, 0xE8A, 0xE91,
    0xE99, 0xE9F, 0xEA2, 0xEA4, 0xEA6, 0xEA7, 0xEA9, 0x0, 0x0, 0x0, 0x743, 0x744,
    0x748, 0xE02, 0xE09, 0xE0A, 0xE1A, 0xE21, 0xE23, 0xE25, 0xE2C, 0xE32, 0xE35, 0xE36,
    0xE48, 0xE51, 0xE70, 0xE7C, 0xE7E, 0xE89, 0xE8A, 0xE91, 0xE99, 0xE9F, 0xEA2, 0xEA4,
    0xEA6, 0xEA7, 0xEA9, 0x0, 0x74C, 0x0, 0x750, 0x0,
)
_LEVEL4 = (
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x8012, 0x0, 0x0, 0x0, 0x0, 0x0, 0x8212, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
)
Keys = Sequence[bytes]
# Every request names its x-ms- headers and its date, and they repeat: an SDK sends the same
# headers on every request, and many requests share a second. Their order and the parsed
# date are remembered (bounded), so a request pays for neither twice.
HEADER_ORDERS_CACHED_MAX = 256
DATES_CACHED_MAX = 256
# A bad signature's message shows the string the server signed (as the service does, to help
# a client find its mistake), cut to this: the request's headers are 2 MiB at most.
STRING_TO_SIGN_SHOWN_CHARS_MAX = 2048
# The keys an unknown account is checked against: no one holds them, so nothing matches, and
# the refusal costs and says what a bad signature of a real account does.
_NOBODYS_KEYS = (secrets.token_bytes(32), secrets.token_bytes(32))


def _denied(message: str) -> BlobError:
    return BlobError(403, "AuthenticationFailed",
                     "Server failed to authenticate the request. Make sure the value of "
                     "Authorization header is formed correctly including the signature. "
                     + message)


def compare_header_names(left: str, right: str) -> int:
    """The service's order of two x-ms- header names (<0, 0, >0): level 0 weights, skipping
    characters that weigh nothing; on a tie, level 4, then the shorter name first."""
    tables = (_LEVEL0, _LEVEL4)
    level, i, j = 0, 0, 0
    while level < len(tables):
        if level == len(tables) - 1 and i != j:
            return -1 if i > j else 1
        w1 = tables[level][ord(left[i])] if i < len(left) else 0x1
        w2 = tables[level][ord(right[j])] if j < len(right) else 0x1
        if w1 == 0x1 and w2 == 0x1:
            i = j = 0
            level += 1
        elif w1 == w2:
            i += 1
            j += 1
        elif w1 == 0:
            i += 1
        elif w2 == 0:
            j += 1
        else:
            return -1 if w1 < w2 else 1
    return 0


@functools.lru_cache(maxsize=HEADER_ORDERS_CACHED_MAX)
def canonical_order(names: tuple[str, ...]) -> tuple[str, ...]:
    """`names` (lowercased x-ms- header names) in the service's order."""
    return tuple(sorted(names, key=functools.cmp_to_key(compare_header_names)))


@functools.lru_cache(maxsize=DATES_CACHED_MAX)
def _parse_date(text: str) -> datetime | None:
    """An RFC 1123 date (None: not one)."""
    try:
        return parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None


def string_to_sign(method: str, headers: Mapping[str, str], account: str, raw_path: str,
                   query: Sequence[tuple[str, str]]) -> str:
    """The Shared Key string to sign of a request; `headers` keyed by lowercased name,
    `raw_path` as sent (percent-encoded), `query` the decoded (name, value) pairs."""
    lines = [method.upper()]
    for name in SIGNED_HEADERS:
        value = headers.get(name, "")
        if name == "content-length" and value == "0":
            value = ""
        lines.append(value)
    text = "\n".join(lines) + "\n"
    ms = canonical_order(tuple(n for n in headers if n.startswith("x-ms-")))
    text += "".join(f"{n}:{headers[n]}\n" for n in ms)
    text += f"/{account}{raw_path}"
    grouped: dict[str, list[str]] = {}
    for name, value in query:
        grouped.setdefault(name.lower(), []).append(value)
    for name in sorted(grouped):
        text += f"\n{name}:{','.join(sorted(grouped[name]))}"
    return text


def sign(key: bytes, text: str) -> str:
    """The signature of `text` (its UTF-8 bytes; a header value that was not UTF-8 arrives
    surrogate-escaped and is signed as the bytes sent)."""
    digest = hmac.new(key, _bytes(text), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _matches(keys: Keys | None, text: str, signature: str) -> bool:
    """Whether `signature` is that of `text` under one of `keys` (None: no account), compared
    as bytes in constant time: any characters, never an exception."""
    sent = _bytes(signature)
    found = False
    for key in keys if keys is not None else _NOBODYS_KEYS:
        found |= hmac.compare_digest(sign(key, text).encode(), sent)
    return found and keys is not None


def check_shared_key(authorization: str, keys: Keys | None, account: str, method: str,
                     headers: Mapping[str, str], raw_path: str,
                     query: Sequence[tuple[str, str]], now: datetime, skew_s: float) -> None:
    """A Shared Key request of `account` (the URL's), signed with one of `keys`."""
    scheme, _, credential = authorization.partition(" ")
    signer, _, signature = credential.strip().partition(":")
    if scheme != "SharedKey" or not signature:
        raise _denied("The Authorization header is not 'SharedKey ACCOUNT:SIGNATURE'.")
    if signer != account:
        raise _denied(f"The request is signed by account {shown_name(signer)!r}, not the "
                      f"account of the URL.")
    dated = headers.get("x-ms-date") or headers.get("date")
    if not dated:
        raise _denied("The request has neither x-ms-date nor Date.")
    when = _parse_date(dated)
    if when is None:
        raise _denied(f"The date {dated!r} is not an RFC 1123 date.")
    if when.tzinfo is None or abs((now - when).total_seconds()) > skew_s:
        raise _denied(f"Request date header too old or too new: {dated!r}.")
    text = string_to_sign(method, headers, account, raw_path, query)
    if _matches(keys, text, signature):
        return
    shown = text if len(text) <= STRING_TO_SIGN_SHOWN_CHARS_MAX else (
        text[:STRING_TO_SIGN_SHOWN_CHARS_MAX] + "...")
    raise _denied("The MAC signature found in the HTTP request is not the same as any "
                  f"computed signature. Server used following string to sign: {shown!r}.")


def check_sas(params: Mapping[str, str], keys: Keys | None, account: str, container: str,
              blob: str, permission: str, now: datetime, remote: str,
              secure: bool) -> None:
    """A service SAS (sr=b for a blob, sr=c for its container) granting `permission` ("r"
    read, "l" list) on the resource, unexpired at `now`, for `remote` over this protocol."""
    version = params.get("sv", "")
    if version < SAS_VERSION_MIN:
        raise _denied(f"Service SAS version {version!r} is older than {SAS_VERSION_MIN}.")
    if params.get("si") or params.get("skoid"):
        raise _denied("Stored access policies and user delegation SAS are not supported.")
    resource = params.get("sr", "")
    if resource == "b" and blob:
        canonical = f"/blob/{account}/{container}/{blob}"
    elif resource == "c":
        canonical = f"/blob/{account}/{container}"
    else:
        raise _denied(f"Signed resource {resource!r} does not cover this request.")
    fields = [params.get(f, "") for f in ("sp", "st", "se")] + [canonical] + [
        params.get(f, "") for f in ("si", "sip", "spr", "sv", "sr", "snapshot", "ses",
                                    "rscc", "rscd", "rsce", "rscl", "rsct")]
    text = "\n".join(fields)  # the SDK's lines, less the last one's newline
    if not _matches(keys, text, params.get("sig", "")):
        raise _denied("Signature did not match.")
    _check_sas_window(params, now)
    if params.get("spr") == "https" and not secure:
        raise BlobError(403, "AuthorizationProtocolMismatch",
                        "This request is not authorized to perform this operation using "
                        "this protocol.")
    if params.get("sip") and not _ip_allowed(params["sip"], remote):
        raise BlobError(403, "AuthorizationSourceIPMismatch",
                        "This request is not authorized to perform this operation using "
                        "this source IP.")
    if permission not in params.get("sp", ""):
        raise BlobError(403, "AuthorizationPermissionMismatch",
                        "This request is not authorized to perform this operation using "
                        "this permission.")


def _check_sas_window(params: Mapping[str, str], now: datetime) -> None:
    try:
        expiry = _iso(params["se"])
        start = _iso(params["st"]) if params.get("st") else None
    except (KeyError, ValueError):
        raise _denied("Signed expiry (se) or start (st) is not an ISO 8601 time.") from None
    if now >= expiry or (start is not None and now < start):
        raise _denied("Signed expiry time must be after the current time, and signed start "
                      "time before it.")


def _iso(text: str) -> datetime:
    parsed = datetime.fromisoformat(unquote(text).replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _ip_allowed(spec: str, remote: str) -> bool:
    low, _, high = spec.partition("-")
    try:
        address = ipaddress.ip_address(remote)
        return ipaddress.ip_address(low) <= address <= ipaddress.ip_address(high or low)
    except ValueError:
        return False
