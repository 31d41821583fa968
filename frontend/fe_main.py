"""The front end process: `stamp serve front-end --name fe-1 --dir DIR --port P --pm ADDRS
--lock ADDRS [--config FILE]` (DESIGN §6).

It reads account keys from the lock service's KV (through a short cache), fetches the
partition map from the partition managers, and forwards to the partition servers. It keeps no
state on disk: its directory holds only its log and `ready.json`, written once it serves
gRPC. SIGTERM stops it cleanly (streams answered or cut, connections closed).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
from pathlib import Path

from common import rpc, server_main
from common.clock import SystemClock
from common.config import HOST, load_config
from common.process import write_ready
from common.proto import faults_pb2_grpc
from common.proto import frontend_pb2_grpc as fe_grpc
from frontend import blob_server
from frontend.accounts import AccountStore
from frontend.auth import Authenticator
from frontend.blob_store import BlobStore
from frontend.forward import ForwardingClient
from frontend.server import FrontEndServicer
from frontend.server_call import FrontEnd
from frontend.throttle import AccountThrottle
from lock_service.client import LockClient

log = logging.getLogger("stamp.front_end")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="stamp serve front-end",
                                description="Run one front end.")
    p.add_argument("--name", required=True, help="process name, e.g. fe-1")
    p.add_argument("--dir", required=True, type=Path, help="its directory (log, ready file)")
    p.add_argument("--host", default=HOST)
    p.add_argument("--port", type=int, default=0, help="gRPC port (0: pick a free one)")
    p.add_argument("--http-port", type=int, default=0,
                   help="the Azure Blob REST endpoint's port (0: pick a free one)")
    p.add_argument("--pm", required=True, help="partition manager addresses, comma-separated")
    p.add_argument("--lock", required=True, help="lock service addresses, comma-separated")
    p.add_argument("--config", help="stamp config file (TOML)")
    p.add_argument("--faults-rpc", action="store_true",
                   help="also serve the Faults service (arm fault points, isolate: for tests "
                        "and `stamp fault`); off by default: a front end is the stamp's "
                        "public door and the Faults service checks no credentials")
    return p


async def serve(args: argparse.Namespace) -> None:
    config = load_config(args.config)
    clock = SystemClock()
    locks = LockClient([a for a in args.lock.split(",") if a], holder=args.name)
    # The store's own cache is off (TTL 0): Authenticator caches, off the event loop.
    store = AccountStore(locks, clock, cache_ttl_s=0)
    auth = Authenticator(store.keys_of, clock, config.front_end.account_cache_ttl_ms / 1000)
    throttle = AccountThrottle(config.front_end, clock, random.Random())
    client = ForwardingClient([a for a in args.pm.split(",") if a], config.partition,
                              on_pressure=lambda pressure: front_end.observe_pressure(pressure))
    front_end = FrontEnd(auth, client, throttle, config.partition, config.front_end)

    server = rpc.aio_server(config.partition.rpc_message_bytes_max)
    port = server.add_insecure_port(f"{args.host}:{args.port}")
    address = f"{args.host}:{port}"
    fe_grpc.add_FrontEndServicer_to_server(FrontEndServicer(front_end, args.name, address),
                                           server)
    if args.faults_rpc:
        faults_pb2_grpc.add_FaultsServicer_to_server(rpc.FaultsServicer(), server)
    await server.start()
    warm = asyncio.get_running_loop().create_task(client.refresh_map())  # first calls skip it
    warm.add_done_callback(lambda t: t.cancelled() or t.exception())  # a failure is retried
    blobs = BlobStore(client, config.front_end, clock)
    http_runner, http_address = await blob_server.start(front_end, blobs, args.host,
                                                        args.http_port)
    blob_server.write_http_ready(args.dir, http_address)  # before ready.json: read with it
    write_ready(args.dir, args.name, address)
    log.info("%s serving on %s (Azure Blob REST on http://%s)", args.name, address,
             http_address)

    await server_main.until_stopped()
    log.info("%s stopping", args.name)
    await http_runner.cleanup()
    await blobs.close()
    await server.stop(grace=1.0)
    await front_end.close()
    await asyncio.to_thread(locks.close)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    server_main.start_process(args.name, args.dir)
    server_main.run(serve(args))


if __name__ == "__main__":
    main()
