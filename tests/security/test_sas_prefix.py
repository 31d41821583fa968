"""Issue 28, item 7: what a shared access token's prefix covers is said wherever a token is
made or explained. The rule (frontend/sas.py): a plain string prefix — `logs` covers
`logs-secret` and `logsx` too; a prefix ending with '-' covers only the names under it.
`stamp account sas` says so in its --help and, on stderr, for the token it prints; a
check and a scan cut agree with it. Pure (no process): the rule, the CLI's parser and
note."""

from __future__ import annotations

import argparse

import pytest

from common.errors import PermissionDenied
from common.proto import frontend_pb2 as fe_pb
from frontend import sas
from frontend.scan import request_range
from partition_layer import keys
from tools import cmd_account

KEYS = (b"k" * 32, b"j" * 32)
NOW = 1_700_000_000.0
NAMES = ["logs", "logs-2024", "logs-secret", "logsx", "log", "orders"]


def covered(prefix: str) -> list[str]:
    """The names of NAMES a read token with `prefix` is granted, by sas.check."""
    token = sas.mint("acct", 1, KEYS[0], ["read"], prefix, int(NOW) + 60, NOW)
    granted = []
    for name in NAMES:
        try:
            sas.check(token, account="acct", permission="read", name=name, now_s=NOW,
                      keys_of=lambda _: KEYS)
            granted.append(name)
        except PermissionDenied:
            pass
    return granted


def scanned(prefix: str) -> list[str]:
    """The names of NAMES whose rows a scan with such a token covers."""
    start, end = request_range(fe_pb.ScanRequest(account="acct"), prefix)
    return [n for n in NAMES if start <= keys.encode_key("acct", n, keys.KIND_ENTITY, b"r") < end]


def test_a_prefix_is_a_plain_string_prefix_and_a_hyphen_ends_a_folder() -> None:
    assert covered("logs") == scanned("logs") == ["logs", "logs-2024", "logs-secret", "logsx"]
    assert covered("logs-") == scanned("logs-") == ["logs-2024", "logs-secret"]
    for prefix in ("logs", "logs-"):
        assert sas.covers(prefix, "logs-secret")
        assert all(sas.covers(prefix, n) for n in covered(prefix))


def sas_help() -> str:
    parser = argparse.ArgumentParser(prog="stamp")
    commands = parser.add_subparsers()
    cmd_account.register(commands)
    account = commands.choices["account"]
    actions = [a for a in account._actions if isinstance(a, argparse._SubParsersAction)]
    return actions[0].choices["sas"].format_help()


@pytest.mark.parametrize("prefix,says", [
    ("logs", ["'logs-secret'", "'logsx'", "end the prefix with '-'"]),
    ("logs-", ["'logs-a'", "not 'logs' itself"]),
    ("", ["every name"])])
def test_stamp_account_sas_says_what_its_prefix_covers(prefix: str, says: list[str]) -> None:
    note = sas.prefix_note(prefix)
    for words in says:
        assert words in note, note
    text = " ".join(sas_help().split())
    assert "'logs' covers 'logs', 'logs-secret' and 'logsx'" in text, text
    assert "end it with '-'" in text, text
