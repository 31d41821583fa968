"""`stamp up | down | status | kill | start | fault | demo`: running a local stamp."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from common import rpc
from common.config import load_config
from common.errors import NotFound, StampError
from tools import cli_checks
from tools.local_stamp import LocalStamp
from tools.progress import WAIT_SHOW_AFTER_S, Progress


def register(commands: Any) -> None:
    up = commands.add_parser("up", help="start a whole stamp on this machine",
                             description="Start every process of the stamp (default config: 9 "
                                         "extent nodes in 3 fault domains) and wait until all "
                                         "serve. Processes already running are left alone.")
    up.add_argument("--config", help="a stamp config file (TOML) overriding the default")
    up.add_argument("--only", metavar="HOST",
                    help="start only the processes the config's [hosts] puts on HOST (each "
                         "host of a multi-host stamp runs this), without waiting for the rest")
    up.add_argument("--faults", action="store_true",
                    help="its processes serve the Faults service ('stamp fault', 'stamp "
                         "isolate'; for testing: it checks no credentials)")
    up.add_argument("--trace", nargs="?", const="", metavar="FILE",
                    help="trace the processes started (OpenTelemetry, common/tracing.py): "
                         "their spans go to FILE as JSON lines (default: DATA_DIR/"
                         "traces.jsonl), for 'stamp trace REQUEST_ID'")
    up.set_defaults(handler=cmd_up)

    down = commands.add_parser("down", help="stop the stamp (SIGTERM, then SIGKILL)")
    down.set_defaults(handler=cmd_down)

    status = commands.add_parser("status", help="show every process of the stamp")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(handler=cmd_status)

    kill = commands.add_parser("kill", help="SIGKILL one process by name (e.g. en-3)")
    kill.add_argument("name", type=cli_checks.name)
    kill.set_defaults(handler=cmd_kill)

    start = commands.add_parser("start", help="restart one stopped process by name")
    start.add_argument("name", type=cli_checks.name)
    start.set_defaults(handler=cmd_start)

    fault = commands.add_parser(
        "fault", help="arm or disarm fault points in a running process (testing)",
        description="Arm fault points in a running server, e.g. "
                    "stamp fault en-2 'journal.before_fsync=delay:200'.")
    fault.add_argument("name", type=cli_checks.name, help="process name")
    fault.add_argument("spec", nargs="?", default="", type=cli_checks.fault_spec,
                       help="name=action[:arg][,after=N][,times=N]; ... (empty: disarm all)")
    fault.set_defaults(handler=cmd_fault)

    demo = commands.add_parser(
        "demo", help="a short demo: logs, entities, scans and shared access tokens through the "
                     "SDK and a front end, then the stream layer's replicated appends across "
                     "a killed extent node")
    demo.set_defaults(handler=cmd_demo)


def _stamp(args: argparse.Namespace) -> LocalStamp:
    return LocalStamp.load(args.data_dir)


def cmd_up(args: argparse.Namespace) -> int:
    """Start the stamp: an existing one keeps its config unless --config names another."""
    try:
        stamp = LocalStamp.load(args.data_dir)
        if args.config:
            stamp.config, stamp.config_path = load_config(args.config), args.config
    except NotFound:
        stamp = LocalStamp(args.data_dir, load_config(args.config), args.config)
    if args.faults:
        stamp.faults = True  # for processes planned now; the others keep their command line
    if args.trace is not None:  # the processes started now inherit it (common/tracing.py)
        from tools.cmd_trace import TRACE_FILE_NAME

        trace_file = Path(args.trace or stamp.data_dir / TRACE_FILE_NAME).resolve()
        os.environ["STAMP_TRACE_FILE"] = str(trace_file)
    with Progress("up") as progress:
        started = stamp.up(only=args.only, progress=progress)
    if args.only:
        print(f"stamp up in {stamp.data_dir}: started {len(started)} processes on {args.only}")
    else:
        running = len(stamp.records) - len(started)
        print(f"stamp up in {stamp.data_dir}: started {len(started)} processes"
              + (f", {running} already running" if running else ""))
    print(f"endpoints: {stamp.stamp_file}")
    if args.trace is not None:
        print(f"traces: {trace_file} (of the processes started now; 'stamp trace "
              f"REQUEST_ID --file {trace_file}')")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    with Progress("down", show_after_s=WAIT_SHOW_AFTER_S) as progress:
        stopped = _stamp(args).down(progress=progress)
    print(f"stopped {len(stopped)} processes" if stopped else "nothing was running")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from tools import tables

    stamp = _stamp(args)
    rows = asyncio.run(status_rows(stamp))
    if args.json:
        print(json.dumps({"data_dir": str(stamp.data_dir), "processes": rows}, indent=2))
        return 0
    tables.print_table(
        ["NAME", "KIND", "PID", "ADDRESS", "FD", "HEALTH", "STATE", "EXTENTS", "BYTES",
         "DETAIL"],
        ([row["name"], row["kind"], row["pid"] or None, row["address"],
          row["fault_domain"] or None, row["health"], _state(row), row.get("extents"),
          row.get("bytes"), _detail(row)] for row in rows),
        right=["PID", "EXTENTS", "BYTES"])
    return 0


def _state(row: dict[str, Any]) -> str:
    return row.get("role") or ("serving" if row.get("serving") else
                               "up" if row["alive"] else "down")


def _detail(row: dict[str, Any]) -> str:
    if "journal_bytes" in row:
        return f"journal {row['journal_bytes']} B"
    if "streams" in row:
        return f"applied {row['applied_index']}, {row['streams']} streams"
    if "leases" in row:
        return f"applied {row['applied_index']}, {row['leases']} leases, {row['keys']} keys"
    if "map_version" in row:
        return f"map version {row['map_version']}"
    if "partitions" in row:
        return f"partitions {row['partitions']}, {row['ops_per_s']} ops/s"
    if "throttled" in row:
        return (f"{row['requests']} requests, {row['refused']} refused, "
                f"{row['throttled']} throttled")
    return str(row.get("error", ""))


async def status_rows(stamp: LocalStamp) -> list[dict[str, Any]]:
    """One row per process: alive by pid, its health (the gRPC health service), and what it
    says of itself when asked."""
    from common import health
    from stream_layer.extent_client import AsyncExtentClient
    from stream_layer.sm_client import AsyncStreamManagerClient
    from tools.local_stamp import (
        KIND_EXTENT_NODE,
        KIND_FRONT_END,
        KIND_JOB_SCHEDULER,
        KIND_LOCK,
        KIND_PARTITION_MANAGER,
        KIND_PARTITION_SERVER,
        KIND_STREAM_MANAGER,
    )

    # Every process's health at once (common/health.py): what `stamp status` reports a
    # killed or frozen process as within the health RPC's deadline.
    healths = await health.check_many([r.address for r in stamp.records.values()],
                                      stamp.config.watch.health_rpc_timeout_ms / 1000)
    locks = _lock_client(stamp)
    extents = AsyncExtentClient()
    sms = AsyncStreamManagerClient([r.address for r in stamp.stream_managers()] or ["-"])
    rows = []
    try:
        for rec in stamp.records.values():
            row: dict[str, Any] = {"name": rec.name, "kind": rec.kind, "pid": rec.pid,
                                   "address": rec.address, "fault_domain": rec.fault_domain,
                                   "alive": stamp.alive(rec.name), "serving": False,
                                   "health": healths.get(rec.address, health.UNREACHABLE),
                                   "metrics_address": rec.metrics_address}
            rows.append(row)
            if not row["alive"] or row["health"] == health.UNREACHABLE:
                # A frozen or cut-off process just missed the health deadline: asking it
                # more would only make `stamp status` wait as long again.
                continue
            try:
                if rec.kind == KIND_EXTENT_NODE:
                    status = await extents.node_status(rec.address)
                    row.update(extents=status.extents, bytes=status.bytes,
                               journal_bytes=status.journal_bytes, serving=True)
                elif rec.kind == KIND_STREAM_MANAGER:
                    sm = await sms.status(rec.address)
                    row.update(role="leader" if sm.leader else "follower",
                               applied_index=sm.applied_index, streams=sm.streams,
                               extents=sm.extents, serving=True)
                elif rec.kind == KIND_LOCK and locks is not None:
                    lock = await asyncio.to_thread(locks.status, rec.address, 1.0)
                    row.update(role=lock.role, applied_index=lock.last_applied,
                               leases=lock.leases, keys=lock.keys, serving=True)
                elif rec.kind == KIND_PARTITION_MANAGER:
                    pm = await _pm_status(rec.address)
                    row.update(role="leader" if pm.leader else "standby",
                               map_version=pm.map_version, serving=True)
                elif rec.kind == KIND_PARTITION_SERVER:
                    load = await _ps_status(rec.address)
                    row.update(partitions=[p.partition_id for p in load.partitions
                                           if p.state == "serving"],
                               ops_per_s=round(sum(p.ops_per_s for p in load.partitions), 1),
                               bytes=sum(p.size_bytes for p in load.partitions), serving=True)
                elif rec.kind == KIND_JOB_SCHEDULER and locks is not None:
                    row.update(role=await asyncio.to_thread(_scheduler_role, locks, rec.name),
                               serving=True)
                elif rec.kind == KIND_FRONT_END:
                    fe = await _fe_status(rec.address)
                    # Refusals at the door (signature, permission, malformed) and for load.
                    row.update(requests=fe.requests, throttled=fe.throttled,
                               refused=fe.refused_unauthenticated + fe.refused_permission
                               + fe.refused_invalid, serving=True)
            except StampError as exc:
                row.update(error=str(exc))
    finally:
        await extents.close()
        await sms.close()
        if locks is not None:
            locks.close()
    return rows


def _scheduler_role(locks: Any, name: str) -> str:
    """active (it holds the scheduler lease) or standby (spark/scheduler.py)."""
    from spark.scheduler import active_scheduler

    active = active_scheduler(locks)
    return "active" if active is not None and active.get("name") == name else "standby"


async def _pm_status(address: str) -> Any:
    from common.proto import partition_pb2 as pb
    from common.proto import partition_pb2_grpc as pb_grpc

    async with rpc.aio_channel(address, 16 << 20) as channel:
        return await rpc.call(pb_grpc.PartitionManagerStub(channel).Status(
            pb.ManagerStatusRequest(), timeout=2))


async def _ps_status(address: str) -> Any:
    from common.proto import partition_pb2 as pb
    from common.proto import partition_pb2_grpc as pb_grpc

    async with rpc.aio_channel(address, 16 << 20) as channel:
        return await rpc.call(pb_grpc.PartitionServerStub(channel).Status(
            pb.ServerStatusRequest(), timeout=2))


async def _fe_status(address: str) -> Any:
    from common.proto import frontend_pb2 as fe_pb
    from common.proto import frontend_pb2_grpc as fe_grpc

    async with rpc.aio_channel(address, 16 << 20) as channel:
        return await rpc.call(fe_grpc.FrontEndStub(channel).Status(
            fe_pb.FrontEndStatusRequest(), timeout=2))


def _lock_client(stamp: LocalStamp) -> Any:
    if not stamp.lock_servers():
        return None
    from lock_service.client import LockClient

    return LockClient([r.address for r in stamp.lock_servers()], holder="stamp-cli")


def cmd_kill(args: argparse.Namespace) -> int:
    stamp = _stamp(args)
    pid = stamp.record(args.name).pid
    stamp.kill(args.name)
    print(f"killed {args.name} (pid {pid}) with SIGKILL")
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    stamp = _stamp(args)
    with Progress("start", show_after_s=WAIT_SHOW_AFTER_S) as progress:
        stamp.start(args.name, progress=progress)
    rec = stamp.record(args.name)
    print(f"started {args.name} (pid {rec.pid}) on {rec.address}")
    return 0


def cmd_fault(args: argparse.Namespace) -> int:
    address = _stamp(args).address(args.name)
    if args.spec:
        rpc.arm_remote(address, args.spec)
        print(f"{args.name}: armed {args.spec}")
    else:
        with rpc.sync_channel(address, 1 << 20) as channel:
            from common.proto import faults_pb2, faults_pb2_grpc
            faults_pb2_grpc.FaultsStub(channel).Disarm(faults_pb2.DisarmRequest(), timeout=5)
        print(f"{args.name}: all fault points disarmed")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from tools.demo import run_demo

    run_demo(_stamp(args))
    return 0

