"""`stamp stream create | append | cat | ls | rm`: streams through the stream client;
`stamp stream policy | policies` (cmd_stream_policy.py): what `stamp job ec` does with them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from common.errors import InvalidArgument
from tools import cli_checks


def register(commands: Any) -> None:
    stream = commands.add_parser("stream", help="create, append to, read and list streams")
    sub = stream.add_subparsers(dest="stream_command", metavar="ACTION", required=True)

    create = sub.add_parser("create", help="create a stream (with its first extent open)")
    create.add_argument("name", type=cli_checks.name)
    create.add_argument("--json", action="store_true", help="print JSON")
    create.set_defaults(handler=cmd_create)

    append = sub.add_parser(
        "append", help="append blocks: each argument is one block, or each line of stdin",
        description="Append blocks to a stream, all in one atomic append. Each DATA argument "
                    "is one block; with none, each line of standard input is one.")
    append.add_argument("name", type=cli_checks.name)
    append.add_argument("data", nargs="*", help="block contents (text)")
    append.add_argument("--json", action="store_true", help="print JSON")
    append.set_defaults(handler=cmd_append)

    cat = sub.add_parser("cat", help="print every block of a stream, in order")
    cat.add_argument("name", type=cli_checks.name)
    cat.add_argument("--json", action="store_true", help="one JSON object per block")
    cat.set_defaults(handler=cmd_cat)

    ls = sub.add_parser("ls", help="list streams and their extents")
    ls.add_argument("prefix", nargs="?", default="")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(handler=cmd_ls)

    rm = sub.add_parser("rm", help="delete a stream (its extents become garbage)")
    rm.add_argument("name", type=cli_checks.name)
    rm.set_defaults(handler=cmd_rm)

    from tools import cmd_stream_policy

    cmd_stream_policy.register(sub)


def _client(args: argparse.Namespace) -> Any:
    from stream_layer.blocking_client import StreamClient

    cli_checks.require_running(args.data_dir, "stream-manager")
    return StreamClient.from_stamp(args.data_dir)


def _extents(info: Any) -> list[dict[str, Any]]:
    """A stream's extents; in listings each names the streams holding it (`streams`)."""
    return [{"extent_id": e.extent_id, "state": e.state, "sealed_length": e.sealed_length,
             "replicas": list(e.replicas), "streams": list(e.streams)} for e in info.extents]


def shared_with(row: dict[str, Any]) -> str:
    """'-', or how many of the stream's extents other streams hold too, and which streams
    (a split's children share their parent's extents until they rewrite them)."""
    others = sorted({name for e in row["extents"] for name in e["streams"]} - {row["name"]})
    if not others:
        return "-"
    shared = sum(1 for e in row["extents"] if set(e["streams"]) - {row["name"]})
    return f"{shared} shared with {','.join(others)}"


def cmd_create(args: argparse.Namespace) -> int:
    with _client(args) as client:
        stream = client.create_stream(args.name)
        extents = _extents(stream.aio._info)
    if args.json:
        print(json.dumps({"name": args.name, "extents": extents}))
    else:
        print(f"created stream {args.name}; extent {extents[0]['extent_id']} on "
              f"{', '.join(extents[0]['replicas'])}")
    return 0


def cmd_append(args: argparse.Namespace) -> int:
    blocks = [d.encode() for d in args.data] or [line.rstrip("\n").encode()
                                                 for line in sys.stdin]
    if not blocks:
        raise InvalidArgument("nothing to append: give blocks as arguments or on stdin")
    with _client(args) as client:
        locations = client.open_stream(args.name).append(blocks)
    if args.json:
        print(json.dumps([{"extent_id": loc.extent_id, "offset": loc.offset,
                           "length": loc.length} for loc in locations]))
    else:
        for loc in locations:
            print(f"extent {loc.extent_id} offset {loc.offset} length {loc.length}")
    return 0


def cmd_cat(args: argparse.Namespace) -> int:
    from tools import progress

    with _client(args) as client, \
            progress.beside_data("stream cat", f"blocks of {args.name}") as count:
        for loc, data in client.open_stream(args.name).blocks():
            count.advance()
            if args.json:
                print(json.dumps({"extent_id": loc.extent_id, "offset": loc.offset,
                                  "data": data.decode(errors="replace")}))
            else:
                sys.stdout.write(data.decode(errors="replace") + "\n")
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    with _client(args) as client:
        streams = client.list_streams(args.prefix)
    rows = [{"name": s.name, "extents": _extents(s)} for s in streams]
    if args.json:
        for row in rows:
            row["shared_extents"] = sum(1 for e in row["extents"]
                                        if set(e["streams"]) - {row["name"]})
        print(json.dumps(rows, indent=2))
        return 0
    from tools import tables

    table = []
    for row in rows:
        last = row["extents"][-1] if row["extents"] else None
        sealed = sum(e["sealed_length"] for e in row["extents"])
        where = f"{last['extent_id']} {last['state']} on {','.join(last['replicas'])}" \
            if last else "-"
        table.append([row["name"], len(row["extents"]), sealed, where, shared_with(row)])
    tables.print_table(["STREAM", "EXTENTS", "SEALED BYTES", "LAST EXTENT", "SHARED"], table,
                       right=["EXTENTS", "SEALED BYTES"])
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    with _client(args) as client:
        client.delete_stream(args.name)
    print(f"deleted stream {args.name}")
    return 0
