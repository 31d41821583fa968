"""The stream manager process: `stamp serve stream-manager --name sm-1 --dir DIR --port P
--raft-port R --peers RAFT=GRPC,... --secret-file DATA_DIR/stamp-secret`.

One replica of the Raft group (3 in a stamp). Its Raft journal is durable before a change is
acknowledged (common/raft.py); its Raft peers authenticate with the stamp secret
(common/stamp_secret.py). It writes `DIR/ready.json` once it serves gRPC; whether it
leads is another matter (clients follow NotLeader hints).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Iterable
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric

from common import metrics, rpc, server_main, stamp_secret
from common.config import HOST, StreamManagerLimits, load_config
from common.process import write_ready
from common.proto import stream_manager_pb2_grpc
from common.raft import RaftTuning
from stream_layer.extent_client import AsyncExtentClient
from stream_layer.stream_manager import records as s
from stream_layer.stream_manager.leader import StreamManagerLeader
from stream_layer.stream_manager.replica import StreamManagerReplica
from stream_layer.stream_manager.server import StreamManagerServicer
from stream_layer.stream_manager.state import StreamManagerState

log = logging.getLogger("stamp.stream_manager")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="stamp serve stream-manager",
                                description="Run one stream manager replica (Raft).")
    p.add_argument("--name", required=True, help="process name, e.g. sm-1")
    p.add_argument("--dir", required=True, type=Path, help="its directory (Raft journal, log)")
    p.add_argument("--host", default=HOST)
    p.add_argument("--port", type=int, required=True, help="gRPC port")
    p.add_argument("--raft-port", type=int, required=True, help="Raft port")
    p.add_argument("--peers", required=True,
                   help="every replica of the group, self included: RAFT_ADDR=GRPC_ADDR,...")
    p.add_argument("--config", help="stamp config file (TOML)")
    stamp_secret.add_arg(p)
    server_main.add_watch_args(p)
    server_main.add_security_args(p)
    return p


def watch_replica(leader: StreamManagerLeader) -> Iterable[Metric]:
    """Scrape-time gauges: Raft, the namespace, and the repair backlog (replicas on dead
    nodes still to copy, fragments on dead nodes still to rebuild; the same on every replica,
    acted on by the leader)."""
    yield from metrics.raft_families(leader.replica.raft_status())

    def look(st: StreamManagerState) -> tuple[int, dict[str, int], dict[str, int], int, int]:
        dead = {n.name for n in st.nodes.values() if n.state == s.DEAD}
        by_state: dict[str, int] = {}
        for extent in st.extents.values():
            by_state[extent.state] = by_state.get(extent.state, 0) + 1
        nodes: dict[str, int] = {}
        for node in st.nodes.values():
            nodes[node.state] = nodes.get(node.state, 0) + 1
        copies = sum(len(dead.intersection(e.replicas)) for e in st.extents.values()
                     if e.state == s.SEALED)
        rebuilds = sum(len(dead.intersection(e.fragments)) for e in st.extents.values()
                       if e.state == s.ERASURE_CODED)
        return len(st.streams), by_state, nodes, copies, rebuilds

    streams, extents, nodes, copies, rebuilds = leader.replica.read(look)
    yield GaugeMetricFamily("stamp_sm_streams", "streams", value=streams)
    family = GaugeMetricFamily("stamp_sm_extents", "extents by state", labels=["state"])
    for state, count in sorted(extents.items()):
        family.add_metric([state], count)
    yield family
    family = GaugeMetricFamily("stamp_sm_nodes", "extent nodes by state", labels=["state"])
    for state, count in sorted(nodes.items()):
        family.add_metric([state], count)
    yield family
    family = GaugeMetricFamily("stamp_sm_repair_backlog", "repairs still to do: replicas "
                               "of sealed extents, fragments of coded ones", labels=["kind"])
    family.add_metric(["replica"], copies)
    family.add_metric(["fragment"], rebuilds)
    yield family
    yield GaugeMetricFamily("stamp_sm_repairs_in_flight", "repairs under way (leader)",
                            value=leader.repair_budget.in_flight)


def parse_peers(text: str) -> dict[str, str]:
    peers = {}
    for item in filter(None, text.split(",")):
        raft, sep, grpc_address = item.partition("=")
        if not sep:
            raise SystemExit(f"--peers: {item!r} is not RAFT_ADDR=GRPC_ADDR")
        peers[raft.strip()] = grpc_address.strip()
    return peers


def raft_tuning(limits: StreamManagerLimits) -> RaftTuning:
    """The group's Raft timing from the config (CheckQuorum at the longest election
    timeout: a leader steps down once its followers may have elected another)."""
    return RaftTuning(election_timeout_min_s=limits.raft_election_timeout_min_ms / 1000,
                      election_timeout_max_s=limits.raft_election_timeout_max_ms / 1000,
                      heartbeat_interval_s=limits.raft_heartbeat_interval_ms / 1000,
                      leader_fallback_s=limits.raft_election_timeout_max_ms / 1000)


async def serve(args: argparse.Namespace, secret: bytes) -> None:
    config = load_config(args.config)
    limits = config.stream_manager
    watch = await server_main.Watch.begin(args)
    raft_address = f"{args.host}:{args.raft_port}"
    peers = parse_peers(args.peers)
    replica = StreamManagerReplica(raft_address, list(peers), args.dir / "raft",
                                   raft_tuning(limits), secret=secret)
    extents = AsyncExtentClient(config.extent_node)
    leader = StreamManagerLeader(replica, limits, extents)
    server = rpc.aio_server(limits.rpc_message_bytes_max)
    port = rpc.add_port(server, f"{args.host}:{args.port}")
    address = f"{args.host}:{port}"
    stream_manager_pb2_grpc.add_StreamManagerServicer_to_server(
        StreamManagerServicer(leader, args.name, peers), server)
    server_main.serve_faults(server, args)
    await watch.attach(server)
    metrics.on_scrape(lambda: watch_replica(leader))
    await server.start()
    # A replica does its job in a group that has a leader (itself or another it can name).
    watch.healthy_when(lambda: None if replica.leader_address() else "no Raft leader known")
    monitor = asyncio.get_running_loop().create_task(leader.monitor_forever())
    write_ready(args.dir, args.name, address)
    log.info("%s serving on %s (raft %s)", args.name, address, raft_address)

    await server_main.until_stopped()
    log.info("%s stopping", args.name)
    await watch.end()
    monitor.cancel()
    await server.stop(grace=1.0)
    await extents.close()
    replica.close()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    server_main.start_process(args.name, args.dir, security=args)
    secret = stamp_secret.read_or_exit(args.secret_file, args.name)
    server_main.run(serve(args, secret))


if __name__ == "__main__":
    main()
