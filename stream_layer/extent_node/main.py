"""The extent node process: `stamp serve extent-node --name en-1 --dir DIR --port P ...`.

Recovers from disk (commit points + journal) before it accepts any RPC, then writes
`DIR/ready.json` (common/process.py). SIGTERM stops it cleanly (checkpoint first); SIGKILL is
what the tests use, and recovery is built for it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from common import rpc, server_main
from common.config import HOST, load_config
from common.process import write_ready
from common.proto import extent_node_pb2_grpc, faults_pb2_grpc
from stream_layer.extent_node.fragments import FragmentStore
from stream_layer.extent_node.heartbeat import heartbeat_forever
from stream_layer.extent_node.node import ExtentNode
from stream_layer.extent_node.server import ExtentNodeServicer
from stream_layer.extent_node.store import ExtentStore
from stream_layer.sm_client import AsyncStreamManagerClient

log = logging.getLogger("stamp.extent_node")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="stamp serve extent-node",
                                description="Run one extent node (a stream-layer storage server).")
    p.add_argument("--name", required=True, help="process name, e.g. en-1")
    p.add_argument("--dir", required=True, type=Path,
                   help="the node's directory: extent files, ready.json, server.log")
    p.add_argument("--journal-dir", type=Path,
                   help="journal directory (its own disk in production); default DIR/journal")
    p.add_argument("--host", default=HOST)
    p.add_argument("--port", type=int, default=0, help="gRPC port; 0 picks a free one")
    p.add_argument("--fault-domain", default="fd-1")
    p.add_argument("--upgrade-domain", default="ud-1")
    p.add_argument("--config", help="stamp config file (TOML) for limits")
    p.add_argument("--sm", default="",
                   help="stream manager gRPC addresses (comma-separated) to heartbeat to")
    return p


async def serve(args: argparse.Namespace) -> None:
    config = load_config(args.config)
    limits = config.extent_node
    store = ExtentStore(args.dir / "extents", args.journal_dir or args.dir / "journal", limits)
    store.recover()
    server = rpc.aio_server(limits.rpc_message_bytes_max)
    port = server.add_insecure_port(f"{args.host}:{args.port}")
    address = f"{args.host}:{port}"
    node = ExtentNode(address, store, limits)
    fragments = FragmentStore(args.dir / "fragments")
    extent_node_pb2_grpc.add_ExtentNodeServicer_to_server(
        ExtentNodeServicer(node, args.name, args.fault_domain, args.upgrade_domain,
                           fragments), server)
    faults_pb2_grpc.add_FaultsServicer_to_server(rpc.FaultsServicer(), server)
    await store.start()
    await server.start()
    write_ready(args.dir, args.name, address)
    log.info("%s serving on %s (fault domain %s)", args.name, address, args.fault_domain)
    heartbeats = None
    if args.sm:
        sm = AsyncStreamManagerClient(args.sm.split(","), config.stream_manager)
        heartbeats = asyncio.get_running_loop().create_task(heartbeat_forever(
            sm, store, args.name, address, args.fault_domain, args.upgrade_domain,
            config.stream_manager.heartbeat_interval_ms / 1000))

    await server_main.until_stopped()
    log.info("%s stopping", args.name)
    if heartbeats is not None:
        heartbeats.cancel()
    await server.stop(grace=1.0)
    await node.close()
    await store.checkpoint()
    await store.stop()
    fragments.close()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    server_main.start_process(args.name, args.dir)
    server_main.run(serve(args))


if __name__ == "__main__":
    main()
