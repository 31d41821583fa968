"""`stamp partition split | merge | history | balance` arguments: ids and split keys are
checked before anything is sent, a mistake is one line (argparse, exit 2), and the parsed
arguments are what the partition manager is asked for."""

from __future__ import annotations

import argparse

import pytest

from partition_layer import keys
from tools.cli import build_parser, main
from tools.cmd_partition_ops import positive_id, split_key


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["partition", *argv])


def test_split_key_is_the_first_key_of_a_partition_name() -> None:
    assert split_key("acct/log-7") == keys.encode_key("acct", "log-7", keys.KIND_META, b"")
    assert split_key("acct/a/b") == keys.encode_key("acct", "a/b", keys.KIND_META, b"")
    for bad in ("no-slash", "/pname", "acct/bad\nname"):
        with pytest.raises(argparse.ArgumentTypeError):
            split_key(bad)


def test_partition_ids_are_positive_whole_numbers() -> None:
    assert positive_id("7") == 7
    for bad in ("0", "-1", "x", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_id(bad)


def test_parsed_requests() -> None:
    args = parse("split", "3", "--key", "acct/m")
    assert (args.id, args.key) == (3, keys.encode_key("acct", "m", keys.KIND_META, b""))
    assert parse("split", "3").key is None
    assert (parse("merge", "4").id, parse("merge", "4").id2) == (4, 0)
    assert parse("merge", "4", "5").id2 == 5
    assert parse("history", "--json").json and parse("history").limit is None
    assert parse("balance", "--dry-run").dry_run and not parse("balance").dry_run
    assert parse("ls", "--json").json


@pytest.mark.parametrize("argv", [
    ["split"], ["split", "0"], ["split", "x"], ["split", "2", "--key", "nokey"],
    ["merge"], ["merge", "1", "0"], ["history", "--limit", "0"], ["balance", "--now"],
])
def test_mistakes_are_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["partition", *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err and "Traceback" not in err


def test_merge_with_itself_is_refused_before_anything_is_sent(
        tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--data-dir", str(tmp_path), "partition", "merge", "3", "3"])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert err.strip() == "stamp: error: a partition cannot merge with itself (3)"


def test_help_names_every_action(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["partition", "--help"])
    out = capsys.readouterr().out
    for action in ("ls", "move", "split", "merge", "history", "balance"):
        assert f"    {action}" in out
