"""`stamp`: the one entry point for Stamp's servers and operators.

Each command module registers its subcommands; a handler returns an exit code. Heavy imports
happen inside handlers, so `stamp --help` and server start-up stay quick. A user mistake or a
Stamp error prints one line, `stamp: error: ...`, and exits 1 — never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from typing import NoReturn

from common.errors import StampError

DEFAULT_DATA_DIR = os.environ.get("STAMP_DATA_DIR", "stamp-data")


class _Parser(argparse.ArgumentParser):
    """A usage mistake is one line on stderr, exit 2 (subcommands inherit the class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} -h')\n")


def build_parser() -> argparse.ArgumentParser:
    import tools.cmd_account
    import tools.cmd_isolate
    from tools import (
        cmd_bench,
        cmd_chaos,
        cmd_entity,
        cmd_extent,
        cmd_job,
        cmd_location,
        cmd_lock,
        cmd_partition,
        cmd_scan,
        cmd_stamp,
        cmd_stream,
        cmd_top,
        cmd_trace,
    )

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
    cmd_stamp.register(commands)
    cmd_top.register(commands)
    tools.cmd_isolate.register(commands)
    cmd_stream.register(commands)
    cmd_extent.register(commands)
    cmd_lock.register(commands)
    cmd_partition.register(commands)
    cmd_entity.register(commands)
    cmd_scan.register(commands)
    tools.cmd_account.register(commands)
    cmd_job.register(commands)
    cmd_location.register(commands)
    cmd_bench.register(commands)
    cmd_chaos.register(commands)
    cmd_trace.register(commands)
    return parser


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
    args = build_parser().parse_args(argv)
    # SIGTERM unwinds like ^C, so commands that started processes (benches) stop them.
    signal.signal(signal.SIGTERM, _terminate)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from common import tracing

    tracing.start("stamp-cli")  # the SDK calls of user commands, when OTEL_* asks for it
    try:
        code = args.handler(args)
    except StampError as exc:
        print(f"stamp: error: {exc}", file=sys.stderr)
        code = 1
    except OSError as exc:  # a file the user named: missing, unreadable, not a directory
        print(f"stamp: error: {exc}", file=sys.stderr)
        code = 1
    except json.JSONDecodeError as exc:  # stamp.json damaged by hand or by a full disk
        print(f"stamp: error: {args.data_dir}/stamp.json is not valid JSON: {exc}",
              file=sys.stderr)
        code = 1
    except Exception as exc:  # the SDK's errors (the user's commands): one line too
        if not _sdk_error(exc):
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
    import importlib

    importlib.import_module(SERVERS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    main()
