"""tools/sdk_client.py without a stamp: which connection string a command uses, what its
errors say, and how bytes are shown (text) and written (JSON)."""

from __future__ import annotations

import argparse
import base64
import json
import re

import pytest
from stampsdk import connection_string
from stampsdk import errors as sdk_errors

from common.errors import InvalidArgument, NotFound, PermissionDenied, Throttled
from tools import sdk_client

KEY = bytes(range(32))


def text(account: str) -> str:
    return connection_string.make(["127.0.0.1:7061"], account, key=KEY).format()


def args(option: str | None, data_dir: str = "/nowhere") -> argparse.Namespace:
    return argparse.Namespace(connection_string=option, data_dir=data_dir, timeout=1.0)


def test_the_option_wins_then_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sdk_client.ENV_VAR, text("from-env"))
    assert sdk_client.find_connection_string(args(text("from-option"))).account == \
        "from-option"
    assert sdk_client.find_connection_string(args(None)).account == "from-env"


def test_an_empty_variable_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """Then the admin file of --data-dir is used: here there is no stamp at all."""
    monkeypatch.setenv(sdk_client.ENV_VAR, "")
    with pytest.raises(NotFound, match="no stamp in /nowhere"):
        sdk_client.find_connection_string(args(None))


@pytest.mark.parametrize(("option", "env", "source"), [
    ("Endpoint=h:1;Account=abc", None, "--connection-string"),
    (None, "Endpoint=nowhere;Account=abc;Key=x", "$STAMP_CONNECTION_STRING"),
])
def test_a_malformed_one_names_its_source(monkeypatch: pytest.MonkeyPatch, option: str | None,
                                          env: str | None, source: str) -> None:
    if env is not None:
        monkeypatch.setenv(sdk_client.ENV_VAR, env)
    with pytest.raises(InvalidArgument,
                       match=re.escape(f"the connection string from {source} is not valid: ")):
        sdk_client.find_connection_string(args(option))


def test_errors_of_the_stamp_carry_their_kind() -> None:
    with pytest.raises(PermissionDenied, match=r"^PermissionDenied: no append$"), \
            sdk_client.named_errors():
        raise PermissionDenied("no append")
    with pytest.raises(Throttled) as caught, sdk_client.named_errors():
        raise Throttled("slow down", retry_after_s=2.5)
    assert str(caught.value) == "Throttled: slow down" and caught.value.retry_after_s == 2.5
    with pytest.raises(NotFound, match=r"^NotFound: x$"), sdk_client.named_errors():
        raise NotFound("NotFound: x")  # named once only
    # The SDK's errors (what the user's commands get) as well.
    with pytest.raises(sdk_errors.Throttled) as sdk_caught, sdk_client.named_errors():
        raise sdk_errors.Throttled("slow down", retry_after_s=2.5)
    assert str(sdk_caught.value) == "Throttled: slow down"
    assert sdk_caught.value.retry_after_s == 2.5


def test_bytes_are_shown_on_one_line_and_written_exactly_in_json() -> None:
    assert sdk_client.show_bytes("hé\tx\n".encode()) == "hé\\tx\\n"
    assert sdk_client.show_bytes(b"\xff\x00") == "\\xff\\x00"
    assert sdk_client.json_bytes("value", "hé".encode()) == {"value": "hé"}
    blob = bytes(range(256))
    shown = json.loads(json.dumps(sdk_client.json_bytes("row", blob)))
    assert list(shown) == ["row_base64"] and base64.b64decode(shown["row_base64"]) == blob


def test_scan_bounds() -> None:
    assert sdk_client.scan_bound("users") == "users"
    assert sdk_client.scan_bound("users/") == "users"
    assert sdk_client.scan_bound("users/a/b") == ("users", "a/b")
    for bad in ("Users", "u", "users--x/r", "/r"):
        with pytest.raises(argparse.ArgumentTypeError):
            sdk_client.scan_bound(bad)
