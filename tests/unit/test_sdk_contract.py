"""What the SDK (stampsdk) and the server each keep a copy of, since they share no code:
the two copies agree. Signing is checked end to end in test_sdk_client.py (a request the SDK
signs is verified as a front end's public door takes it); here the rest: shared access
tokens, naming rules, limits, key sizes and error names."""

from __future__ import annotations

import dataclasses

import pytest
from stampsdk import errors as sdk_errors
from stampsdk import limits as sdk_limits
from stampsdk import names as sdk_names
from stampsdk import sas as sdk_sas
from stampsdk import signing as sdk_signing
from stampsdk.connection_string import KEY_BYTES

from common import errors
from common.config import PartitionLimits
from frontend import accounts, names, sas, signing
from partition_layer.requests import TOKEN_BYTES_MAX

KEY = bytes(range(32))
NOW_S = 1_900_000_000


def test_a_token_the_sdk_mints_is_the_servers_and_the_server_takes_it() -> None:
    args = ("acme", 2, KEY, {"read", "append"}, "orders-", NOW_S + 3600, NOW_S)
    token = sdk_sas.mint(*args)
    assert token == sas.mint(*args)
    checked = sas.check(token, account="acme", permission="append", name="orders-eu",
                        now_s=NOW_S, keys_of=lambda a: [b"other" * 8, KEY])
    assert checked.permissions == {"read", "append"}
    assert sdk_sas.decode(token) == sdk_sas.SasToken(
        "acme", 2, frozenset({"read", "append"}), "orders-", NOW_S + 3600,
        sas.decode(token).signature)


@pytest.mark.parametrize("name", ["abc", "a-b-c", "a" * 63, "a" * 64, "ab", "a--b", "-ab",
                                  "ab-", "Abc", "a_b", "$containers", "", "0rders"])
def test_the_naming_rules_are_the_servers(name: str) -> None:
    def verdict(check: object) -> bool:
        try:
            check(name)  # type: ignore[operator]
        except (errors.InvalidArgument, sdk_errors.InvalidArgument):
            return False
        return True
    assert verdict(sdk_names.check_partition) == verdict(names.check_partition)
    assert verdict(sdk_names.check_prefix) == verdict(names.check_prefix)


def test_limits_key_sizes_and_the_clock_window_are_the_servers() -> None:
    server = PartitionLimits()
    for field in dataclasses.fields(sdk_limits.Limits):
        assert getattr(sdk_limits.Limits(), field.name) == getattr(server, field.name), \
            field.name
    assert sdk_limits.TOKEN_BYTES_MAX == TOKEN_BYTES_MAX
    assert KEY_BYTES == accounts.KEY_BYTES
    assert sdk_signing.CLOCK_SKEW_MAX_S == signing.CLOCK_SKEW_MAX_S
    assert sdk_signing.SCHEME == signing.SCHEME


def test_every_error_the_sdk_knows_is_one_the_server_names() -> None:
    assert set(sdk_errors.ERRORS_BY_NAME) <= set(errors.ERRORS_BY_NAME)
    assert set(sdk_errors.ALIASES) <= set(errors.ERRORS_BY_NAME)
    # Every error a server may name comes back typed (the public base for its refinements).
    for name in errors.ERRORS_BY_NAME:
        assert not isinstance(sdk_errors.from_name(name, "m"), sdk_errors.Internal) \
            or name == "Internal", name
