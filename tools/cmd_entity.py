"""`stamp entity put | get | delete | ls`: key/value rows with ETags, through a front end
with the SDK (issue 16; tools/sdk_client.py says where the connection string comes from).

An entity is (partition name, row) -> value. Rows are given as text (their UTF-8 bytes);
values are bytes. Output:
- `put` prints the new ETag, alone on its line (for `--if-match` next time);
- `get` writes the value to stdout exactly, no newline added (a newline is added on a
  terminal only, so the prompt does not follow the value); `--json` prints one object
  {"value": TEXT, "etag": ETAG}, or "value_base64" instead of "value" when the value is not
  UTF-8;
- `ls` prints `ROW<TAB>VALUE` lines (one an entity: UTF-8 text, other bytes and control
  characters escaped as \\xNN, \\n, \\t: tools/sdk_client.show_bytes), or with
  `--json` one object a line: {"pname", "row" | "row_base64", "value" | "value_base64",
  "etag"}.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from common.errors import InvalidArgument
from tools import cli_checks, progress, sdk_client

VALUE_FILE_STDIN = "-"


def register(commands: Any) -> None:
    entity = commands.add_parser(
        "entity", help="put, get, delete and list entities (through a front end)",
        description="Entities (key/value rows with ETags) of the account of the connection "
                    "string, through the stamp's front ends. " + sdk_client.SOURCES)
    sub = entity.add_subparsers(dest="entity_command", metavar="ACTION", required=True)

    put = sub.add_parser("put", help="write a value; print its new ETag",
                         description="Write PNAME/ROW's value; print the new ETag. "
                                     "Conditional with --if-match or --if-none-match: when "
                                     "the condition does not hold nothing is written "
                                     "(PreconditionFailed).")
    _key_arguments(put)
    put.add_argument("value", nargs="?", metavar="VALUE",
                     help="the value, as text (or --value-file)")
    put.add_argument("--value-file", metavar="PATH",
                     help=f"read the value's bytes from this file ('{VALUE_FILE_STDIN}': stdin)")
    condition = put.add_mutually_exclusive_group()
    condition.add_argument("--if-match", metavar="ETAG", type=cli_checks.name,
                           help="write only if the entity's ETag is this")
    condition.add_argument("--if-none-match", action="store_true",
                           help="write only if the entity does not exist")
    sdk_client.add_options(put)
    put.set_defaults(handler=cmd_put)

    get = sub.add_parser("get", help="print a value (raw; --json: value and ETag)",
                         description="Write PNAME/ROW's value to stdout exactly as stored. "
                                     "With --json print {\"value\": TEXT, \"etag\": ETAG} "
                                     "(\"value_base64\" instead of \"value\" when the value is "
                                     "not UTF-8).")
    _key_arguments(get)
    get.add_argument("--json", action="store_true", help="print value and ETag as JSON")
    sdk_client.add_options(get)
    get.set_defaults(handler=cmd_get)

    delete = sub.add_parser("delete", help="delete an entity",
                            description="Delete PNAME/ROW (NotFound if it does not exist).")
    _key_arguments(delete)
    delete.add_argument("--if-match", metavar="ETAG", type=cli_checks.name,
                        help="delete only if the entity's ETag is this")
    sdk_client.add_options(delete)
    delete.set_defaults(handler=cmd_delete)

    ls = sub.add_parser("ls", help="list the entities of one partition name, in row order",
                        description="Print PNAME's entities in row order: ROW<TAB>VALUE, or "
                                    "with --json one object a line.")
    ls.add_argument("pname", type=sdk_client.partition_name, metavar="PNAME",
                    help="partition name")
    ls.add_argument("--limit", type=cli_checks.record_count, default=None, metavar="N",
                    help="at most this many (default: all)")
    ls.add_argument("--json", action="store_true",
                    help='one JSON object a line: pname, row, value, etag (a "_base64" '
                         'key instead when not UTF-8)')
    sdk_client.add_options(ls)
    ls.set_defaults(handler=cmd_ls)


def _key_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pname", type=sdk_client.partition_name, metavar="PNAME",
                        help="partition name (the entity group: 3-63 of a-z, 0-9, '-')")
    parser.add_argument("row", type=sdk_client.row_key, metavar="ROW",
                        help="row key (text, its UTF-8 bytes)")


def _value(args: argparse.Namespace) -> bytes:
    """The value to put: the argument or the file, exactly one of them."""
    if (args.value is None) == (args.value_file is None):
        raise InvalidArgument("give the value either as an argument or with --value-file")
    if args.value is not None:
        return str(args.value).encode("utf-8", errors="surrogateescape")
    if args.value_file == VALUE_FILE_STDIN:
        return sys.stdin.buffer.read()
    with open(args.value_file, "rb") as f:  # an OSError is one line (tools/cli.py)
        return f.read()


def cmd_put(args: argparse.Namespace) -> int:
    value = _value(args)  # before connecting: a bad file is not the stamp's error
    with sdk_client.client(args) as client:
        etag = client.put(args.pname, args.row, value, if_match=args.if_match,
                          if_none_match="*" if args.if_none_match else None)
    print(etag)
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    with sdk_client.client(args) as client:
        value, etag = client.get(args.pname, args.row)
    if args.json:
        print(json.dumps({**sdk_client.json_bytes("value", value), "etag": etag}))
        return 0
    sys.stdout.buffer.write(value)
    if sys.stdout.isatty() and not value.endswith(b"\n"):
        sys.stdout.buffer.write(b"\n")
    sys.stdout.flush()
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with sdk_client.client(args) as client:
        client.delete(args.pname, args.row, if_match=args.if_match)
    print(f"deleted {args.pname}/{args.row}")
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    with sdk_client.client(args) as client, \
            progress.beside_data("entity ls", f"entities of {args.pname}") as count:
        # A scan from the name's first row; it ends where the next partition name begins.
        scan = client.scan(start=args.pname, limit=args.limit)
        for entity in scan:
            if entity.pname != args.pname:
                break
            print_entity(entity, args.json, with_pname=False)
            count.advance()
        scan.close()
    return 0


def print_entity(entity: Any, as_json: bool, with_pname: bool = True) -> None:
    """One entity on one line: `[PNAME/]ROW<TAB>VALUE`, or a JSON object (module doc)."""
    if as_json:
        print(json.dumps({"pname": entity.pname, **sdk_client.json_bytes("row", entity.row),
                          **sdk_client.json_bytes("value", entity.value),
                          "etag": entity.etag}), flush=True)
        return
    row = sdk_client.show_bytes(entity.row)
    key = f"{entity.pname}/{row}" if with_pname else row
    print(f"{key}\t{sdk_client.show_bytes(entity.value)}", flush=True)
