"""frontend/signing.py: a signed request verifies only with a current key of its own
account, within 5 minutes of the server's clock, on its own account's resources."""

from __future__ import annotations

import dataclasses
import hmac
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import InvalidArgument, PermissionDenied, Unauthenticated
from frontend import signing

NOW = 1_800_000_000.0
KEYS = {"acme": (b"\x01" * 32, b"\x02" * 32), "rival": (b"\x03" * 32, b"\x04" * 32)}


def keys_of(account: str) -> Sequence[bytes] | None:
    return KEYS.get(account)


def signed(key: bytes = KEYS["acme"][0], account: str = "acme", method: str = "Append",
           resource: str = "/acme/orders", records: Sequence[bytes] = (b"a", b"b"),
           at: float = NOW) -> signing.SignedRequest:
    return signing.sign(key, account, method, resource, digest(records), at)


def digest(records: Sequence[bytes]) -> bytes:
    """A request digest standing for `records` (wire.py makes the real one)."""
    return signing.digest_of(b"|".join(records))


@pytest.mark.parametrize("key", KEYS["acme"])
def test_either_key_verifies(key: bytes) -> None:
    signing.verify(signed(key), keys_of=keys_of, now_s=NOW)


def test_missing_signature_is_unauthenticated() -> None:
    with pytest.raises(Unauthenticated, match="not signed"):
        signing.verify(dataclasses.replace(signed(), signature=None), keys_of=keys_of, now_s=NOW)
    with pytest.raises(Unauthenticated, match="not signed"):
        signing.verify(dataclasses.replace(signed(), signature=b""), keys_of=keys_of, now_s=NOW)


def test_bad_signature_and_unknown_account_are_unauthenticated() -> None:
    with pytest.raises(Unauthenticated, match="bad signature"):
        signing.verify(signed(key=b"\x09" * 32), keys_of=keys_of, now_s=NOW)
    with pytest.raises(Unauthenticated, match="bad signature"):
        signing.verify(signed(account="nobody", resource="/nobody/x"), keys_of=keys_of,
                       now_s=NOW)


@pytest.mark.parametrize("field,value", [
    ("method", "Trim"), ("resource", "/acme/other"), ("timestamp_ms", int(NOW * 1000) + 1),
    ("request_sha256", digest([b"a", b"c"])), ("account", "rival"),
])
def test_any_changed_field_breaks_the_signature(field: str, value: object) -> None:
    with pytest.raises(Unauthenticated, match="bad signature"):
        signing.verify(dataclasses.replace(signed(), **{field: value}), keys_of=keys_of,
                       now_s=NOW)


def test_a_digest_of_another_length_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="32 bytes"):
        signing.sign(KEYS["acme"][0], "acme", "Append", "/acme/x", b"\x00" * 4, NOW)
    with pytest.raises(Unauthenticated, match="malformed"):
        signing.verify(dataclasses.replace(signed(), request_sha256=b"short"),
                       keys_of=keys_of, now_s=NOW)


def test_an_overlong_account_is_refused_before_any_lookup_and_not_echoed() -> None:
    looked_up: list[str] = []

    def recording(account: str) -> Sequence[bytes] | None:
        looked_up.append(account)
        return None

    request = dataclasses.replace(signed(), account="a" * 100_000)
    with pytest.raises(Unauthenticated) as caught:
        signing.verify(request, keys_of=recording, now_s=NOW)
    assert not looked_up
    assert len(str(caught.value)) < 300


@pytest.mark.parametrize("offset_s", [-300.0, 0.0, 300.0])
def test_timestamps_within_five_minutes_pass(offset_s: float) -> None:
    signing.verify(signed(at=NOW + offset_s), keys_of=keys_of, now_s=NOW)


@pytest.mark.parametrize("offset_s,says", [(-301.0, "301 s behind"), (400.0, "400 s ahead of"),
                                           (-86_400.0, "86400 s behind")])
def test_stale_or_future_timestamps_are_unauthenticated_saying_so(offset_s: float,
                                                                  says: str) -> None:
    with pytest.raises(Unauthenticated, match=f"{says} the server's clock; at most 300 s"):
        signing.verify(signed(at=NOW + offset_s), keys_of=keys_of, now_s=NOW)


def test_a_key_of_one_account_on_anothers_resource_is_permission_denied() -> None:
    request = signed(resource="/rival/orders")
    with pytest.raises(PermissionDenied, match="'acme' may not act on 'rival'"):
        signing.verify(request, keys_of=keys_of, now_s=NOW)
    # Authentication comes first: the same request badly signed says nothing of rights.
    with pytest.raises(Unauthenticated):
        signing.verify(dataclasses.replace(request, signature=b"\x00" * 32), keys_of=keys_of,
                       now_s=NOW)


def test_line_breaks_in_fields_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="resource"):
        signed(resource="/acme/a\nb")
    with pytest.raises(Unauthenticated, match="malformed"):
        signing.verify(dataclasses.replace(signed(), method="A\nppend"), keys_of=keys_of,
                       now_s=NOW)


def test_signature_text_round_trip_and_refusals() -> None:
    request = signed()
    assert request.signature is not None
    text = signing.encode_signature(request.signature)
    assert signing.decode_signature(text) == request.signature
    for bad in ("***", "AAAA"):
        with pytest.raises(Unauthenticated):
            signing.decode_signature(bad)


@given(st.binary(min_size=32, max_size=32), st.integers(0, 31), st.integers(1, 255))
def test_any_flipped_signature_bit_is_refused(key: bytes, index: int, flip: int) -> None:
    request = signing.sign(key, "acme", "Append", "/acme/x", digest([b"7"]), NOW)
    assert request.signature is not None
    damaged = bytearray(request.signature)
    damaged[index] ^= flip
    with pytest.raises(Unauthenticated):
        signing.verify(dataclasses.replace(request, signature=bytes(damaged)),
                       keys_of=lambda _: (key, b"\x00" * 32), now_s=NOW)


def test_verifying_builds_the_canonical_string_once_for_both_keys(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The front end verifies thousands of requests a second against both of an account's
    keys: the canonical string is built once per request, not once per key."""
    request = signed(key=KEYS["acme"][1])
    built: list[bytes] = []
    real = signing.canonical_string

    def counting(*args: object) -> bytes:
        built.append(real(*args))  # type: ignore[arg-type]
        return built[-1]

    monkeypatch.setattr(signing, "canonical_string", counting)
    signing.verify(request, keys_of=keys_of, now_s=NOW)
    assert len(built) == 1
    with pytest.raises(Unauthenticated, match="bad signature"):
        signing.verify(dataclasses.replace(request, signature=b"\x00" * 32), keys_of=keys_of,
                       now_s=NOW)
    assert len(built) == 2


def test_the_signature_is_hmac_sha256_of_the_documented_canonical_string() -> None:
    """The MAC made from each key's ready HMAC state (signing._mac) is the standard one,
    and the canonical string is byte for byte the module docstring's."""
    request = signed(KEYS["acme"][1])
    canonical = (b"stamp-hmac-sha256-v2\nacme\nAppend\n/acme/orders\n%d\n%s"
                 % (request.timestamp_ms, request.request_sha256.hex().encode()))
    assert signing.canonical_string("acme", "Append", "/acme/orders", request.timestamp_ms,
                                    request.request_sha256) == canonical
    assert request.signature == hmac.digest(KEYS["acme"][1], canonical, "sha256")
    assert signing.sign(KEYS["acme"][1], "acme", "Append", "/acme/orders",
                        request.request_sha256, NOW).signature == request.signature


@pytest.mark.parametrize("key", [b"", b"k", b"\x07" * 32, b"\x08" * 64, b"\x09" * 65, b"x" * 200])
def test_the_mac_is_hmac_sha256_for_any_key_length(key: bytes) -> None:
    for message in (b"", b"m", b"stamp-hmac-sha256-v1\n" * 9):
        assert signing._mac(key, message) == hmac.digest(key, message, "sha256")
