"""stampsdk/connection_string.py: parse/format round trip, and a clear InvalidArgument for
every malformed connection string."""

from __future__ import annotations

import base64
import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from stampsdk import connection_string as cs
from stampsdk import sas
from stampsdk.errors import InvalidArgument

KEY = bytes(range(32))
KEY_B64 = base64.b64encode(KEY).decode()
GOOD = f"Endpoint=127.0.0.1:7000,[::1]:7001,fe-2.local:80;Account=acme;Key={KEY_B64}"


def test_parse_a_key_connection_string() -> None:
    parsed = cs.parse(GOOD)
    assert parsed.endpoints == ("127.0.0.1:7000", "[::1]:7001", "fe-2.local:80")
    assert parsed.account == "acme" and parsed.key == KEY and parsed.sas is None
    assert parsed.format() == GOOD
    assert cs.parse(GOOD + ";") == parsed  # one trailing ';' is allowed
    assert KEY_B64 not in repr(parsed)  # a secret never lands in a log through repr


def test_parse_a_sas_connection_string() -> None:
    token = sas.mint("acme", 2, KEY, {"read"}, "orders", 1_900_003_600, now_s=1_900_000_000)
    parsed = cs.parse(f"Endpoint=h:1;Account=acme;SharedAccessSignature={token}")
    assert parsed.sas == token and parsed.key is None
    with pytest.raises(InvalidArgument, match="is for account 'acme', not 'other'"):
        cs.parse(f"Endpoint=h:1;Account=other;SharedAccessSignature={token}")


def test_tls_settings_round_trip_and_are_checked() -> None:
    with_ca = cs.parse(GOOD + ";CaFile=/srv/stamp/tls/ca.crt")
    assert with_ca.tls and with_ca.ca_file == "/srv/stamp/tls/ca.crt"
    assert cs.parse(with_ca.format()) == with_ca
    system = cs.parse(GOOD + ";Tls=true")
    assert system.tls and system.ca_file is None and system.format() == GOOD + ";Tls=true"
    assert cs.parse(GOOD + ";Tls=false") == cs.parse(GOOD)  # plain, written without it
    assert not cs.parse(GOOD).tls
    with pytest.raises(InvalidArgument, match="Tls is true or false"):
        cs.parse(GOOD + ";Tls=yes")
    with pytest.raises(InvalidArgument, match="CaFile and Tls=false"):
        cs.parse(GOOD + ";CaFile=/ca.crt;Tls=false")


@pytest.mark.parametrize("text,message", [
    ("", "is empty"),
    ("   ", "is empty"),
    ("Endpoint=h:1;Account=acme", "exactly one of Key"),
    (f"Endpoint=h:1;Account=acme;Key={KEY_B64};SharedAccessSignature=x", "exactly one of"),
    (f"Account=acme;Key={KEY_B64}", "exactly one of Endpoint"),
    (f"Endpoint=h:1;Location=l:1;Account=acme;Key={KEY_B64}", "exactly one of Endpoint"),
    (f"Location=l:1,l:1;Account=acme;Key={KEY_B64}", "endpoint twice"),
    (f"Location=l;Account=acme;Key={KEY_B64}", "is not HOST:PORT"),
    (f"Endpoint=h:1;Key={KEY_B64}", "no Account"),
    (f"Endpoint=h:1;Account=acme;Key={KEY_B64};Account=acme", "Account twice"),
    (f"Endpoint=h:1;account=acme;Key={KEY_B64}", "unknown setting 'account'"),
    (f"Endpoint=h:1;Account=acme;Key={KEY_B64};;", "'' is not Name=Value"),
    (f"Endpoint=h:1;Acme;Key={KEY_B64}", "'Acme' is not Name=Value"),
    (f"Endpoint=;Account=acme;Key={KEY_B64}", "Endpoint is empty"),
    (f"Endpoint=h;Account=acme;Key={KEY_B64}", "is not HOST:PORT"),
    (f"Endpoint=:7;Account=acme;Key={KEY_B64}", "is not HOST:PORT"),
    (f"Endpoint=h:0;Account=acme;Key={KEY_B64}", "port is a number from 1 to 65535"),
    (f"Endpoint=h:65536;Account=acme;Key={KEY_B64}", "port is a number"),
    (f"Endpoint=h:07;Account=acme;Key={KEY_B64}", "port is a number"),
    (f"Endpoint=h:x;Account=acme;Key={KEY_B64}", "port is a number"),
    (f"Endpoint=h h:1;Account=acme;Key={KEY_B64}", "a host has only letters"),
    (f"Endpoint=[zz]:1;Account=acme;Key={KEY_B64}", "IPv6 host"),
    (f"Endpoint=h:1,h:1;Account=acme;Key={KEY_B64}", "endpoint twice"),
    (f"Endpoint=h:1,;Account=acme;Key={KEY_B64}", "is not HOST:PORT"),
    ("Endpoint=" + ",".join(f"h:{p}" for p in range(1, 70)) + f";Account=acme;Key={KEY_B64}",
     "at most 64"),
    (f"Endpoint=h:1;Account=Acme;Key={KEY_B64}", "account name 'Acme'"),
    ("Endpoint=h:1;Account=acme;Key=!!!!", "not standard base64"),
    ("Endpoint=h:1;Account=acme;Key=" + base64.b64encode(b"short").decode(), "has 5 bytes"),
    ("Endpoint=h:1;Account=acme;SharedAccessSignature=sv=1", "must have the fields"),
    ("x" * 9000, "longer than"),
])
def test_malformed_connection_strings_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace("[", r"\[")):
        cs.parse(text)


hosts = st.one_of(
    st.from_regex(r"[a-z0-9][a-z0-9.-]{0,20}", fullmatch=True),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda a: f"[{a}]"))
endpoint_lists = st.lists(st.tuples(hosts, st.integers(1, 65535)).map(lambda e: f"{e[0]}:{e[1]}"),
                          min_size=1, max_size=5, unique=True)
accounts = st.from_regex(r"[a-z0-9]([a-z0-9]|-(?=[a-z0-9])){2,40}", fullmatch=True)


@given(endpoint_lists, accounts, st.binary(min_size=32, max_size=32))
def test_key_round_trip(endpoints: list[str], account: str, key: bytes) -> None:
    made = cs.make(endpoints, account, key=key)
    assert cs.parse(made.format()) == made
    assert made.endpoints == tuple(endpoints) and made.account == account and made.key == key


@given(endpoint_lists, accounts, st.binary(min_size=32, max_size=32))
def test_location_round_trip(servers: list[str], account: str, key: bytes) -> None:
    made = cs.make([], account, key=key, location=servers)
    assert made.format().startswith(f"Location={','.join(servers)};Account={account};")
    assert cs.parse(made.format()) == made
    assert made.location == tuple(servers) and made.endpoints == ()


@given(endpoint_lists, accounts, st.sets(st.sampled_from(list(sas.PERMISSIONS)), min_size=1),
       st.integers(1, 2), st.integers(1_700_000_001, 1_730_000_000))
def test_sas_round_trip(endpoints: list[str], account: str, permissions: set[str],
                        key_index: int, expiry_s: int) -> None:
    token = sas.mint(account, key_index, KEY, permissions, account[:5].rstrip("-"), expiry_s,
                     now_s=1_700_000_000)
    made = cs.make(endpoints, account, sas_token=token)
    assert cs.parse(made.format()) == made and made.sas == token


@given(st.text(max_size=200))
def test_any_text_parses_or_is_invalid_argument(text: str) -> None:
    """Never a crash (another exception) on any text; what parses, round-trips."""
    with contextlib.suppress(InvalidArgument):
        parsed = cs.parse(text)
        assert cs.parse(parsed.format()) == parsed
