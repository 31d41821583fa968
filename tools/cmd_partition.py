"""`stamp partition ls | move` (an operator's view: straight to the partition managers; split,
merge, history and balance in tools/cmd_partition_ops.py) and
`stamp log append | read | tail | peek | trim | seal | ls` (a user's: through a front end with
the SDK, tools/sdk_client.py)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from common.errors import InvalidArgument
from tools import cli_checks, cmd_partition_ops, sdk_client


def register(commands: Any) -> None:
    partition = commands.add_parser("partition", help="range partitions and who serves them")
    sub = partition.add_subparsers(dest="partition_command", metavar="ACTION", required=True)
    ls = sub.add_parser("ls", help="every range partition: key range, server, load",
                        description="Every range partition in key order: its range (by "
                                    "partition name), server, state and load. --json adds "
                                    "\"low\" and \"high\": the encoded keys in hex (\"\" for "
                                    "the lowest, null for the top).")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(handler=cmd_ls)
    move = sub.add_parser("move", help="move a partition to another partition server",
                          description="The current server checkpoints the partition and "
                                      "lets it go; the named one loads it.")
    move.add_argument("id", type=cli_checks.partition_id,
                      help="partition id (see 'stamp partition ls')")
    move.add_argument("server", type=cli_checks.name, help="partition server name, e.g. ps-2")
    move.set_defaults(handler=cmd_move)
    cmd_partition_ops.register(sub)

    log = commands.add_parser(
        "log", help="append to, read and tail logs (through a front end)",
        description="Logs of the account of the connection string, through the stamp's front "
                    "ends. " + sdk_client.SOURCES)
    sub = log.add_subparsers(dest="log_command", metavar="ACTION", required=True)
    for name, text in (("append", "append records (arguments, or one per stdin line)"),
                       ("read", "print records from a sequence number: SEQ<TAB>RECORD"),
                       ("tail", "print records as they are appended (^C to stop)"),
                       ("peek", "print the first and next sequence numbers"),
                       ("trim", "drop the records below a sequence number"),
                       ("seal", "refuse further appends"),
                       ("ls", "list the account's logs in name order")):
        p = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        if name == "ls":
            p.add_argument("--prefix", default="", type=sdk_client.name_prefix,
                           help="only logs whose name starts with this")
        else:
            p.add_argument("log", type=sdk_client.log_name, help="log name")
        sdk_client.add_options(p)
        if name == "append":
            p.add_argument("records", nargs="*", help="records (default: read stdin lines)")
            p.add_argument("--token", type=cli_checks.name,
                           help="idempotency token: a retry appends nothing twice")
        if name in ("read", "tail"):
            p.add_argument("--from", dest="from_seq", type=cli_checks.sequence_number, default=None,
                           help="first sequence number (default: the log's first; tail: "
                                "its next)")
        if name == "read":
            p.add_argument("--limit", type=cli_checks.record_count,
                           default=100, help="at most this many (default 100)")
        if name == "trim":
            p.add_argument("upto", type=cli_checks.sequence_number,
                           help="records below this are dropped")
        p.set_defaults(handler=cmd_log, action=name)


def _client(args: argparse.Namespace) -> Any:
    from partition_layer.client import PartitionClient

    cli_checks.require_running(args.data_dir, "partition-manager")
    return PartitionClient.from_stamp(args.data_dir)


def cmd_ls(args: argparse.Namespace) -> int:
    import asyncio

    from common import rpc
    from common.proto import partition_pb2 as pb
    from common.proto import partition_pb2_grpc as pb_grpc

    with _client(args) as client:
        current, addresses = client.partition_map()

        async def loads() -> dict[int, Any]:
            found = {}
            for address in set(addresses.values()):
                stub = pb_grpc.PartitionServerStub(rpc.aio_channel(address, 16 << 20))
                try:
                    reply = await rpc.call(stub.Status(pb.ServerStatusRequest(), timeout=2))
                except Exception:
                    continue
                found.update({p.partition_id: p for p in reply.partitions})
            return found
        load = asyncio.run(loads())
    rows = []
    for entry in current.partitions:
        p = load.get(entry.id)
        rows.append({"id": entry.id, "range": cmd_partition_ops.show_range(entry.low, entry.high),
                     "low": entry.low.hex(),
                     "high": None if entry.high is None else entry.high.hex(),
                     "server": entry.server or "-", "address": addresses.get(entry.server, ""),
                     "state": p.state if p else "unserved",
                     "ops_per_s": round(p.ops_per_s, 1) if p else 0.0,
                     "size_bytes": p.size_bytes if p else 0,
                     "memtable_bytes": p.memtable_bytes if p else 0,
                     "runs": p.runs if p else 0, "epoch": p.epoch if p else 0})
    if args.json:
        print(json.dumps({"map_version": current.version, "partitions": rows}, indent=2))
        return 0
    from tools import tables

    columns = ["ID", "RANGE", "SERVER", "STATE", "OPS/S", "SIZE", "MEMTABLE", "RUNS", "EPOCH"]
    tables.print_table(columns, ([r["id"], r["range"], r["server"], r["state"],
                                  r["ops_per_s"], r["size_bytes"], r["memtable_bytes"],
                                  r["runs"], r["epoch"]] for r in rows),
                       title=f"map version {current.version}",
                       right=["ID", "OPS/S", "SIZE", "MEMTABLE", "RUNS", "EPOCH"])
    return 0


def cmd_move(args: argparse.Namespace) -> int:
    from common.proto import partition_pb2 as pb

    cmd_partition_ops.call_leader(args.data_dir, "Move", pb.MoveRequest(
        partition_id=args.id, server=args.server), cmd_partition_ops.OP_TIMEOUT_S,
        f"{args.server} is loading partition {args.id}")
    print(f"partition {args.id} is served by {args.server}")
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    with sdk_client.client(args) as client:
        if args.action == "append":
            # Bytes as given: arguments as the OS passed them, stdin lines undecoded.
            records = [r.encode(errors="surrogateescape") for r in args.records] or \
                [line.rstrip(b"\n") for line in sys.stdin.buffer]
            if not records:
                raise InvalidArgument("nothing to append: give records or stdin lines")
            first = client.append(args.log, records, token=args.token)
            print(f"appended {len(records)} record(s) at {first}..{first + len(records) - 1}")
        elif args.action == "read":
            first, _ = client.peek(args.log)
            start = first if args.from_seq is None else args.from_seq
            for seq, data in client.read(args.log, start, args.limit):
                print(f"{seq}\t{sdk_client.show_bytes(data)}")
        elif args.action == "tail":
            _, next_seq = client.peek(args.log)
            start = next_seq if args.from_seq is None else args.from_seq
            for seq, data in client.subscribe(args.log, start):
                print(f"{seq}\t{sdk_client.show_bytes(data)}", flush=True)
            print(f"log {args.log} is sealed: nothing more to follow", file=sys.stderr)
        elif args.action == "peek":
            first, next_seq = client.peek(args.log)
            print(f"first {first} next {next_seq}")
        elif args.action == "trim":
            client.trim(args.log, args.upto)
            print(f"trimmed {args.log} below {args.upto}")
        elif args.action == "seal":
            client.seal(args.log)
            print(f"sealed {args.log}")
        elif args.action == "ls":
            for log in client.list_logs(args.prefix):
                print(log)
    return 0
