"""`stamp extent ls | seal | read | ec`: extents as the extent nodes hold them."""

from __future__ import annotations

import argparse
import json
from typing import Any

from common.errors import NotFound, StampError
from stream_layer import framing
from tools import cli_checks
from tools.local_stamp import LocalStamp


def register(commands: Any) -> None:
    extent = commands.add_parser("extent", help="list, seal and read extents")
    sub = extent.add_subparsers(dest="extent_command", metavar="ACTION", required=True)

    ls = sub.add_parser("ls", help="every extent on every live extent node")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(handler=cmd_ls)

    seal = sub.add_parser("seal", help="seal an extent at the smallest commit length of its "
                                       "reachable replicas")
    seal.add_argument("extent_id", type=cli_checks.extent_id, help="extent id (decimal or 0x...)")
    seal.set_defaults(handler=cmd_seal)

    read = sub.add_parser("read", help="print the blocks of an extent from one replica")
    read.add_argument("extent_id", type=cli_checks.extent_id, help="extent id (decimal or 0x...)")
    read.add_argument("--node", type=cli_checks.name,
                      help="replica to read from (default: the first that has it)")
    read.add_argument("--offset", type=cli_checks.byte_offset, default=0)
    read.add_argument("--length", type=cli_checks.byte_length, default=1 << 20)
    read.set_defaults(handler=cmd_read)

    ec = sub.add_parser("ec", help="erasure-code a sealed extent (RS k+m fragments on k+m "
                                   "extent nodes) and drop its replicas; rerun to finish an "
                                   "interrupted conversion")
    ec.add_argument("extent_id", type=cli_checks.extent_id, help="extent id (decimal or 0x...)")
    ec.add_argument("--k", type=cli_checks.fragment_count,
                    help="data fragments (default: 6 with >= 9 extent "
                                          "nodes, else 3 or 2)")
    ec.add_argument("--m", type=cli_checks.fragment_count,
                    help="parity fragments (default: 3, else 2 or 1)")
    ec.set_defaults(handler=cmd_ec)


def _collect(stamp: LocalStamp) -> dict[int, dict[str, Any]]:
    from stream_layer.extent_client import ExtentClient

    extents: dict[int, dict[str, Any]] = {}
    with ExtentClient() as client:
        for node in stamp.extent_nodes():
            if not stamp.alive(node.name):
                continue
            try:
                infos = client.list_extents(node.address)
            except StampError:
                continue
            for info in infos:
                entry = extents.setdefault(info.extent_id, {
                    "extent_id": info.extent_id, "replicas": list(info.replicas), "holders": {}})
                entry["holders"][node.name] = {"length": info.length, "sealed": info.sealed}
    return extents


def _from_stream_manager(stamp: LocalStamp) -> list[dict[str, Any]]:
    import asyncio

    from stream_layer.sm_client import AsyncStreamManagerClient

    async def listing() -> list[Any]:
        client = AsyncStreamManagerClient([r.address for r in stamp.stream_managers()],
                                          stamp.config.stream_manager)
        try:
            return await client.list_extents()
        finally:
            await client.close()
    return [{"extent_id": e.extent_id, "state": e.state, "sealed_length": e.sealed_length,
             "replicas": list(e.replicas), "streams": list(e.streams),
             "fragments": list(e.fragments), "ec_k": e.ec_k, "ec_m": e.ec_m}
            for e in asyncio.run(listing())]


def cmd_ls(args: argparse.Namespace) -> int:
    from tools import tables

    stamp = LocalStamp.load(args.data_dir)
    if stamp.stream_managers():
        rows = _from_stream_manager(stamp)
        if args.json:
            print(json.dumps(rows, indent=2))
            return 0
        table = []
        for row in rows:
            length = row["sealed_length"] if row["state"] != "open" else "-"
            where = ",".join(row["replicas"])
            if row["fragments"]:  # erasure-coded: k data then m parity fragments
                where = (f"RS({row['ec_k']},{row['ec_m']}):{','.join(row['fragments'])}"
                         + (f" +{where}" if where else ""))
            table.append([row["extent_id"], row["state"], length, where,
                          ",".join(row["streams"]) or "-"])
        tables.print_table(["EXTENT", "STATE", "LENGTH", "REPLICAS", "STREAMS"], table,
                           right=["EXTENT", "LENGTH"])
        return 0
    extents = _collect(stamp)
    if args.json:
        print(json.dumps(sorted(extents.values(), key=lambda e: e["extent_id"]), indent=2))
        return 0
    table = []
    for extent_id, entry in sorted(extents.items()):
        holders = entry["holders"]
        sealed = any(h["sealed"] for h in holders.values())
        length = max(h["length"] for h in holders.values())
        where = ", ".join(f"{name}:{h['length']}" for name, h in sorted(holders.items()))
        table.append([f"{extent_id:#x}", "sealed" if sealed else "open", length, where])
    tables.print_table(["EXTENT", "STATE", "LENGTH", "REPLICAS (length per holder)"], table,
                       right=["LENGTH"])
    return 0


def cmd_seal(args: argparse.Namespace) -> int:
    import asyncio

    from stream_layer.extent_client import AsyncExtentClient
    from stream_layer.seal import seal_extent
    from stream_layer.sm_client import AsyncStreamManagerClient

    stamp = LocalStamp.load(args.data_dir)
    if stamp.stream_managers():
        async def seal_recorded() -> Any:
            client = AsyncStreamManagerClient([r.address for r in stamp.stream_managers()],
                                              stamp.config.stream_manager)
            try:
                return await client.seal_extent(args.extent_id)
            finally:
                await client.close()
        extent = asyncio.run(seal_recorded())
        print(f"extent {args.extent_id} sealed at {extent.sealed_length} (recorded by the "
              f"stream manager; replicas {', '.join(extent.replicas)})")
        return 0
    entry = _collect(stamp).get(args.extent_id)
    if entry is None:
        raise NotFound(f"no live extent node holds extent {args.extent_id:#x}")

    async def seal() -> tuple[int, list[str]]:
        client = AsyncExtentClient()
        try:
            return await seal_extent(client, args.extent_id, entry["replicas"])
        finally:
            await client.close()
    length, sealed = asyncio.run(seal())
    print(f"extent {args.extent_id:#x} sealed at {length} on "
          f"{', '.join(stamp.name_of(a) for a in sealed)}")
    return 0


def cmd_read(args: argparse.Namespace) -> int:
    from stream_layer.extent_client import ExtentClient

    stamp = LocalStamp.load(args.data_dir)
    entry = _collect(stamp).get(args.extent_id)
    if entry is None:
        raise NotFound(f"no live extent node holds extent {args.extent_id:#x}")
    node = args.node or sorted(entry["holders"])[0]
    with ExtentClient() as client:
        frames = client.read_frames(stamp.address(node), args.extent_id, args.offset,
                                    args.length)
    from tools import tables

    rows: list[list[Any]] = []
    try:
        for pos, payload in framing.iter_frames(frames, f"extent {args.extent_id:#x}"):
            rows.append([args.offset + pos, len(payload),
                         f"{bytes(payload[:60])!r}{'...' if len(payload) > 60 else ''}"])
    finally:  # a damaged block: the good ones before it are shown, then the error
        tables.print_table(["OFFSET", "BYTES", "DATA"], rows, right=["OFFSET", "BYTES"])
    return 0


def cmd_ec(args: argparse.Namespace) -> int:
    import asyncio

    from common import faults
    from common.errors import InvalidArgument
    from stream_layer.ec.convert import convert_extent
    from stream_layer.extent_client import AsyncExtentClient
    from stream_layer.sm_client import AsyncStreamManagerClient

    if (args.k is None) != (args.m is None):
        raise InvalidArgument("give both --k and --m, or neither")
    faults.arm_from_env()  # STAMP_FAULTS: the crash tests stop a conversion half way
    stamp = LocalStamp.load(args.data_dir)
    if not stamp.stream_managers():
        raise InvalidArgument("erasure coding is recorded by the stream manager: this stamp "
                              "has none")

    async def convert() -> Any:
        sm = AsyncStreamManagerClient([r.address for r in stamp.stream_managers()],
                                      stamp.config.stream_manager)
        extents = AsyncExtentClient(stamp.config.extent_node)
        try:
            return await convert_extent(sm, extents, args.extent_id, args.k, args.m)
        finally:
            await extents.close()
            await sm.close()
    from tools.progress import waiting

    # Encoding reads the whole extent and writes k+m fragments: seconds for a full one.
    with waiting("extent ec", f"erasure-coding extent {args.extent_id}"):
        info = asyncio.run(convert())
    print(f"extent {args.extent_id} erasure-coded as RS({info.ec_k},{info.ec_m}): fragments "
          f"on {', '.join(info.fragments)}")
    if info.replicas:
        print(f"replicas not deleted yet (rerun to finish): {', '.join(info.replicas)}")
        return 1
    return 0
