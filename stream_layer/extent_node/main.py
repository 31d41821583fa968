"""The extent node process: `stamp serve extent-node --name en-1 --dir DIR --port P ...`.

Recovers from disk (commit points + journal, and its CURP witness store's own journal)
before it accepts any RPC, then writes `DIR/ready.json` (common/process.py). SIGTERM stops it
cleanly (checkpoint first); SIGKILL is what the tests use, and recovery is built for it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Iterable
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from common import metrics, rpc, server_main
from common.config import HOST, load_config
from common.process import write_ready
from common.proto import extent_node_pb2_grpc, witness_pb2_grpc
from stream_layer.extent_node.fragments import FragmentStore
from stream_layer.extent_node.heartbeat import heartbeat_forever
from stream_layer.extent_node.node import ExtentNode
from stream_layer.extent_node.server import ExtentNodeServicer
from stream_layer.extent_node.store import ExtentStore
from stream_layer.extent_node.witness import WitnessStore
from stream_layer.extent_node.witness_server import WitnessServicer
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
    p.add_argument("--witness-dir", type=Path,
                   help="CURP witness store directory (its own journal; a fast disk in "
                        "production); default DIR/witness")
    p.add_argument("--host", default=HOST)
    p.add_argument("--port", type=int, default=0, help="gRPC port; 0 picks a free one")
    p.add_argument("--fault-domain", default="fd-1")
    p.add_argument("--upgrade-domain", default="ud-1")
    p.add_argument("--config", help="stamp config file (TOML) for limits")
    p.add_argument("--sm", default="",
                   help="stream manager gRPC addresses (comma-separated) to heartbeat to")
    server_main.add_watch_args(p)
    server_main.add_security_args(p)
    return p


def watch_store(store: ExtentStore, fragments: FragmentStore,
                witness: WitnessStore) -> Iterable[Metric]:
    """Scrape-time gauges of the node: what it holds and owes the disk, its witness's too."""
    replicas = list(store.replicas.values())
    yield GaugeMetricFamily("stamp_en_extents", "extent replicas on this node",
                            value=len(replicas))
    yield GaugeMetricFamily("stamp_en_bytes", "durable bytes of the extent replicas",
                            value=sum(r.durable_end for r in replicas))
    yield GaugeMetricFamily("stamp_en_journal_bytes", "bytes held in the journal",
                            value=store.journal.held_bytes())
    yield GaugeMetricFamily("stamp_en_pending_file_bytes", "bytes durable in the journal, "
                            "not yet in extent files", value=store.pending_bytes)
    yield CounterMetricFamily("stamp_en_journal_records", "records made durable",
                              value=store.journal.records)
    yield CounterMetricFamily("stamp_en_journal_syncs", "journal group commits",
                              value=store.journal.syncs)
    yield GaugeMetricFamily("stamp_en_witness_records", "CURP witness records held",
                            value=witness.table.held_records())
    yield GaugeMetricFamily("stamp_en_witness_bytes", "bytes (payloads and keys) of the CURP "
                            "witness records held", value=witness.table.held_bytes())
    yield GaugeMetricFamily("stamp_en_witness_journal_bytes", "bytes held in the CURP "
                            "witness store's journal", value=witness.journal_bytes)
    yield CounterMetricFamily("stamp_en_witness_journal_written_bytes", "bytes the CURP "
                              "witness store's journal wrote to its disk",
                              value=witness.journal.written_bytes)


async def serve(args: argparse.Namespace) -> None:
    config = load_config(args.config)
    limits = config.extent_node
    watch = await server_main.Watch.begin(args)
    store = ExtentStore(args.dir / "extents", args.journal_dir or args.dir / "journal", limits)
    store.recover()
    # Replayed before the server starts: a witness answers Fence only with what it held.
    witness = await WitnessStore.open(args.witness_dir or args.dir / "witness", limits.witness)
    server = rpc.aio_server(limits.rpc_message_bytes_max)
    port = rpc.add_port(server, f"{args.host}:{args.port}")
    address = f"{args.host}:{port}"
    node = ExtentNode(address, store, limits)
    fragments = FragmentStore(args.dir / "fragments")
    extent_node_pb2_grpc.add_ExtentNodeServicer_to_server(
        ExtentNodeServicer(node, args.name, args.fault_domain, args.upgrade_domain,
                           fragments), server)
    witness_pb2_grpc.add_WitnessServicer_to_server(WitnessServicer(witness), server)
    server_main.serve_faults(server, args)
    await watch.attach(server)
    metrics.on_scrape(lambda: watch_store(store, fragments, witness))
    await store.start()
    await server.start()
    # Recovered (above) and its journal running: it can take appends and serve reads.
    watch.healthy_when(None)  # recovered and serving: nothing can make it unable to serve
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
    await watch.end()
    if heartbeats is not None:
        heartbeats.cancel()
    await server.stop(grace=1.0)
    # After the server: no call in progress finds the witness store stopped under it.
    await witness.stop()
    await node.close()
    await store.checkpoint()
    await store.stop()
    fragments.close()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    server_main.start_process(args.name, args.dir, security=args)
    server_main.run(serve(args))


if __name__ == "__main__":
    main()
