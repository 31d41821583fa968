"""The partition manager process: `stamp serve partition-manager --name pm-1 --dir DIR
--port P --lock ADDRS [--sm ADDRS] [--config FILE]`. Run two or more; the one holding the
leader lock acts (partition_layer/manager.py), the others stand by and answer map lookups.
With the stream managers' addresses it can tell whether a split or merge it left pending
committed (manager_ops.py); without them it asks the partition server again instead. While
its stamp is in a location, the leader reports its partitions' last sync times there
(partition_layer/geo_report.py)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import Iterable
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric

from common import metrics, rpc, server_main
from common.config import HOST, load_config
from common.errors import StampError
from common.process import write_ready
from common.proto import partition_pb2_grpc as pb_grpc
from location.geo_auth import SettingsCache, read_settings
from lock_service.client import LockClient
from lock_service.probe import LockServiceProbe
from partition_layer.geo_report import SyncReporter
from partition_layer.manager import PartitionManager
from partition_layer.manager_servicer import ManagerServicer
from stream_layer.sm_client import AsyncStreamManagerClient

log = logging.getLogger("stamp.partition_manager")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="stamp serve partition-manager",
                                description="Run one partition manager (leader or standby).")
    p.add_argument("--name", required=True, help="process name, e.g. pm-1")
    p.add_argument("--dir", required=True, type=Path, help="its directory (log, ready file)")
    p.add_argument("--host", default=HOST)
    p.add_argument("--port", type=int, default=0, help="gRPC port (0: pick a free one)")
    p.add_argument("--lock", required=True, help="lock service addresses, comma-separated")
    p.add_argument("--sm", default="", help="stream manager addresses, comma-separated")
    p.add_argument("--config", help="stamp config file (TOML)")
    server_main.add_watch_args(p)
    server_main.add_security_args(p)
    return p


def watch_manager(manager: PartitionManager) -> Iterable[Metric]:
    """Scrape-time gauges: leadership, the map version, and the servers heard from."""
    yield GaugeMetricFamily("stamp_pm_leader", "1 while this manager leads",
                            value=1 if manager.is_leader() else 0)
    yield GaugeMetricFamily("stamp_pm_map_version", "partition map version last seen",
                            value=manager.map_version)
    yield GaugeMetricFamily("stamp_pm_servers_heard", "partition servers heartbeating here",
                            value=len(manager.heartbeats))


async def serve(args: argparse.Namespace) -> None:
    config = load_config(args.config)
    limits = config.partition
    watch = await server_main.Watch.begin(args)
    locks = LockClient([a for a in args.lock.split(",") if a], holder=args.name)
    server = rpc.aio_server(limits.rpc_message_bytes_max)
    port = rpc.add_port(server, f"{args.host}:{args.port}")
    address = f"{args.host}:{port}"
    sm_addresses = [a for a in args.sm.split(",") if a]
    sm = AsyncStreamManagerClient(sm_addresses, config.stream_manager) if sm_addresses else None
    manager = PartitionManager(args.name, address, locks, limits, sm, config.partition_manager)
    pb_grpc.add_PartitionManagerServicer_to_server(ManagerServicer(manager), server)
    server_main.serve_faults(server, args)
    await watch.attach(server)
    metrics.on_scrape(lambda: watch_manager(manager))
    probe = LockServiceProbe([a for a in args.lock.split(",") if a], args.name, config.watch)
    await server.start()
    # Leader or standby, a manager does its job while it reaches the lock service (its map,
    # its leader lease).
    watch.healthy_when(probe.check)
    loop = asyncio.get_running_loop()
    assigner = loop.create_task(manager.run_forever())
    balancer = loop.create_task(manager.balancer.run_forever())
    reporter = SyncReporter(manager, SettingsCache(lambda: read_settings(locks)))
    reporting = loop.create_task(reporter.run_forever())
    write_ready(args.dir, args.name, address)
    log.info("%s serving on %s", args.name, address)

    await server_main.until_stopped()
    log.info("%s stopping", args.name)
    await watch.end()
    await asyncio.to_thread(probe.close)
    for task in (assigner, balancer, reporting):
        task.cancel()
    await reporter.close()
    await server.stop(grace=1.0)
    with contextlib.suppress(StampError):
        await manager.close()
    await asyncio.to_thread(locks.close)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    server_main.start_process(args.name, args.dir, security=args)
    server_main.run(serve(args))


if __name__ == "__main__":
    main()
