"""Process entry of one lock-service replica (§3):

    python -m lock_service.main --name lock-1 --dir DIR --port P --raft-port R \
        --peers 127.0.0.1:R2,127.0.0.1:R3 --secret-file DATA_DIR/stamp-secret

Serves gRPC on HOST:P (0 picks a free port) and Raft (pysyncobj) on HOST:R; keeps its journal
and snapshots under DIR/raft. Raft peers authenticate with the stamp secret (its file's path
on the command line, never the secret: common/stamp_secret.py). Once it accepts RPCs it
writes DIR/ready.json (`common.process.write_ready`). SIGTERM or SIGINT stops it cleanly;
SIGKILL is survived by design (the journal is durable). Logs go to stderr.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterable
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric

from common import metrics, server_main, stamp_secret
from common.config import HOST
from common.process import write_ready
from common.proto import lock_service_pb2_grpc as pb_grpc
from common.raft import RaftTuning
from common.rpc import add_port, aio_server
from lock_service import limits
from lock_service.replica import LockReplica
from lock_service.server import LockServicer

log = logging.getLogger("lock_service")

STOP_GRACE_S = 1.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="lock_service.main",
                                     description="one replica of Stamp's lock service")
    parser.add_argument("--name", required=True, help="process name, e.g. lock-1")
    parser.add_argument("--dir", required=True, type=Path, help="this replica's directory")
    parser.add_argument("--host", default=HOST)
    parser.add_argument("--port", type=int, default=0, help="gRPC port (0: pick a free one)")
    parser.add_argument("--raft-port", type=int, required=True, help="Raft (pysyncobj) port")
    parser.add_argument("--peers", default="",
                        help="comma-separated Raft addresses (host:port) of the other replicas")
    parser.add_argument("--election-timeout-ms", type=int, nargs=2, metavar=("MIN", "MAX"),
                        help="override the Raft election timeout range")
    parser.add_argument("--log-level", default="INFO")
    stamp_secret.add_arg(parser)
    server_main.add_watch_args(parser)
    server_main.add_security_args(parser)
    args = parser.parse_args(argv)
    if args.raft_port <= 0:
        parser.error("--raft-port must be a real port: peers must know it in advance")
    return args


def watch_replica(replica: LockReplica) -> Iterable[Metric]:
    """Scrape-time gauges: Raft, leases and keys."""
    yield from metrics.raft_families(replica.raft_status())
    leases, keys = replica.read(lambda state: (len(state.leases), len(state.kv)))
    yield GaugeMetricFamily("stamp_lock_leases", "leases held (locks and sessions)",
                            value=leases)
    yield GaugeMetricFamily("stamp_lock_keys", "keys in the replicated store", value=keys)


def lock_tuning(election_min_s: float, election_max_s: float) -> RaftTuning:
    """The lock group's Raft timing: heartbeats every HEARTBEAT_INTERVAL_S, or more often
    when a shorter election timeout is asked for (tests): a quarter of its minimum."""
    return RaftTuning(election_timeout_min_s=election_min_s,
                      election_timeout_max_s=election_max_s,
                      heartbeat_interval_s=min(limits.HEARTBEAT_INTERVAL_S, election_min_s / 4))


async def serve(args: argparse.Namespace, secret: bytes) -> None:
    watch = await server_main.Watch.begin(args)
    raft_address = f"{args.host}:{args.raft_port}"
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    tuning = lock_tuning(limits.ELECTION_TIMEOUT_MIN_S, limits.ELECTION_TIMEOUT_MAX_S)
    if args.election_timeout_ms:
        low, high = args.election_timeout_ms
        tuning = lock_tuning(low / 1000, high / 1000)
    replica = LockReplica(raft_address, [raft_address, *peers], args.dir / "raft", tuning,
                          secret=secret)
    server = aio_server(limits.RPC_MESSAGE_BYTES_MAX)
    port = add_port(server, f"{args.host}:{args.port}")
    address = f"{args.host}:{port}"
    servicer = LockServicer(replica, args.name, address)
    pb_grpc.add_LockServiceServicer_to_server(servicer, server)
    server_main.serve_faults(server, args)
    await watch.attach(server)
    metrics.on_scrape(lambda: watch_replica(replica))
    await server.start()
    servicer.start()
    # A replica does its job in a group that has a leader (itself or another it can name).
    watch.healthy_when(lambda: None if replica.leader_address() else "no Raft leader known")
    write_ready(args.dir, args.name, address)
    log.info("%s serving gRPC on %s, raft on %s, peers %s", args.name, address, raft_address,
             ",".join(peers))

    await server_main.until_stopped()
    log.info("%s stopping", args.name)
    await watch.end()
    await servicer.stop()
    await server.stop(STOP_GRACE_S)
    replica.close()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    server_main.start_process(args.name, args.dir, args.log_level, security=args)
    secret = stamp_secret.read_or_exit(args.secret_file, args.name)
    server_main.run(serve(args, secret))


if __name__ == "__main__":
    main()
