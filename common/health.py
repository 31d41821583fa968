"""The standard gRPC health service (grpc.health.v1, `grpcio-health-checking`) on every Stamp
server, and the client side that `stamp status` and `stamp top` use.

Contracts:
- A server answers SERVING only while it can do its job, as its own check says (an extent
  node that has recovered, a partition server holding its session lease, a lock or stream
  manager replica in a Raft group with a leader, a front end or partition manager that can
  reach the lock service). It starts NOT_SERVING, is re-checked every
  `watch.health_check_interval_ms`, and goes NOT_SERVING for good when it begins to stop.
  A server whose ability cannot change while it runs (an extent node, once recovered) has no
  check: it is SERVING from `start(None)` until it stops, and nothing wakes it to re-check
  (issue 29: a wake-up a second in every such process, for a constant).
- The overall status (service "") is the one answered; each change is logged with the
  check's reason, so a server's log says why it was unhealthy.
- `check_many` asks many servers at once with a deadline: a dead process (connection
  refused) and a frozen one (no answer) both come back as not serving, within that deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable

import grpc
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from common import background, tls
from common.config import WatchConfig

log = logging.getLogger(__name__)

SERVING = "SERVING"
NOT_SERVING = "NOT_SERVING"
UNREACHABLE = "UNREACHABLE"  # no answer: the process is dead, frozen or cut off
OVERALL = ""

# A check returns None when the server can do its job, else why not (logged on a change).
Check = Callable[[], "str | Awaitable[str | None] | None"]


class Health:
    """The health service of one server. `attach` before the server starts; `start(check)`
    once it serves; `stop()` first thing when it stops."""

    def __init__(self, config: WatchConfig | None = None) -> None:
        self.config = config or WatchConfig()
        self.servicer = health_aio.HealthServicer()
        self.status = NOT_SERVING
        self.reason = "starting"
        self._task: asyncio.Task[None] | None = None

    async def attach(self, server: aio.Server) -> None:
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, server)
        await self.servicer.set(OVERALL, health_pb2.HealthCheckResponse.NOT_SERVING)

    def start(self, check: Check | None) -> None:
        """Re-evaluate `check` every interval and answer accordingly, until `stop`; with
        no check, answer SERVING until then."""
        if check is None:
            self._task = asyncio.get_running_loop().create_task(self._set(SERVING, ""))
            return
        self._task = asyncio.get_running_loop().create_task(self._run(check))

    async def _run(self, check: Check) -> None:
        # The one background helper: were this loop to end, the status would freeze.
        await background.run_forever("health check", lambda: self._check_once(check),
                                     self.config.health_check_interval_ms / 1000,
                                     logger=log)

    async def _check_once(self, check: Check) -> None:
        try:
            outcome = check()
            reason = await outcome if inspect.isawaitable(outcome) else outcome
        except Exception as exc:  # a failing check is an unhealthy server, not a crash
            reason = f"health check failed: {exc!r}"
        await self._set(SERVING if reason is None else NOT_SERVING, reason or "")

    async def _set(self, status: str, reason: str) -> None:
        if status != self.status:
            log.log(logging.INFO if status == SERVING else logging.WARNING,
                    "health: %s%s", status, f" ({reason})" if reason else "")
            await self.servicer.set(OVERALL, health_pb2.HealthCheckResponse.ServingStatus.Value(
                status))
        self.status, self.reason = status, reason

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.status, self.reason = NOT_SERVING, "stopping"
        await self.servicer.enter_graceful_shutdown()


# ---- the client side ------------------------------------------------------------------------

async def check_one(address: str, timeout_s: float) -> str:
    """SERVING, NOT_SERVING, or UNREACHABLE (no answer within `timeout_s`)."""
    # Not rpc.aio_channel: an operator's look must not be subject to the isolation of the
    # process running it, and one short-lived channel per look is all it needs. TLS as every
    # channel of this process to `address` (common/tls.py).
    credentials = tls.channel_credentials(address)
    async with (aio.insecure_channel(address) if credentials is None
                else aio.secure_channel(address, credentials)) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=OVERALL), timeout=timeout_s,
                wait_for_ready=False)
        except grpc.RpcError:
            return UNREACHABLE
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


async def check_many(addresses: Iterable[str], timeout_s: float) -> dict[str, str]:
    """The health of every address, asked at once."""
    wanted = list(dict.fromkeys(a for a in addresses if a))
    found = await asyncio.gather(*(check_one(a, timeout_s) for a in wanted))
    return dict(zip(wanted, found, strict=True))
