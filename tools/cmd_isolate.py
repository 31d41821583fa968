"""`stamp isolate NAME --from PEER[,PEER...] | --from-all` and `stamp heal NAME`: network
partitions on a local stamp, without killing anyone (common/isolation.py).

The cut is made in NAME alone, both directions: each peer is named to it by every identity
it has (process name, gRPC address, Raft address), so NAME neither calls nor hears it, on
gRPC or Raft. `isolate` and `heal` are also the probe tests' helpers.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from common import isolation, rpc
from common.errors import InvalidArgument
from tools.local_stamp import LocalStamp


def register(commands: Any) -> None:
    isolate_cmd = commands.add_parser(
        "isolate", help="cut one process off from chosen peers, both directions (testing)",
        description="Cut a running process off from peers without killing it: it neither "
                    "calls nor hears them (gRPC and Raft) until 'stamp heal'. Clients "
                    "outside the stamp still reach it. E.g. stamp isolate ps-1 --from-all.")
    isolate_cmd.add_argument("name", help="process to isolate")
    peers = isolate_cmd.add_mutually_exclusive_group(required=True)
    peers.add_argument("--from", dest="peers", metavar="PEER[,PEER...]",
                       help="process names of the stamp to cut it off from")
    peers.add_argument("--from-all", action="store_true",
                       help="cut it off from every other process of the stamp")
    isolate_cmd.set_defaults(handler=cmd_isolate)

    heal_cmd = commands.add_parser("heal", help="lift every cut of 'stamp isolate' on a process")
    heal_cmd.add_argument("name", help="process to heal")
    heal_cmd.set_defaults(handler=cmd_heal)


def identities(stamp: LocalStamp, peers: Iterable[str]) -> list[str]:
    """Every name and address under which `peers` (process names) reach other processes."""
    found: list[str] = []
    for name in peers:
        record = stamp.record(name)  # NotFound for an unknown name
        found += [record.name, record.address]
        if record.extra.get("raft_address"):
            found.append(record.extra["raft_address"])
    return found


def isolate(stamp: LocalStamp, name: str, peers: Iterable[str] | None = None) -> list[str]:
    """Cut process `name` off from `peers` (None: every other process of the stamp), both
    directions; returns the peers' identities it is cut off from now."""
    others = [n for n in stamp.records if n != name] if peers is None else list(peers)
    if name in others:
        raise InvalidArgument(f"{name} cannot be cut off from itself")
    if not others:
        raise InvalidArgument("no peer to cut it off from")
    return rpc.isolate_remote(stamp.address(name), identities(stamp, others))


def heal(stamp: LocalStamp, name: str) -> None:
    """Lift every cut on process `name`."""
    rpc.heal_remote(stamp.address(name))


def cmd_isolate(args: argparse.Namespace) -> int:
    stamp = LocalStamp.load(args.data_dir)
    peers = None if args.from_all else isolation.parse(args.peers)
    if peers is not None and not peers:
        raise InvalidArgument("--from needs at least one process name")
    isolate(stamp, args.name, peers)
    shown = "every other process" if peers is None else ", ".join(peers)
    print(f"{args.name}: cut off from {shown} (both directions)")
    return 0


def cmd_heal(args: argparse.Namespace) -> int:
    heal(LocalStamp.load(args.data_dir), args.name)
    print(f"{args.name}: healed")
    return 0
