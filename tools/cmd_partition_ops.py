"""`stamp partition split | merge | history | balance`: an operator's hand on the range
partitions (issue 17), straight to the leading partition manager.

- split ID [--key ACCOUNT/PARTITION_NAME]: cut a partition in two at the first key of that
  partition name (default: the balancing policy's key, from the partition's load);
- merge ID [ID2]: join ID with its right neighbour ID2 (default: whichever that is);
- history [--json]: the last operations on the map, with trigger, duration and the time
  the range was unavailable;
- balance [--dry-run]: what the balancing policy decides now and why; without --dry-run,
  do it.
Each split or merge prints what it did and how long the range was unavailable. A mistake
(unknown id, key outside the range, partitions not adjacent) is one line, exit 1.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from common.errors import InvalidArgument, NotLeader, StampError, Unavailable
from tools import cli_checks, progress

OP_TIMEOUT_S = 180.0  # a split or merge, and a merge's move before it
QUERY_TIMEOUT_S = 30.0
STATUS_TIMEOUT_S = 5.0  # who leads: a PM that does not answer this fast is passed over
LEADER_TRIES_MAX = 3  # leadership moving while we ask: a PM lease lasts seconds
LEADER_RETRY_DELAY_S = 0.5


def positive_id(text: str) -> int:
    value = cli_checks.partition_id(text)
    if value == 0:
        raise argparse.ArgumentTypeError("a partition id is 1 or more (see 'stamp partition ls')")
    return value


positive_id.__name__ = "a partition id"


def split_key(text: str) -> bytes:
    """ACCOUNT/PARTITION_NAME -> the first key of that partition name (a split never cuts a
    name)."""
    from partition_layer import keys

    account, slash, pname = text.partition("/")
    if not slash or not account:
        raise argparse.ArgumentTypeError(f"a split key is ACCOUNT/PARTITION_NAME, not {text!r}")
    for part in (account, pname):
        if part:
            cli_checks.name(part)
    return keys.encode_key(account, pname, keys.KIND_META, b"")


split_key.__name__ = "a split key"


def register(sub: Any) -> None:
    split = sub.add_parser(
        "split", help="split a partition in two at a partition name",
        description="Split range partition ID in two, pointer-only (no data is copied): the "
                    "left keeps the keys below KEY, the right KEY and above; both stay on "
                    "the same server. Prints the new ids and how long the range was "
                    "unavailable.")
    split.add_argument("id", type=positive_id, metavar="ID",
                       help="partition id (see 'stamp partition ls')")
    split.add_argument("--key", type=split_key, metavar="ACCOUNT/PARTITION_NAME",
                       help="the right child's first partition name (default: the balancing "
                            "policy's key from the partition's load, else its size midpoint)")
    split.set_defaults(handler=cmd_split)
    merge = sub.add_parser(
        "merge", help="merge a partition with its right neighbour",
        description="Merge range partition ID with the adjacent ID2 to its right (default: "
                    "its right neighbour) into one new partition, pointer-only. If they are "
                    "on different servers ID2 moves to ID's first. Prints the new id and how "
                    "long the range was unavailable.")
    merge.add_argument("id", type=positive_id, metavar="ID", help="the left partition's id")
    merge.add_argument("id2", type=positive_id, nargs="?", default=0, metavar="ID2",
                       help="the right partition's id (default: ID's right neighbour)")
    merge.set_defaults(handler=cmd_merge)
    history = sub.add_parser(
        "history", help="the last splits, merges, moves and reassignments",
        description="The last operations on the partition map, oldest first: what, why "
                    "(trigger: operator, load, size, count, dead server), how long it took, "
                    "how long the range was unavailable, and the map version that published "
                    "it.")
    history.add_argument("--json", action="store_true", help="print JSON")
    history.add_argument("--limit", type=cli_checks.record_count, default=None,
                         help="only the newest N")
    history.set_defaults(handler=cmd_history)
    balance = sub.add_parser(
        "balance", help="run the balancing policy now (--dry-run: only show it)",
        description="Ask the balancing policy what to do with the current load: splits, "
                    "merges and moves, each with its reason, and the candidates it skipped. "
                    "Without --dry-run the manager does them now (at most "
                    "partition_manager.actions_per_pass_max).")
    balance.add_argument("--dry-run", action="store_true",
                         help="only print what it would do, and why")
    balance.add_argument("--json", action="store_true", help="print JSON")
    balance.set_defaults(handler=cmd_balance)


def call_leader(data_dir: str, method: str, request: Any, timeout_s: float,
                waiting_for: str = "") -> Any:
    """`method` on the leading partition manager; `waiting_for` (say what it does): a
    spinner on stderr if the call lasts (tools/progress.py: a split of a busy partition,
    a merge that moves one side first, a balancing pass). The leader is found first (each PM's
    Status names it), and only it is asked: a split or merge whose leader died under it is
    not sent again to the next one (the op is pending in the map; the new leader finishes
    it). A NotLeader answer (leadership moved before the call arrived: nothing was done)
    looks for the leader again."""
    import asyncio

    from common import rpc
    from common.proto import partition_pb2 as pb
    from common.proto import partition_pb2_grpc as pb_grpc
    from common.stamp_file import addresses_of

    cli_checks.require_running(data_dir, "partition-manager")
    addresses = addresses_of(data_dir, "partition-manager")

    async def leader_address() -> str:
        why: list[str] = []
        for address in addresses:
            async with rpc.aio_channel(address, 16 << 20) as channel:
                try:
                    status = await rpc.call(pb_grpc.PartitionManagerStub(channel).Status(
                        pb.ManagerStatusRequest(), timeout=STATUS_TIMEOUT_S))
                except StampError as exc:
                    why.append(f"{address}: {exc}")
                    continue
            if status.leader:
                return address
            if status.leader_address in addresses:
                return str(status.leader_address)
        raise Unavailable("no partition manager leads now" + (f" ({'; '.join(why)})"
                                                              if why else ""))

    async def call() -> Any:
        for _ in range(LEADER_TRIES_MAX - 1):
            address = await leader_address()
            async with rpc.aio_channel(address, 16 << 20) as channel:
                try:
                    stub = pb_grpc.PartitionManagerStub(channel)
                    return await rpc.call(getattr(stub, method)(request, timeout=timeout_s))
                except NotLeader:
                    await asyncio.sleep(LEADER_RETRY_DELAY_S)
        address = await leader_address()
        async with rpc.aio_channel(address, 16 << 20) as channel:
            stub = pb_grpc.PartitionManagerStub(channel)
            return await rpc.call(getattr(stub, method)(request, timeout=timeout_s))
    if not waiting_for:
        return asyncio.run(call())
    with progress.waiting(f"partition {method.lower()}", waiting_for):
        return asyncio.run(call())


def show_range(low: bytes, high: bytes | None) -> str:
    """A key range as account/name bounds (hex for a key that is not a name's)."""
    from partition_layer import keys

    def show(key: bytes) -> str:
        try:
            account, pname, _, _ = keys.decode_key(key)
            return f"{account}/{pname}"
        except Exception:
            return key.hex() or "-inf"
    return f"[{show(low) if low else '-inf'}, {show(high) if high is not None else '+inf'})"


def _describe(reply: Any, what: str) -> str:
    done = reply.done
    entries = {p.id: p for p in reply.map.partitions}
    made = ", ".join(
        f"{i} {show_range(entries[i].range.low, entries[i].range.high if entries[i].range.has_high else None)}"  # noqa: E501
        if i in entries else str(i) for i in done.to_ids)
    return (f"{what} partition {'+'.join(map(str, done.from_ids))} into {made} on "
            f"{done.server} (map version {done.map_version}): took {done.seconds:.3f} s, "
            f"the range was unavailable {done.unavailable_s * 1000:.0f} ms")


def cmd_split(args: argparse.Namespace) -> int:
    from common.proto import partition_pb2 as pb

    reply = call_leader(args.data_dir, "Split", pb.SplitPartitionRequest(
        partition_id=args.id, key=args.key or b"", trigger="operator"), OP_TIMEOUT_S,
        f"the partition manager is splitting partition {args.id}")
    print(_describe(reply, "split"))
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from common.proto import partition_pb2 as pb

    if args.id2 == args.id:
        raise InvalidArgument(f"a partition cannot merge with itself ({args.id})")
    reply = call_leader(args.data_dir, "Merge", pb.MergePartitionsRequest(
        left_id=args.id, right_id=args.id2, trigger="operator"), OP_TIMEOUT_S,
        f"the partition manager is merging partition {args.id} with "
        f"{args.id2 or 'its right neighbour'}")
    print(_describe(reply, "merged"))
    return 0


def history_row(entry: Any) -> dict[str, Any]:
    return {"op": entry.op, "trigger": entry.trigger, "from_ids": list(entry.from_ids),
            "to_ids": list(entry.to_ids), "key": entry.key.hex(), "server": entry.server,
            "started_at": entry.started_at, "seconds": round(entry.seconds, 6),
            "unavailable_s": round(entry.unavailable_s, 6), "result": entry.result,
            "map_version": entry.map_version}


def cmd_history(args: argparse.Namespace) -> int:
    import time

    from common.proto import partition_pb2 as pb

    reply = call_leader(args.data_dir, "History", pb.HistoryRequest(limit=args.limit or 0),
                        QUERY_TIMEOUT_S)
    rows = [history_row(e) for e in reply.entries]
    if args.json:
        print(json.dumps({"entries": rows}, indent=2))
        return 0
    if not rows:
        print("no operations yet")
        return 0
    from tools import tables

    tables.print_table(
        ["WHEN (UTC)", "OP", "TRIGGER", "FROM", "TO", "SERVER", "SECONDS", "UNAVAIL_MS", "MAP",
         "RESULT"],
        ([time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r["started_at"])), r["op"],
          r["trigger"], _ids(r["from_ids"]), _ids(r["to_ids"]), r["server"] or None,
          f"{r['seconds']:.3f}", f"{r['unavailable_s'] * 1000:.0f}", r["map_version"] or None,
          r["result"]] for r in rows),
        right=["SECONDS", "UNAVAIL_MS", "MAP"])
    return 0


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids)) or "-"


def cmd_balance(args: argparse.Namespace) -> int:
    from common.proto import partition_pb2 as pb

    reply = call_leader(args.data_dir, "Balance", pb.BalanceRequest(dry_run=args.dry_run),
                        OP_TIMEOUT_S if not args.dry_run else QUERY_TIMEOUT_S,
                        "" if args.dry_run else
                        "the partition manager is running the balancing policy's actions")
    actions = [{"op": a.op, "partition_ids": list(a.partition_ids), "key": a.key.hex(),
                "server": a.server, "trigger": a.trigger, "reason": a.reason}
               for a in reply.actions]
    if args.json:
        print(json.dumps({"dry_run": args.dry_run, "actions": actions,
                          "skipped": list(reply.skipped)}, indent=2))
        return 0
    verb: Callable[[str], str] = (lambda op: f"would {op}") if args.dry_run else \
        (lambda op: f"ran {op} of")
    if not actions:
        print("nothing to do now" + (" (dry run)" if args.dry_run else ""))
    for a in actions:
        target = f" at {_key_name(bytes.fromhex(a['key']))}" if a["key"] else ""
        target += f" to {a['server']}" if a["server"] else ""
        print(f"{verb(a['op'])} partition {_ids(a['partition_ids'])}{target} "
              f"[{a['trigger']}]: {a['reason']}")
    for why in reply.skipped:
        print(f"skipped: {why}")
    if actions and not args.dry_run:
        print("results: 'stamp partition history'")
    return 0


def _key_name(key: bytes) -> str:
    from partition_layer import keys

    try:
        account, pname, _, _ = keys.decode_key(key)
        return f"{account}/{pname}"
    except StampError:
        return key.hex()
