"""What every Stamp server process does around its own start-up: log in one format, arm fault
points and partitions (STAMP_ISOLATE) from the environment, run on uvloop, be watched
(Prometheus metrics on `--metrics-port`, the gRPC health service: `Watch`), be traced when the
environment asks for it (common/tracing.py: OTEL_* or STAMP_TRACE_FILE), and stop cleanly
on SIGTERM or SIGINT (SIGKILL is what tests use, and recovery is built for it).

Contract (DESIGN §9): the Faults service checks no credentials and can crash, freeze, cut
off or corrupt the process, so a server serves it, and arms STAMP_FAULTS / STAMP_ISOLATE
from its environment, only when started with `--faults-rpc` (tests, `stamp chaos`).
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import gc
import logging
import os
import signal
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from grpc import aio

from common import durable_fs, faults, isolation, metrics, rpc, tls, tracing
from common.errors import StampError
from common.health import Check, Health
from common.proto import faults_pb2_grpc

GC_YOUNG_THRESHOLD = 50_000


def add_security_args(parser: argparse.ArgumentParser) -> None:
    """The command-line options every server takes for the Faults service."""
    parser.add_argument("--faults-rpc", action="store_true",
                        help="serve the Faults service and arm STAMP_FAULTS / STAMP_ISOLATE "
                             "from the environment (tests, `stamp fault`, `stamp chaos`); off "
                             "by default: the Faults service checks no credentials")
    parser.add_argument("--tls-dir", type=Path,
                        help="the stamp's TLS directory (common/tls.py): this process's "
                             "certificate NAME.crt and key, and the CA's ca.crt; mutual TLS "
                             "on its port and every channel (default: plain connections)")


def start_process(name: str, directory: Path, level: str = "INFO",
                  security: argparse.Namespace | None = None) -> None:
    """Before the event loop: the process's directory, logging and, when `security` (the
    options of `add_security_args`) enables them, armed fault points."""
    durable_fs.make_dirs(directory)
    # A crash in C (gRPC, uvloop) would otherwise kill the process without a word in its log.
    faulthandler.enable()
    logging.basicConfig(level=level.upper(),
                        format=f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s")
    isolation.set_process_name(name)  # before any channel: they name it to their peers
    tracing.start(name)  # before any server or channel too: they get its interceptors
    use_tls(name, security)
    if security is not None and security.faults_rpc:
        faults.arm_from_env()
        isolation.arm_from_env()
    elif os.environ.get(faults.ENV_VAR) or os.environ.get(isolation.ENV_VAR):
        logging.getLogger(__name__).warning(
            "%s / %s ignored: fault points are armed only with --faults-rpc",
            faults.ENV_VAR, isolation.ENV_VAR)
    # Servers allocate many short-lived objects per request: with the default threshold
    # (700) the cyclic collector runs hundreds of times a second, and its full passes over a
    # large memtable stall the event loop for milliseconds. Collect far less often.
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)


def use_tls(name: str, security: argparse.Namespace | None) -> None:
    """This process's TLS identity, from `--tls-dir` (none without it); a missing or
    unreadable file ends the process with a one-line error naming it."""
    tls_dir = getattr(security, "tls_dir", None)
    try:
        tls.use(tls.load(tls_dir, name) if tls_dir is not None else None)
    except StampError as exc:
        raise SystemExit(f"{name}: {exc}") from None
    logging.getLogger(__name__).info("TLS: %s", f"certificate {tls.cert_path(tls_dir, name)}"
                                     if tls_dir is not None else "off (plain connections)")


def serve_faults(server: aio.Server, args: argparse.Namespace) -> None:
    """Add the Faults service to `server` if the process was started with it."""
    if args.faults_rpc:
        faults_pb2_grpc.add_FaultsServicer_to_server(rpc.FaultsServicer(), server)


def run(main: Coroutine[Any, Any, None]) -> None:
    """Run the server's main coroutine on uvloop (STAMP_UVLOOP=0: the stock asyncio loop)."""
    if os.environ.get("STAMP_UVLOOP", "1") == "1":
        import uvloop
        uvloop.run(main)
    else:
        asyncio.run(main)


async def until_stopped() -> None:
    """Return once the process is asked to stop (SIGTERM or SIGINT)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def add_watch_args(parser: argparse.ArgumentParser) -> None:
    """The command-line options of `Watch`, the same for every server."""
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="serve Prometheus metrics on this port (default: no metrics)")


class Watch:
    """A server's metrics endpoint and health service. In `serve`: `begin` first (metrics
    must be on before the gRPC server and what records are made), `attach` the gRPC server
    before it starts, `healthy_when(check)` once it serves, `end` first when it stops."""

    def __init__(self, metrics_server: asyncio.Server | None) -> None:
        self.metrics_server = metrics_server
        self.health = Health()

    @classmethod
    async def begin(cls, args: argparse.Namespace) -> Watch:
        return cls(await metrics.serve(args.host, args.metrics_port))

    async def attach(self, server: aio.Server) -> None:
        await self.health.attach(server)

    def healthy_when(self, check: Check | None) -> None:
        """`check` as Health.start takes it (None: healthy for as long as it serves)."""
        self.health.start(check)

    async def end(self) -> None:
        await self.health.stop()
        if self.metrics_server is not None:
            self.metrics_server.close()
