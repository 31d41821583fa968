"""Shared access tokens (issue 16; Azure's SAS, DESIGN §5): a credential an account holder
mints for someone else, granting some permissions on the account's names under one prefix
until an expiry, and nothing more.

A token is an ASCII string with no ';' or whitespace (so it fits a connection string):

    sv=1&sa=ACCOUNT&sk=1&sp=ra&spfx=PREFIX&se=EXPIRY&sig=SIGNATURE

- `sv` the format version (1); `sa` the account; `sk` which of the account's two keys
  signed it (1 or 2), so rotating the *other* key leaves the token valid, and rotating this
  one revokes it; `sp` the permissions, one letter each in the order of `PERMISSIONS`;
  `spfx` the name prefix (frontend/names.py's prefix rules: empty means every name; what
  it covers: below);
  `se` the expiry, whole seconds since the epoch; `sig` HMAC-SHA256 with key `sk` over the
  canonical string of the fields (unpadded URL-safe base64).
- Decoding is strict: a token decodes only if encoding what it decoded to gives back the
  same string, byte for byte. So any changed byte either fails to decode or changes a
  signed field or the signature, and the HMAC refuses it.

What a prefix covers: every name that starts with it, as a plain string — no more, no less.
The prefix `logs` covers `logs`, `logs-2024` and `logs-secret`, and `logsx` too. Names have
no separator other than the hyphen, so a prefix ending with one is a "folder": `logs-`
covers `logs-2024` and `logs-secret` but not `logs` nor `logsx`. To grant one name alone,
name it in full and make sure no other name of the account extends it (or end the prefix
with '-' and name the logs under it). `stamp account sas` says so when it mints a token
(`prefix_note`), and a scan with the token is cut to the same names (frontend/scan.py).
An empty prefix covers every public name — never the stamp's own (frontend/names.py's
internal names), which no credential reaches through the public API.

Contract of `check`: it returns only if the token is well formed, signed by the key it
names, unexpired at `now_s`, of `account`, grants `permission`, and its prefix covers
`name` (`covers`). Otherwise it raises Unauthenticated (the token is not a valid
credential: malformed, badly signed, expired) or PermissionDenied (valid, but not for this).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from common.errors import InvalidArgument, PermissionDenied, Unauthenticated
from frontend import names

VERSION = "1"
# Permission name -> its letter in `sp`; the order here is the order letters are written in.
PERMISSIONS: dict[str, str] = {
    "read": "r", "append": "a", "trim": "t", "seal": "s", "write": "w", "scan": "l",
}
_LETTERS = {letter: name for name, letter in PERMISSIONS.items()}
KEY_INDEXES = (1, 2)
EXPIRY_MAX_S = 365 * 24 * 3600  # the longest lifetime `mint` gives a token
TOKEN_CHARS_MAX = 512
SIGNATURE_BYTES = 32
_FIELDS = ("sv", "sa", "sk", "sp", "spfx", "se", "sig")


@dataclass(frozen=True)
class SasToken:
    account: str
    key_index: int
    permissions: frozenset[str]
    prefix: str
    expiry_s: int
    signature: bytes

    def canonical(self) -> bytes:
        """What the signature covers. Every field is newline-free by the naming rules, so
        distinct tokens have distinct canonical strings."""
        return "\n".join([VERSION, self.account, str(self.key_index),
                          permission_letters(self.permissions), self.prefix,
                          str(self.expiry_s)]).encode()

    def encode(self) -> str:
        sig = base64.urlsafe_b64encode(self.signature).rstrip(b"=").decode()
        return (f"sv={VERSION}&sa={self.account}&sk={self.key_index}"
                f"&sp={permission_letters(self.permissions)}&spfx={self.prefix}"
                f"&se={self.expiry_s}&sig={sig}")


def permission_letters(permissions: Iterable[str]) -> str:
    wanted = set(permissions)
    unknown = wanted - PERMISSIONS.keys()
    if unknown:
        raise InvalidArgument(f"unknown permission(s) {', '.join(sorted(unknown))}; the "
                              f"permissions are {', '.join(PERMISSIONS)}")
    return "".join(letter for name, letter in PERMISSIONS.items() if name in wanted)


def parse_permissions(text: str) -> frozenset[str]:
    """'read,append' -> {"read", "append"}; InvalidArgument naming an unknown one."""
    wanted = [part.strip() for part in text.split(",") if part.strip()]
    if not wanted:
        raise InvalidArgument(f"no permissions given; choose from {', '.join(PERMISSIONS)}")
    permission_letters(wanted)
    return frozenset(wanted)


def _sign(key: bytes, token: SasToken) -> bytes:
    return hmac.new(key, token.canonical(), hashlib.sha256).digest()


def mint(account: str, key_index: int, key: bytes, permissions: Iterable[str], prefix: str,
         expiry_s: int, now_s: float) -> str:
    """A token granting `permissions` on `account`'s names starting with `prefix` until
    `expiry_s` (whole seconds since the epoch, after `now_s` and at most EXPIRY_MAX_S
    later), signed with the account's key number `key_index`."""
    names.check_account(account)
    names.check_prefix(prefix)
    if key_index not in KEY_INDEXES:
        raise InvalidArgument(f"key number {key_index} is not 1 or 2")
    granted = frozenset(permissions)
    if not granted:
        raise InvalidArgument("a shared access token grants at least one permission")
    permission_letters(granted)
    if not now_s < expiry_s <= now_s + EXPIRY_MAX_S:
        raise InvalidArgument(f"a token's expiry is in the future and at most "
                              f"{EXPIRY_MAX_S} s away, not {expiry_s - now_s:.0f} s")
    unsigned = SasToken(account, key_index, granted, prefix, int(expiry_s), b"")
    signed = SasToken(account, key_index, granted, prefix, int(expiry_s),
                      _sign(key, unsigned))
    return signed.encode()


def decode(token: str) -> SasToken:
    """The fields of `token`, checked for form only (not signature, expiry or scope);
    InvalidArgument saying what is malformed."""
    if not isinstance(token, str) or not token:
        raise InvalidArgument("shared access token is empty")
    if len(token) > TOKEN_CHARS_MAX:
        raise InvalidArgument(f"shared access token is longer than {TOKEN_CHARS_MAX} "
                              f"characters")
    pairs = [part.partition("=") for part in token.split("&")]
    keys = [key for key, _, _ in pairs]
    if keys != list(_FIELDS) or any(not sep for _, sep, _ in pairs):
        raise InvalidArgument(f"shared access token must have the fields "
                              f"{'&'.join(f + '=...' for f in _FIELDS)} in that order")
    fields = {key: value for key, _, value in pairs}
    if fields["sv"] != VERSION:
        raise InvalidArgument(f"shared access token version {fields['sv']!r} is not {VERSION}")
    account = names.check_account(fields["sa"])
    if fields["sk"] not in ("1", "2"):
        raise InvalidArgument(f"shared access token key number {fields['sk']!r} is not 1 or 2")
    letters = fields["sp"]
    if not letters or any(c not in _LETTERS for c in letters):
        raise InvalidArgument(f"shared access token permissions {letters!r} are not letters "
                              f"of {''.join(PERMISSIONS.values())}")
    permissions = frozenset(_LETTERS[c] for c in letters)
    prefix = names.check_prefix(fields["spfx"])
    expiry = fields["se"]
    if not expiry.isascii() or not expiry.isdigit() or len(expiry) > 12:
        raise InvalidArgument(f"shared access token expiry {expiry!r} is not whole seconds "
                              f"since the epoch")
    try:
        signature = base64.urlsafe_b64decode(fields["sig"] + "=" * (-len(fields["sig"]) % 4))
    except (binascii.Error, ValueError):
        raise InvalidArgument("shared access token signature is not URL-safe base64") from None
    decoded = SasToken(account, int(fields["sk"]), permissions, prefix, int(expiry), signature)
    if len(signature) != SIGNATURE_BYTES or decoded.encode() != token:
        # Not the one spelling `encode` gives (letter order, leading zeros, base64 tail
        # bits...): refused, so no two strings are the same token.
        raise InvalidArgument("shared access token is not in canonical form")
    return decoded


def covers(prefix: str, name: str) -> bool:
    """Whether a token with `prefix` covers `name` (the module's rule: a plain string prefix,
    and public names only)."""
    return name.startswith(prefix) and not names.is_internal(name)


def prefix_note(prefix: str) -> str:
    """What a token with `prefix` covers, in a sentence for whoever mints one."""
    if not prefix:
        return "the token covers every name of the account"
    if prefix.endswith("-"):
        return (f"the token covers every name starting with {prefix!r} (such as "
                f"{prefix + 'a'!r}), not {prefix[:-1]!r} itself")
    return (f"the token covers every name starting with {prefix!r}: {prefix!r} itself, but "
            f"also {prefix + '-secret'!r} and {prefix + 'x'!r}; end the prefix with '-' to "
            f"cover only the names under {prefix + '-'!r}")


def check(token: str, *, account: str, permission: str, name: str | None, now_s: float,
          keys_of: Callable[[str], Sequence[bytes] | None]) -> SasToken:
    """The decoded token if it lets its bearer do `permission` on `account`'s `name` at
    `now_s`; raises otherwise (see the module's contract). `name` None: a request on a
    range of names (a scan, a listing), which the caller cuts to the token's prefix
    itself (frontend/scan.request_range). `keys_of(account)` gives an
    account's current keys (key 1, key 2), or None for no such account: it is asked for
    the keys of the account that signed the token."""
    if permission not in PERMISSIONS:
        raise InvalidArgument(f"unknown permission {permission!r}; the permissions are "
                              f"{', '.join(PERMISSIONS)}")
    try:
        decoded = decode(token)
    except InvalidArgument as exc:
        raise Unauthenticated(f"malformed shared access token: {exc}") from None
    keys = keys_of(decoded.account)
    if keys is None or len(keys) != len(KEY_INDEXES):
        raise Unauthenticated(f"shared access token of account {decoded.account!r}, which "
                              f"does not exist")
    unsigned = SasToken(decoded.account, decoded.key_index, decoded.permissions,
                        decoded.prefix, decoded.expiry_s, b"")
    if not hmac.compare_digest(_sign(keys[decoded.key_index - 1], unsigned),
                               decoded.signature):
        raise Unauthenticated(f"shared access token signature does not match key "
                              f"{decoded.key_index} of account {decoded.account!r} (forged, "
                              f"altered, or that key was rotated)")
    if now_s >= decoded.expiry_s:
        raise Unauthenticated(f"shared access token expired {now_s - decoded.expiry_s:.0f} s "
                              f"ago")
    if decoded.account != account:
        raise PermissionDenied(f"shared access token of account {decoded.account!r} is not "
                               f"valid for account {account!r}")
    if permission not in decoded.permissions:
        raise PermissionDenied(f"shared access token does not grant {permission} (it grants "
                               f"{', '.join(sorted(decoded.permissions))})")
    if name is not None and not covers(decoded.prefix, name):
        raise PermissionDenied(f"shared access token covers names starting with "
                               f"{decoded.prefix!r}, not {names.shown_name(name)!r}"
                               + (" (the stamp's own)" if names.is_internal(name) else ""))
    return decoded
