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
from collections.abc import Iterable
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from common import metrics, rpc, server_main, tls
from common.clock import SystemClock
from common.config import HOST, load_config
from common.process import write_ready
from common.proto import frontend_pb2_grpc as fe_grpc
from frontend import blob_server, public_protocol
from frontend.accounts import AccountStore
from frontend.auth import Authenticator
from frontend.blob_forward import BlobForwarder
from frontend.blob_store import BlobStore
from frontend.curp_path import CurpCounters, CurpSettings
from frontend.forward import ForwardingClient
from frontend.geo_door import GeoDoor
from frontend.server import (
    CONCURRENT_STREAMS_MAX,
    FrontEndServicer,
    request_message_bytes_max,
)
from frontend.server_call import FrontEnd
from frontend.throttle import AccountThrottle
from location.geo_auth import SettingsCache, read_settings
from lock_service.client import LockClient
from lock_service.probe import LockServiceProbe

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
    server_main.add_watch_args(p)
    server_main.add_security_args(p)
    p.add_argument("--public-cert", type=Path,
                   help="the certificate the public door shows (gRPC and HTTPS), PEM; "
                        "default with --tls-dir: this front end's stamp certificate")
    p.add_argument("--public-key", type=Path, help="its key (mode 0600)")
    return p


def public_files(args: argparse.Namespace) -> tuple[Path, Path] | None:
    """The certificate and key of the public door (None: plain, a stamp without TLS)."""
    if args.public_cert is not None and args.public_key is not None:
        return args.public_cert, args.public_key
    if args.tls_dir is None:
        return None
    return tls.cert_path(args.tls_dir, args.name), tls.key_path(args.tls_dir, args.name)


def watch_front_end(front_end: FrontEnd) -> Iterable[Metric]:
    """Scrape-time counters of the front end's door (read from its own counters, so the
    hot path records nothing more for them)."""
    counters = front_end.counters
    yield CounterMetricFamily("stamp_fe_requests", "requests taken", value=counters.requests)
    family = CounterMetricFamily("stamp_fe_refused", "requests refused at the door, by "
                                 "reason", labels=["reason"])
    family.add_metric(["unauthenticated"], counters.refused_unauthenticated)
    family.add_metric(["permission"], counters.refused_permission)
    family.add_metric(["invalid"], counters.refused_invalid)
    yield family
    yield CounterMetricFamily("stamp_fe_throttled", "requests throttled (retry after)",
                              value=counters.throttled)
    yield GaugeMetricFamily("stamp_fe_accounts_cached", "accounts whose keys are cached",
                            value=front_end.auth.accounts_cached())
    yield GaugeMetricFamily("stamp_fe_map_version", "partition map version cached",
                            value=front_end.client.map_version())
    yield from watch_curp(front_end.curp.counters)


def watch_curp(counters: CurpCounters) -> Iterable[Metric]:
    """CURP's fast path (issue 32): how its writes were acknowledged, and its records."""
    family = CounterMetricFamily("stamp_fe_curp_writes", "writes that took CURP's fast "
                                 "path, by how they were answered", labels=["answer"])
    for answer in ("fast", "synced", "fallback_acked", "fallback_failed", "in_doubt"):
        family.add_metric([answer], getattr(counters, answer))
    yield family
    family = CounterMetricFamily("stamp_fe_curp_fallbacks", "fast writes sent to the sync "
                                 "path, by cause", labels=["cause"])
    for cause in ("refused", "timeout", "unrecorded"):
        family.add_metric([cause], getattr(counters, f"fallback_{cause}"))
    yield family
    yield CounterMetricFamily("stamp_fe_curp_records", "records sent to witnesses",
                              value=counters.records_sent)


async def serve(args: argparse.Namespace) -> None:
    config = load_config(args.config)
    watch = await server_main.Watch.begin(args)
    clock = SystemClock()
    locks = LockClient([a for a in args.lock.split(",") if a], holder=args.name)
    # The store's own cache is off (TTL 0): Authenticator caches, off the event loop, each
    # account's keys with its geo role (one read for both: frontend/auth.py).
    store = AccountStore(locks, clock, cache_ttl_s=0)
    auth = Authenticator(store.lookup, clock, config.front_end.account_cache_ttl_ms / 1000,
                         stale_max_s=config.front_end.account_keys_stale_max_ms / 1000,
                         stale_wait_s=config.front_end.account_keys_stale_wait_ms / 1000)
    throttle = AccountThrottle(config.front_end, clock, random.Random())
    client = ForwardingClient([a for a in args.pm.split(",") if a], config.partition,
                              on_pressure=lambda pressure: front_end.observe_pressure(pressure))
    curp = CurpSettings(enabled=config.front_end.curp,
                        witness_timeout_ms=config.front_end.curp_witness_timeout_ms)
    front_end = FrontEnd(auth, client, throttle, config.partition, config.front_end, curp=curp)

    # Receive no more than the largest legal request needs (a stranger's message is held
    # while it is parsed); send answers up to the SDK's own limit.
    server = rpc.aio_server(config.partition.rpc_message_bytes_max, {
        "grpc.max_receive_message_length": request_message_bytes_max(config.partition),
        "grpc.max_concurrent_streams": CONCURRENT_STREAMS_MAX})
    public_tls = public_files(args)
    port = rpc.add_port(server, f"{args.host}:{args.port}",
                        tls.public_server_credentials(*public_tls) if public_tls else None)
    address = f"{args.host}:{port}"
    # Inter-stamp replication's door (issue 30): this stamp's place in its location is read
    # from the lock service, so a stamp that joins a location later needs no restart.
    settings = SettingsCache(lambda: read_settings(locks))
    geo_door = GeoDoor(settings, auth, lambda request: client.call(
        request, idempotent=True, nbytes=request.ByteSize()))
    servicer = FrontEndServicer(front_end, args.name, address, geo_door)
    fe_grpc.add_FrontEndServicer_to_server(servicer, server)
    public_protocol.add_public_servicer(servicer, server)  # the SDK's protocol (issue 31)
    server_main.serve_faults(server, args)
    await watch.attach(server)
    metrics.on_scrape(lambda: watch_front_end(front_end))
    probe = LockServiceProbe([a for a in args.lock.split(",") if a], args.name, config.watch)
    await server.start()
    # A front end does its job while it reaches the lock service (account keys live there).
    watch.healthy_when(probe.check)
    warm = asyncio.get_running_loop().create_task(client.refresh_map())  # first calls skip it
    warm.add_done_callback(lambda t: t.cancelled() or t.exception())  # a failure is retried
    blobs = BlobStore(client, config.front_end, clock)
    forward = BlobForwarder(settings)  # a secondary's blob writes, to the primary
    http_runner, http_address = await blob_server.start(
        front_end, blobs, args.host, args.http_port,
        tls.public_ssl_context(*public_tls) if public_tls else None, forward)
    blob_server.write_http_ready(args.dir, http_address)  # before ready.json: read with it
    write_ready(args.dir, args.name, address)
    log.info("%s serving on %s (Azure Blob REST on %s://%s)", args.name, address,
             "https" if public_tls else "http", http_address)

    await server_main.until_stopped()
    log.info("%s stopping", args.name)
    await watch.end()
    await http_runner.cleanup()
    await blobs.close()
    await forward.close()
    await server.stop(grace=1.0)
    await front_end.close()
    await asyncio.to_thread(probe.close)
    await asyncio.to_thread(locks.close)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    server_main.start_process(args.name, args.dir, security=args)
    server_main.run(serve(args))


if __name__ == "__main__":
    main()
