"""frontend/sas.py: a shared access token grants exactly what it says (permissions, prefix,
account, until its expiry), signed by the key it names; any changed byte invalidates it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import InvalidArgument, PermissionDenied, Unauthenticated
from frontend import sas

NOW = 1_800_000_000.0
KEYS = {"acme": (b"\x01" * 32, b"\x02" * 32), "rival": (b"\x03" * 32, b"\x04" * 32)}


def keys_of(account: str) -> Sequence[bytes] | None:
    return KEYS.get(account)


def token(permissions: set[str] | None = None, prefix: str = "orders", key_index: int = 1,
          account: str = "acme", expiry_s: int = int(NOW) + 3600) -> str:
    return sas.mint(account, key_index, KEYS[account][key_index - 1],
                    permissions or {"read", "append"}, prefix, expiry_s, now_s=NOW)


def check(text: str, permission: str = "read", name: str = "orders-eu",
          account: str = "acme", now_s: float = NOW,
          keys: dict[str, tuple[bytes, bytes]] = KEYS) -> sas.SasToken:
    return sas.check(text, account=account, permission=permission, name=name, now_s=now_s,
                     keys_of=keys.get)


def test_a_token_grants_what_it_says() -> None:
    text = token()
    assert ";" not in text and " " not in text
    decoded = check(text)
    assert decoded.permissions == {"read", "append"} and decoded.prefix == "orders"
    check(text, permission="append", name="orders")


def test_permissions_prefix_account_expiry_are_enforced() -> None:
    text = token()
    with pytest.raises(PermissionDenied, match="does not grant trim"):
        check(text, permission="trim")
    with pytest.raises(PermissionDenied, match="names starting with 'orders', not 'invoices'"):
        check(text, name="invoices")
    with pytest.raises(PermissionDenied, match="not valid for account 'rival'"):
        check(text, account="rival")
    check(text, now_s=NOW + 3599)
    with pytest.raises(Unauthenticated, match="expired 0 s ago"):
        check(text, now_s=NOW + 3600)


def test_rotating_the_other_key_keeps_it_rotating_its_key_revokes_it() -> None:
    text = token(key_index=2)
    key1, key2 = KEYS["acme"]
    check(text, keys={"acme": (b"\x07" * 32, key2)})
    with pytest.raises(Unauthenticated, match="does not match key 2"):
        check(text, keys={"acme": (key1, b"\x07" * 32)})
    with pytest.raises(Unauthenticated, match="does not exist"):
        check(text, keys={})


@pytest.mark.parametrize("kwargs,message", [
    ({"permissions": {"delete"}}, "unknown permission"),
    ({"prefix": "Orders"}, "prefix"), ({"key_index": 3}, "not 1 or 2"),
    ({"expiry_s": int(NOW)}, "in the future"),
    ({"expiry_s": int(NOW) + sas.EXPIRY_MAX_S + 1}, "at most"),
])
def test_mint_refuses_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"account": "acme", "key_index": 1, "key": KEYS["acme"][0],
                               "permissions": {"read"}, "prefix": "", "expiry_s": int(NOW) + 60,
                               "now_s": NOW}
    args.update(kwargs)
    with pytest.raises(InvalidArgument, match=message):
        sas.mint(**args)  # type: ignore[arg-type]


def test_parse_permissions() -> None:
    assert sas.parse_permissions("read, scan,") == {"read", "scan"}
    for bad, message in (("", "no permissions"), ("read,delete", "unknown permission")):
        with pytest.raises(InvalidArgument, match=message):
            sas.parse_permissions(bad)


@pytest.mark.parametrize("mangle", [
    lambda t: t.replace("sp=ra", "sp=ar"),          # not canonical letter order
    lambda t: t.replace("&se=", "&se=0"),            # leading zero
    lambda t: t + "&x=1",                            # an extra field
    lambda t: t.replace("sv=1", "sv=2"),
    lambda t: t.split("&sig=")[0],
    lambda t: "",
])
def test_malformed_tokens_are_unauthenticated(mangle) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(Unauthenticated, match="malformed"):
        check(mangle(token()))


permission_sets = st.sets(st.sampled_from(list(sas.PERMISSIONS)), min_size=1)
prefixes = st.from_regex(r"([a-z0-9]([a-z0-9]|-(?=[a-z0-9])){0,8})?", fullmatch=True)
names = st.from_regex(r"[a-z0-9]([a-z0-9]|-(?=[a-z0-9])){2,12}", fullmatch=True)


@given(permission_sets, prefixes, st.sampled_from(list(sas.PERMISSIONS)), names,
       st.sampled_from(["acme", "rival"]), st.integers(1, 2), st.integers(-10, 7200))
def test_a_token_never_grants_more_than_it_says(granted: set[str], prefix: str,
                                                permission: str, name: str, account: str,
                                                key_index: int, age_s: int) -> None:
    text = token(granted, prefix, key_index)
    allowed = (permission in granted and name.startswith(prefix) and account == "acme"
               and NOW + age_s < NOW + 3600)
    try:
        check(text, permission=permission, name=name, account=account, now_s=NOW + age_s)
        assert allowed
    except (PermissionDenied, Unauthenticated):
        assert not allowed


@given(permission_sets, prefixes, st.data())
def test_any_changed_byte_invalidates_a_token(granted: set[str], prefix: str,
                                              data: st.DataObject) -> None:
    text = token(granted, prefix)
    index = data.draw(st.integers(0, len(text) - 1))
    replacement = data.draw(st.characters(min_codepoint=32, max_codepoint=126)
                            .filter(lambda c: c != text[index]))
    changed = text[:index] + replacement + text[index + 1:]
    # Asked for exactly what the original grants, on a name under its prefix: only a
    # change to the token can make this fail, and every change must.
    with pytest.raises((Unauthenticated, PermissionDenied)):
        check(changed, permission=sorted(granted)[0], name=prefix + "zzz")


@given(st.text(max_size=300))
def test_any_text_is_refused_without_a_crash(text: str) -> None:
    with pytest.raises(Unauthenticated):
        check(text)
