"""`stamp` imports only the module of the command it runs (tools/cli.py COMMAND_MODULES): the
table names every command each module registers, the command is found in argv as argparse
would find it, and a command parses the same with its module alone as with all of them."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from tools import cli


def test_the_table_names_what_each_module_registers() -> None:
    registered: dict[str, str] = {}
    for module in dict.fromkeys(cli.COMMAND_MODULES.values()):
        commands = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(commands)
        registered.update(dict.fromkeys(commands.choices, module))
    assert registered == cli.COMMAND_MODULES
    # `stamp -h` lists them all, in the table's order.
    full = cli.build_parser()
    [commands] = [a for a in full._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(commands.choices) == list(cli.COMMAND_MODULES)


@pytest.mark.parametrize(("argv", "command"), [
    (["status"], "status"),
    (["--data-dir", "d", "log", "read", "orders"], "log"),
    (["--data-dir=d", "-v", "up"], "up"),
    (["--data", "up", "down"], "down"),  # an abbreviation argparse takes: "up" is the dir
    (["-v"], None),
    (["-h", "up"], None),
    (["up", "-h"], "up"),
    (["frobnicate"], "frobnicate"),
])
def test_the_command_is_found_as_argparse_finds_it(argv: list[str], command: str | None
                                                   ) -> None:
    assert cli.command_of(argv) == command


@pytest.mark.parametrize("argv", [
    ["--data-dir", "d", "log", "read", "orders", "--from", "5"],
    ["-v", "partition", "move", "1", "ps-2"],
    ["stream", "create", "events"],
    ["job", "schedule", "--json"],
])
def test_one_module_parses_a_command_as_all_of_them_do(argv: list[str]) -> None:
    alone = vars(cli.build_parser(cli.command_of(argv)).parse_args(argv))
    full = vars(cli.build_parser().parse_args(argv))
    assert alone.keys() == full.keys()
    assert {k: v for k, v in alone.items() if not callable(v)} == \
        {k: v for k, v in full.items() if not callable(v)}
    assert getattr(alone["handler"], "__qualname__", None) == \
        getattr(full["handler"], "__qualname__", None)


def test_a_command_imports_no_other_command_module() -> None:
    """What the speed rests on: `stamp log ...` leaves the other commands' modules (and what
    they import) alone."""
    code = ("import sys\nfrom tools import cli\n"
            "cli.build_parser(cli.command_of(['log', 'read', 'orders']))\n"
            "print(' '.join(sorted(set(cli.COMMAND_MODULES.values()) & set(sys.modules))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.split() == ["tools.cmd_partition"], out
