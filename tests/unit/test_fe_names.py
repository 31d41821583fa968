"""frontend/names.py: the account, log and partition naming rules, each refusal naming its
rule, checked against a dumb regular-expression reference."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import InvalidArgument
from frontend import names

REFERENCE = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9]))*")


@pytest.mark.parametrize("name", ["abc", "a-b", "orders-2026", "0x1", "a" * 63, "9-9-9"])
def test_valid_names_pass(name: str) -> None:
    for check in (names.check_account, names.check_log, names.check_partition):
        assert check(name) == name


@pytest.mark.parametrize("name,rule", [
    ("ab", "has 2 characters"), ("a" * 64, "has 64 characters"), ("", "has 0 characters"),
    ("Orders", "other than lowercase"), ("a_b", "'_'"), ("a b", "' '"), ("é-é", "'é'"),
    ("-ab", "starts or ends with a hyphen"), ("ab-", "starts or ends with a hyphen"),
    ("a--b", "two hyphens in a row"), ("a/b", "'/'"), ("a\nb", "'\\n'"),
])
def test_invalid_names_name_the_rule(name: str, rule: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(rule)) as caught:
        names.check_log(name)
    assert str(caught.value).startswith("log name")


def test_kind_is_named_and_non_strings_refused() -> None:
    with pytest.raises(InvalidArgument, match=r"^account name"):
        names.check_account("A")
    with pytest.raises(InvalidArgument, match="must be a string"):
        names.check_partition(b"abc")  # type: ignore[arg-type]


@given(st.text(alphabet="abcz09-_A.", max_size=70))
def test_rules_agree_with_a_regular_expression(name: str) -> None:
    expected = 3 <= len(name) <= 63 and REFERENCE.fullmatch(name) is not None
    try:
        names.check_account(name)
        accepted = True
    except InvalidArgument:
        accepted = False
    assert accepted == expected, name


@given(st.text(alphabet="abz09-", min_size=3, max_size=63))
def test_every_prefix_of_a_valid_name_is_a_valid_prefix(name: str) -> None:
    try:
        names.check_log(name)
    except InvalidArgument:
        return
    for end in range(len(name) + 1):
        assert names.check_prefix(name[:end]) == name[:end]


@pytest.mark.parametrize("prefix", ["-a", "a--", "A", "a/", "x" * 64])
def test_prefixes_no_name_has_are_refused(prefix: str) -> None:
    with pytest.raises(InvalidArgument, match="prefix"):
        names.check_prefix(prefix)
