"""The partition server process: `stamp serve partition-server --name ps-1 --dir DIR --port P
--sm ADDRS --lock ADDRS [--config FILE]`.

It registers itself in the lock service (`ps/<name>` = its address, bound to a session that
ends if the process dies), heartbeats its load to the leading PM, and serves whatever range
partitions the PM asks it to load. It writes `DIR/ready.json` once it serves gRPC.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric

from common import background, faults, metrics, rpc, server_main
from common.config import HOST, PartitionLimits, load_config
from common.errors import StampError
from common.process import write_ready
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from frontend.accounts import HeldRoles
from location.geo_auth import read_settings
from lock_service.client import Lease, LockClient
from partition_layer.geo_link import GeoLink
from partition_layer.geo_shipping import Shipping
from partition_layer.geo_tail import TailReport
from partition_layer.manager import LEADER_ADDRESS_KEY, SERVER_PREFIX
from partition_layer.ps_servicer import PartitionServicer
from partition_layer.server import PartitionServer
from stream_layer.client import AsyncStreamClient

log = logging.getLogger("stamp.partition_server")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="stamp serve partition-server",
                                description="Run one partition server.")
    p.add_argument("--name", required=True, help="process name, e.g. ps-1")
    p.add_argument("--dir", required=True, type=Path, help="its directory (log, ready file)")
    p.add_argument("--host", default=HOST)
    p.add_argument("--port", type=int, default=0, help="gRPC port (0: pick a free one)")
    p.add_argument("--sm", required=True, help="stream manager addresses, comma-separated")
    p.add_argument("--lock", required=True, help="lock service addresses, comma-separated")
    p.add_argument("--config", help="stamp config file (TOML)")
    server_main.add_watch_args(p)
    server_main.add_security_args(p)
    return p


# Per-partition gauges: (metric, help, field of the load report, scale to base units).
PARTITION_GAUGES = (
    ("stamp_partition_ops_per_second", "operations per second (sliding window)",
     "ops_per_s", 1.0),
    ("stamp_partition_bytes_per_second", "bytes per second (sliding window)",
     "bytes_per_s", 1.0),
    ("stamp_partition_p99_seconds", "99th percentile operation latency (sliding window)",
     "p99_ms", 0.001),
    ("stamp_partition_size_bytes", "bytes in the partition", "size_bytes", 1.0),
    ("stamp_partition_memtable_bytes", "bytes in the memtable", "memtable_bytes", 1.0),
    ("stamp_partition_queue_ops", "operations waiting for the commit log", "queue_ops", 1.0),
)


def watch_server(load: pb.ServerLoad) -> Iterable[Metric]:
    """Scrape-time gauges of every partition served here (the load the PM balances on)."""
    serving = [p for p in load.partitions if p.state == "serving"]
    yield GaugeMetricFamily("stamp_ps_partitions", "partitions served here",
                            value=len(serving))
    for name, doc, field, scale in PARTITION_GAUGES:
        family = GaugeMetricFamily(name, doc, labels=["partition"])
        for partition in serving:
            family.add_metric([str(partition.partition_id)], getattr(partition, field) * scale)
        yield family
    shipping = [p for p in serving if p.geo]
    if shipping:  # inter-stamp replication (issue 30): the lag, per partition
        lag = GaugeMetricFamily("stamp_geo_lag_ops", "operations not yet on the secondary "
                                "stamp", labels=["partition"])
        behind = GaugeMetricFamily("stamp_geo_lag_seconds", "how far the last sync time is "
                                   "behind now", labels=["partition"])
        now = time.time()
        for partition in shipping:
            lag.add_metric([str(partition.partition_id)], partition.geo_lag_ops)
            behind.add_metric([str(partition.partition_id)],
                              max(0.0, now - partition.geo_synced_s))
        yield lag
        yield behind


class Registration:
    """`ps/<name>` in the lock service for as long as this process lives; renewed by a
    session lease, re-made if the session is ever lost (the lock service was unreachable,
    or someone ended it). The server's partitions live and die with that session
    (ownership.py): a new one is handed to the server before the key that makes the PM
    assign it anything is written, and the loss of one ends every partition taken under it
    (`PartitionServer.session_lost`, on the server's loop)."""

    def __init__(self, locks: LockClient, name: str, address: str, limits: PartitionLimits,
                 server: PartitionServer, loop: asyncio.AbstractEventLoop) -> None:
        self.locks, self.name, self.address, self.limits = locks, name, address, limits
        self.server, self.loop = server, loop
        self.session: Lease | None = None
        self.registered = False  # the key is written under `session`
        self.version = 0  # the key's version as written (heartbeats say it: manager.py)

    def in_place(self) -> bool:
        """Whether the key is written under a session still valid: `ensure` has nothing to
        do (any thread: two reads of what `ensure` sets)."""
        session = self.session
        return self.registered and session is not None and session.valid()

    def ensure(self) -> None:
        """Register (a blocking call: run it on a thread)."""
        if self.session is None or not self.session.valid():
            session = self.locks.session(self.limits.server_session_ttl_ms / 1000,
                                         on_lost=self._lost)
            self.server.session = session  # one reference assignment: safe from a thread
            self.session, self.registered = session, False
        if not self.registered:
            self.version = self.locks.put(SERVER_PREFIX + self.name, self.address.encode(),
                                          lease=self.session)
            self.registered = True
            log.info("%s registered at %s (session %d)", self.name, self.address,
                     self.session.token)

    def current(self) -> int:
        """The version of the key as written under a session still valid, else 0."""
        version = self.version
        return version if self.in_place() else 0

    def _lost(self, session: Lease) -> None:  # on a thread of the lock client's (on_lost)
        # The same fault point as a partition lease's loss (server.py): a test that delays
        # noticing a lost ownership, to attack the fence, delays this too.
        faults.point("ps.lease_lost")
        self.loop.call_soon_threadsafe(self.server.session_lost, session)

    def close(self) -> None:
        if self.session is not None:
            self.session.release()


class LeaderHeartbeat:
    """Sends a beat to the leading PM, whose address it reads from the lock service only when
    it does not know it yet or the one it knows did not take the beat (gone, or a standby
    now: it answers NotLeader) — then at once, and the beat goes to the new one in the same
    round. Reading it every beat cost the lock service a Get per server per second (issue 29:
    an idle stamp's lock-service load)."""

    def __init__(self, read_leader: Callable[[], Awaitable[str | None]],
                 send: Callable[[str], Awaitable[pb.HeartbeatReply]]) -> None:
        self.read_leader, self.send = read_leader, send
        self.leader: str | None = None

    async def beat(self) -> pb.HeartbeatReply | None:
        """The leader's answer; None while no PM leads."""
        known = self.leader
        if known is not None:
            try:
                return await self.send(known)
            except StampError:
                self.leader = None
                if await self.read_leader() in (None, known):
                    raise  # nobody else leads: this beat is lost, the next asks again
        self.leader = await self.read_leader()
        return None if self.leader is None else await self.send(self.leader)


def beat_load(server: PartitionServer, registration: Registration, address: str
              ) -> pb.ServerLoad:
    """What a beat says: the server's load and the registration it beats under (the PM lists
    the registrations again when that is not the one it listed: manager.py)."""
    load = server.load_pb(address)
    load.registration = registration.current()
    return load


async def heartbeat_forever(server: PartitionServer, registration: Registration,
                            locks: LockClient, address: str, limits: PartitionLimits) -> None:
    """Keep the registration and report this server's load to the leading PM, every
    `heartbeat_interval_ms`, for as long as the process lives. A failed beat is logged and
    the next one tried: the loop must outlive any error. Without heartbeats the PM never
    learns that this server stopped serving a partition it had confirmed (manager.py
    `heartbeat`), and clients are sent here for it for ever. The answer names the
    partitions served here that the map assigns elsewhere: they are unloaded. Its lock calls
    run on a thread of its own: whatever else waits on threads (loads waiting out a lease)
    never delays a beat past the session's time."""
    from common.proto import partition_pb2_grpc

    channels: dict[str, object] = {}
    loop = asyncio.get_running_loop()
    thread = ThreadPoolExecutor(1, thread_name_prefix="heartbeat")

    async def read_leader() -> str | None:
        found = await loop.run_in_executor(thread, locks.get, LEADER_ADDRESS_KEY)
        return None if found is None else found[0].decode()

    async def send(leader: str) -> pb.HeartbeatReply:
        channel = channels.get(leader)
        if channel is None:
            channel = channels[leader] = rpc.aio_channel(leader, limits.rpc_message_bytes_max)
        stub = partition_pb2_grpc.PartitionManagerStub(channel)
        return await rpc.call(stub.Heartbeat(beat_load(server, registration, address),
                                             timeout=1.0))

    heartbeat = LeaderHeartbeat(read_leader, send)

    async def beat() -> None:
        if not registration.in_place():  # not a thread's round trip every beat (issue 29)
            await loop.run_in_executor(thread, registration.ensure)
        reply = await heartbeat.beat()
        if reply is not None and reply.not_yours:
            server.drop_not_ours(list(reply.not_yours))

    try:
        # The one background helper (common/background.py) logs a failed beat, rate-limited.
        await background.run_forever("heartbeat to the partition manager", beat,
                                     limits.heartbeat_interval_ms / 1000, logger=log)
    finally:
        thread.shutdown(wait=False, cancel_futures=True)


async def serve(args: argparse.Namespace) -> None:
    config = load_config(args.config)
    limits = config.partition
    watch = await server_main.Watch.begin(args)
    streams = AsyncStreamClient([a for a in args.sm.split(",") if a], config.extent_node,
                                config.stream_manager)
    locks = LockClient([a for a in args.lock.split(",") if a], holder=args.name)
    ps = PartitionServer(args.name, streams, locks, limits)
    # Inter-stamp replication (issue 30): shippers while this stamp is in a location.
    link = GeoLink(lambda: read_settings(locks), roles=HeldRoles(locks),
                   tails=TailReport(args.dir))
    shipping = Shipping(link, lambda: ps.partitions.values(),
                        pace_s=limits.geo_ship_pace_ms / 1000)
    ps.on_loaded = shipping.loaded
    server = rpc.aio_server(limits.rpc_message_bytes_max)
    port = rpc.add_port(server, f"{args.host}:{args.port}")
    address = f"{args.host}:{port}"
    pb_grpc.add_PartitionServerServicer_to_server(PartitionServicer(ps, address, shipping),
                                                  server)
    server_main.serve_faults(server, args)
    await watch.attach(server)
    metrics.on_scrape(lambda: watch_server(ps.load_pb(address)))
    await server.start()
    shipping.start()
    registration = Registration(locks, args.name, address, limits, ps,
                                asyncio.get_running_loop())
    try:
        await asyncio.to_thread(registration.ensure)
    except StampError as exc:
        # The lock service is not up yet (its hosts start later: `stamp up --only`): the
        # heartbeats register it once it is; until then its health says NOT_SERVING.
        log.warning("%s not registered yet: %s", args.name, exc)
    # A server does its job while it holds its session lease: the PM assigns it partitions
    # only then, and without it its partition leases cannot be renewed either.
    watch.healthy_when(lambda: None if registration.session is not None
                       and registration.session.valid() else "no session lease")
    beats = asyncio.get_running_loop().create_task(
        heartbeat_forever(ps, registration, locks, address, limits))
    write_ready(args.dir, args.name, address)
    log.info("%s serving on %s", args.name, address)

    await server_main.until_stopped()
    log.info("%s stopping", args.name)
    await watch.end()
    beats.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await beats
    await ps.close()  # every partition stops, answers what it holds, releases its lease
    await shipping.close()
    await server.stop(grace=1.0)
    with contextlib.suppress(StampError):
        await asyncio.to_thread(registration.close)
    await asyncio.to_thread(locks.close)
    await streams.close()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    server_main.start_process(args.name, args.dir, security=args)
    server_main.run(serve(args))


if __name__ == "__main__":
    main()
