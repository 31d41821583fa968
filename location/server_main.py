"""The location server process: `stamp serve location --name loc-1 --dir DIR --port P --lock
ADDRS` (issue 30). It answers `stamp.location.v1.Location/Resolve` (location/service.py)
from the location's own lock-service group (location/store.py), which it reaches at
`--lock`; with `--secret-file`, it also takes the stamps' signed sync reports
(location/sync_report.py) into that store. Stateless: its directory holds only its log and
`ready.json`; any number may run beside each other, and a client's connection string may
name them all (`Location=A,B,...`). SIGTERM stops it cleanly.

With `--balance-location DIR` (a location of this machine, tools/local_location.py) it also
moves accounts off stamps past the capacity watermark, on its own: a round every
`--balance-interval-s` (tools/geo_balance.py: at most one migration a round, run in a
thread; a round that fails is logged and the next one tries again). Give it to one location
server only: two would migrate the same account at once, and one of them would fail.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import functools
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from common import rpc, server_main, tls
from common.config import HOST
from common.process import write_ready
from common.proto import location_internal_pb2_grpc as internal_grpc
from common.proto import location_v1_pb2_grpc as location_grpc
from location.service import (
    CACHE_TTL_S,
    LocationInternalServicer,
    LocationServicer,
    PlacementCache,
)
from location.store import LocationStore
from location.watermark import WATERMARK_PERCENT
from lock_service.client import LockClient
from lock_service.probe import LockServiceProbe

log = logging.getLogger("stamp.location")
MESSAGE_BYTES_MAX = 1024 * 1024  # a Resolve is tiny either way
BALANCE_INTERVAL_S = 30.0
T = TypeVar("T")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="stamp serve location",
                                description="Run one location server: it tells SDKs which "
                                            "stamp's front ends serve an account.")
    p.add_argument("--name", required=True, help="process name, e.g. loc-1")
    p.add_argument("--dir", required=True, type=Path, help="its directory (log, ready file)")
    p.add_argument("--host", default=HOST)
    p.add_argument("--port", type=int, default=0, help="gRPC port (0: pick a free one)")
    p.add_argument("--lock", required=True,
                   help="the location service's lock replicas, comma-separated HOST:PORT")
    p.add_argument("--secret-file", type=Path,
                   help="the location's replication secret (32 bytes): with it, the server "
                        "takes the stamps' signed sync reports")
    p.add_argument("--cache-ttl-ms", type=int, default=round(CACHE_TTL_S * 1000),
                   help="how stale an answer may be, in ms (default %(default)s)")
    p.add_argument("--balance-location", type=Path,
                   help="move accounts off stamps past the watermark, on this location of "
                        "this machine (its directory)")
    p.add_argument("--watermark-percent", type=int, default=WATERMARK_PERCENT,
                   help="a stamp this much used sheds accounts (default %(default)s)")
    p.add_argument("--balance-interval-s", type=float, default=BALANCE_INTERVAL_S,
                   help="seconds between two balancing rounds (default %(default)s)")
    server_main.add_watch_args(p)
    server_main.add_security_args(p)
    return p


async def balance_forever(directory: Path, watermark_percent: int, interval_s: float
                          ) -> None:
    """Balancing rounds until cancelled (module docstring). A stamp an account was moved off
    rests geo_balance.REST_S before it sheds another (its use drops only after gc)."""
    from tools.geo_balance import REST_S, balance_once
    from tools.local_location import LocalLocation

    location = LocalLocation(directory)
    moved_off: dict[str, float] = {}  # stamp -> when an account was last moved off it
    while True:
        await asyncio.sleep(interval_s)
        now = time.monotonic()
        resting = {stamp for stamp, at in moved_off.items() if now - at < REST_S}
        try:
            plan, made = await _on_daemon_thread(functools.partial(
                balance_once, location, watermark_percent, resting=resting))
        except Exception as exc:  # a round may fail (a stamp down): the next tries again
            log.warning("balancing round failed: %r", exc)
            continue
        for report in made:
            moved_off[report.old_primary] = time.monotonic()
            log.info("migrated %s: primary %s (was %s), secondary %s, in %.1f s",
                     report.account, report.primary, report.old_primary, report.secondary,
                     report.seconds)
        if plan.stuck:
            log.warning("stamps %s are over %d%% used; accounts with nowhere to go: %s",
                        ", ".join(plan.over), watermark_percent, ", ".join(plan.stuck))


async def _on_daemon_thread(work: Callable[[], T]) -> T:
    """`work()` on a daemon thread: a migration under way does not hold up the process's
    exit on SIGTERM (it is cut short, and finished by the next round or by hand: each of
    its steps is safe to run again)."""
    done: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            done.set_result(work())
        except BaseException as exc:
            done.set_exception(exc)

    threading.Thread(target=run, name="balance", daemon=True).start()
    return await asyncio.wrap_future(done)


async def serve(args: argparse.Namespace) -> None:
    watch = await server_main.Watch.begin(args)
    lock_addresses = [a for a in args.lock.split(",") if a]
    locks = LockClient(lock_addresses, holder=args.name)
    cache = PlacementCache(LocationStore(locks), ttl_s=args.cache_ttl_ms / 1000)
    server = rpc.aio_server(MESSAGE_BYTES_MAX)
    # A public door, as a front end's: server-only TLS (clients show no certificate).
    public = None if args.tls_dir is None else tls.public_server_credentials(
        tls.cert_path(args.tls_dir, args.name), tls.key_path(args.tls_dir, args.name))
    port = rpc.add_port(server, f"{args.host}:{args.port}", public)
    address = f"{args.host}:{port}"
    location_grpc.add_LocationServicer_to_server(LocationServicer(cache), server)
    secret = None if args.secret_file is None else args.secret_file.read_bytes()
    internal_grpc.add_LocationInternalServicer_to_server(
        LocationInternalServicer(cache, secret), server)
    server_main.serve_faults(server, args)
    await watch.attach(server)
    probe = LockServiceProbe(lock_addresses, args.name)
    await server.start()
    watch.healthy_when(probe.check)  # it answers while it reaches the location's store
    write_ready(args.dir, args.name, address)
    log.info("%s serving on %s", args.name, address)

    balancing = None if args.balance_location is None else asyncio.get_running_loop(
        ).create_task(balance_forever(args.balance_location, args.watermark_percent,
                                      args.balance_interval_s))

    await server_main.until_stopped()
    log.info("%s stopping", args.name)
    if balancing is not None:
        balancing.cancel()
    await watch.end()
    await server.stop(grace=1.0)
    await asyncio.to_thread(probe.close)
    await asyncio.to_thread(locks.close)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    server_main.start_process(args.name, args.dir, security=args)
    server_main.run(serve(args))


if __name__ == "__main__":
    main()
