"""Shared access tokens (Azure's SAS, DESIGN §5), the SDK's side: a credential an account
holder mints (`mint`, with an account key) for someone else, granting some permissions on
the account's names under one prefix until an expiry, and nothing more. A client holding
one sends it in place of a signature; the front end checks it.

A token is an ASCII string with no ';' or whitespace (so it fits a connection string):

    sv=1&sa=ACCOUNT&sk=1&sp=ra&spfx=PREFIX&se=EXPIRY&sig=SIGNATURE

- `sv` the format version (1); `sa` the account; `sk` which of the account's two keys
  signed it (1 or 2); `sp` the permissions, one letter each in the order of `PERMISSIONS`;
  `spfx` the name prefix (every name that starts with it, as a plain string; empty: every
  public name); `se` the expiry, whole seconds since the epoch; `sig` HMAC-SHA256 with key
  `sk` over the canonical string of the fields (unpadded URL-safe base64).
- Decoding is strict: a token decodes only if encoding what it decoded to gives back the
  same string, byte for byte.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from stampsdk import names
from stampsdk.errors import InvalidArgument

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
    """The fields of a token (module docstring): made by `decode` (checked for form only)
    or by `mint`. `encode` gives back the one string a decoded token came from."""

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
        """The token's string: its fields in the order of the module docstring, the
        permissions in the order of PERMISSIONS, the signature unpadded URL-safe base64."""
        sig = base64.urlsafe_b64encode(self.signature).rstrip(b"=").decode()
        return (f"sv={VERSION}&sa={self.account}&sk={self.key_index}"
                f"&sp={permission_letters(self.permissions)}&spfx={self.prefix}"
                f"&se={self.expiry_s}&sig={sig}")


def permission_letters(permissions: Iterable[str]) -> str:
    """The `sp` letters of `permissions` (names of PERMISSIONS), in PERMISSIONS' order;
    InvalidArgument naming an unknown one."""
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
