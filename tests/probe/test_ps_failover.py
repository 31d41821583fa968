"""A partition server's failover waits for its session, and for nothing longer (issue 29).

One stamp whose partition leases outlive their servers' sessions by far (60 s against
1.5 s), so that a failover that waited for the partition lease would be plain to see:
- the owner is SIGKILLed under 8 appenders: they go on at the new owner, which ended the
  dead server's partition lease at once (its session had ended: ownership.py `orphaned`),
  and nothing acknowledged is lost;
- the new owner is then frozen through its session's end, slow to notice its losses when
  thawed (a fault point): the partition moves back, and the thawed server, whose partition
  lease it still believes valid, refuses to read — its session's claim is over (§8
  invariants 3 and 7).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from common import rpc
from common.errors import NotOwner
from common.process import LOG_FILE
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from partition_layer.client import PartitionClient
from partition_layer.session import CallSession
from tools.chaos.extents import append_load, check_logs
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

StampFactory = Callable[..., LocalStamp]
SESSION_TTL_MS = 1500
PARTITION_LEASE_TTL_MS = 60_000  # far past every deadline below
WRITERS = 8
# Appends the writers make before a fault and must make again after it.
APPENDS = 200
DEADLINE_S = 20.0  # well under the partition lease: a failover that waited for it fails


async def owner_of(pc: PartitionClient) -> str:
    current, _ = await pc.aio.partition_map()
    return current.get(1).server


def log_says(stamp: LocalStamp, name: str, text: str) -> bool:
    return text in (Path(stamp.record(name).dir) / LOG_FILE).read_text(errors="replace")


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"not within {DEADLINE_S:g} s: {what}"
        await asyncio.sleep(0.02)


async def direct_read(address: str) -> pb.Response:
    """A read sent to `address` itself, no map, no retry: the server's own answer."""
    session = CallSession(address, lambda: pb_grpc.PartitionServerStub(
        rpc.aio_channel(address, 16 << 20)))
    try:
        return await session.call(pb.Request(account="acct", pname="log-0",
                                             read=pb.ReadOp(from_seq=0, limit=5)), 10)
    finally:
        await session.close()


def test_failover_waits_for_the_session_only(stamp_factory: StampFactory) -> None:
    stamp = stamp_factory(3, 3, lock_servers=3, partition_managers=2, partition_servers=2,
                          partition={"server_session_ttl_ms": SESSION_TTL_MS,
                                     "partition_lease_ttl_ms": PARTITION_LEASE_TTL_MS})
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        acked: list[tuple[str, int, bytes]] = []

        async def resumes_after(fault: Callable[[], None], what: str) -> None:
            await until(lambda: len(acked) >= APPENDS, "appends before the fault")
            fault()
            at = len(acked)
            await until(lambda: len(acked) >= at + APPENDS, f"appends to go on after {what}")

        async def scenario() -> None:
            stop = asyncio.Event()
            load = asyncio.ensure_future(append_load(pc.aio, WRITERS, stop, acked))
            try:
                victim = await owner_of(pc)
                survivor = next(r.name for r in stamp.partition_servers()
                                if r.name != victim)
                await resumes_after(lambda: stamp.kill(victim), f"{victim} was killed")
                assert await owner_of(pc) == survivor
                assert log_says(stamp, survivor, f"ended the lease of {victim}"), \
                    "the new owner did not end the dead server's partition lease"
            finally:
                stop.set()
                await asyncio.gather(load, return_exceptions=True)
            await asyncio.to_thread(stamp.start, victim)
            await freeze_and_thaw(survivor, victim)

        async def freeze_and_thaw(frozen: str, other: str) -> None:
            # No write in flight on it (a fenced commit would stop its partition at once).
            # Thawed, it notices its lost session and lease 3 s late: meanwhile only the
            # session's claim (its time is up) keeps it from serving.
            await asyncio.to_thread(rpc.arm_remote, stamp.address(frozen),
                                    "ps.lease_lost=delay:3000")
            pid = stamp.record(frozen).pid
            os.kill(pid, signal.SIGSTOP)
            try:
                seq = await asyncio.wait_for(pc.aio.append("acct", "log-0", [b"frozen"]),
                                             DEADLINE_S)
                acked.append(("log-0", seq, b"frozen"))
                assert await owner_of(pc) == other
            finally:
                os.kill(pid, signal.SIGCONT)
            answer = await direct_read(stamp.address(frozen))
            assert answer.error == NotOwner.__name__, \
                f"a server whose session ended answered a read: {answer}"

        pc.run(scenario())
        check_logs(pc, acked)  # nothing acknowledged lost, nothing twice
