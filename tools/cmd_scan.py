"""`stamp scan`: the account's entities in key order across range partitions, through a
front end with the SDK (issue 16; tools/sdk_client.py says where the connection string comes
from).

Output on stdout is only data: `PNAME/ROW<TAB>VALUE` lines, or with `--json` one object a
line (tools/cmd_entity.print_entity). When `--limit` stopped the scan before its end, the
token that resumes it exactly after the last row printed goes to stderr, as
`continuation: TOKEN`: pass it back with `--continuation TOKEN` and the same range.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tools import cli_checks, progress, sdk_client
from tools.cmd_entity import print_entity


def register(commands: Any) -> None:
    scan = commands.add_parser(
        "scan", help="print entities in key order across partitions (through a front end)",
        description="Print the account's entities in key order, from --start up to, not "
                    "including, --end: PNAME/ROW<TAB>VALUE lines, or one JSON object a line. "
                    "If --limit stops it early, 'continuation: TOKEN' goes to stderr; "
                    "--continuation TOKEN (same range) resumes right after the last row. " +
                    sdk_client.SOURCES)
    scan.add_argument("--start", type=sdk_client.scan_bound, metavar="PNAME[/ROW]",
                      help="first key (PNAME alone: its first row; default: the beginning)")
    scan.add_argument("--end", type=sdk_client.scan_bound, metavar="PNAME[/ROW]",
                      help="stop before this key (PNAME alone: before its first row; "
                           "default: the end)")
    scan.add_argument("--limit", type=cli_checks.record_count, default=None, metavar="N",
                      help="at most this many rows (default: all)")
    scan.add_argument("--continuation", metavar="TOKEN",
                      help="resume a scan where the one that printed TOKEN stopped")
    scan.add_argument("--json", action="store_true",
                      help='one JSON object a line: pname, row, value, etag (a "_base64" '
                           'key instead when not UTF-8)')
    sdk_client.add_options(scan)
    scan.set_defaults(handler=cmd_scan)


def cmd_scan(args: argparse.Namespace) -> int:
    # A count on a terminal's stderr while the rows go to a file or pipe; nothing else
    # there: stderr carries the continuation token (module docstring).
    with sdk_client.client(args) as client, \
            progress.beside_data("scan", "rows printed") as count:
        rows = client.scan(start=args.start, end=args.end, limit=args.limit,
                           continuation=args.continuation)
        shown = 0
        for entity in rows:
            print_entity(entity, args.json)
            shown += 1
            count.advance()
        if args.limit is not None and shown == args.limit and rows.continuation:
            print(f"continuation: {rows.continuation}", file=sys.stderr)
    return 0
