"""`stamp`: the one entry point for Stamp's servers and operators.

Each command module registers its subcommands; a handler returns an exit code. Heavy imports
happen inside handlers, so `stamp --help` and server start-up stay quick; and a command
imports only the module that registers it (COMMAND_MODULES), not the other fourteen with
their clients, protobufs and gRPC: tests run `stamp` as a subprocess hundreds of times. A
user mistake or a Stamp error prints one line, `stamp: error: ...`, and exits 1 — never a
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import signal
import sys
from typing import NoReturn

DEFAULT_DATA_DIR = os.environ.get("STAMP_DATA_DIR", "stamp-data")


class _Parser(argparse.ArgumentParser):
    """A usage mistake is one line on stderr, exit 2 (subcommands inherit the class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} -h')\n")


# Each top-level command and the module that registers it, in the order `stamp -h` lists
# them. tests/unit/test_cli_commands.py checks this against what each module registers.
COMMAND_MODULES = {
    "up": "tools.cmd_stamp", "down": "tools.cmd_stamp", "status": "tools.cmd_stamp",
    "kill": "tools.cmd_stamp", "start": "tools.cmd_stamp", "fault": "tools.cmd_stamp",
    "demo": "tools.cmd_stamp",
    "top": "tools.cmd_top",
    "isolate": "tools.cmd_isolate", "heal": "tools.cmd_isolate",
    "stream": "tools.cmd_stream",
    "extent": "tools.cmd_extent",
    "lock": "tools.cmd_lock",
    "partition": "tools.cmd_partition", "log": "tools.cmd_partition",
    "entity": "tools.cmd_entity",
    "scan": "tools.cmd_scan",
    "account": "tools.cmd_account",
    "job": "tools.cmd_job",
    "location": "tools.cmd_location",
    "bench": "tools.cmd_bench",
    "chaos": "tools.cmd_chaos",
    "trace": "tools.cmd_trace",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `stamp` parser. With `command` (a name in COMMAND_MODULES) only the module that
    registers it is imported and registered: the parser then parses that command's argv
    exactly as the full one would. Without (or with a name it does not know) every command
    is registered, for `stamp -h` and for argparse's "invalid choice" error."""
    parser = _Parser(
        prog="stamp",
        description="Stamp: a layered, strongly consistent storage service. Start a local "
                    "stamp with 'stamp up', look at it with 'stamp status', stop it with "
                    "'stamp down'.")
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                        help="the stamp's data directory (default: ./stamp-data, or "
                             "$STAMP_DATA_DIR)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    if command in COMMAND_MODULES:
        modules = [COMMAND_MODULES[command]]
    else:
        modules = list(dict.fromkeys(COMMAND_MODULES.values()))  # each once, in order
    for name in modules:
        importlib.import_module(name).register(commands)
    return parser


def command_of(argv: list[str]) -> str | None:
    """The top-level command `argv` names: its first word that is neither an option of
    `stamp` itself nor --data-dir's value (given apart, or as an abbreviation argparse
    accepts). None when there is none, or -h comes first; a word that is no command is
    returned as it is (build_parser then registers every command; argparse refuses it)."""
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help"):  # `stamp -h ...`: the whole list of commands
            return None
        if "=" not in word and len(word) > 2 and "--data-dir".startswith(word):
            next(words, None)  # its value
        elif not word.startswith("-"):
            return word
    return None


def _stamp_error(exc: BaseException) -> bool:
    """Whether `exc` is a StampError (common/errors.py), without importing that module (and
    gRPC with it) into a command that never used it: nothing else raises one."""
    errors = sys.modules.get("common.errors")
    return errors is not None and isinstance(exc, errors.StampError)


def _sdk_error(exc: BaseException) -> bool:
    """Whether `exc` is an error of the SDK (stampsdk.errors; the user's commands go through
    it), without importing the SDK into commands that never used it."""
    errors = sys.modules.get("stampsdk.errors")
    return errors is not None and isinstance(exc, errors.StampError)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        _serve(argv[1:])
        return
    args = build_parser(command_of(argv)).parse_args(argv)
    # SIGTERM unwinds like ^C, so commands that started processes (benches) stop them.
    signal.signal(signal.SIGTERM, _terminate)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from common import tracing

    tracing.start("stamp-cli")  # the SDK calls of user commands, when OTEL_* asks for it
    try:
        code = args.handler(args)
    except OSError as exc:  # a file the user named: missing, unreadable, not a directory
        print(f"stamp: error: {exc}", file=sys.stderr)
        code = 1
    except json.JSONDecodeError as exc:  # stamp.json damaged by hand or by a full disk
        print(f"stamp: error: {args.data_dir}/stamp.json is not valid JSON: {exc}",
              file=sys.stderr)
        code = 1
    except Exception as exc:  # Stamp's errors, and the SDK's (the user's commands)
        if not (_stamp_error(exc) or _sdk_error(exc)):
            raise
        print(f"stamp: error: {exc}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        print("stamp: interrupted", file=sys.stderr)
        code = 130
    sys.exit(code or 0)


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


SERVERS = {
    "extent-node": "stream_layer.extent_node.main",
    "stream-manager": "stream_layer.stream_manager.main",
    "lock": "lock_service.main",
    "partition-manager": "partition_layer.pm_main",
    "partition-server": "partition_layer.ps_main",
    "front-end": "frontend.fe_main",
    "job-scheduler": "spark.scheduler_main",
    "location": "location.server_main",
}


def _serve(argv: list[str]) -> None:
    """`stamp serve KIND ...`: run one server process in the foreground."""
    if not argv or argv[0] not in SERVERS:
        print(f"usage: stamp serve {{{','.join(SERVERS)}}} [options]\n"
              f"Runs one Stamp server process in the foreground ('stamp up' runs them all).",
              file=sys.stderr)
        sys.exit(0 if argv[:1] in (["-h"], ["--help"]) else 2)
    importlib.import_module(SERVERS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    main()
