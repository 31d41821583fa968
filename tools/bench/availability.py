"""`stamp bench availability` (issue 29): how long one faulty process stalls the SDK's writers.

A stamp of the default shape (with the Faults service: isolation and the slow disk need it)
gets two range partitions, one on each partition server, and 8 SDK writers (a client each,
so they spread over both front ends), each appending small records to its own log, 4 logs
on each partition (the shape is restored before each trial: a fault of a partition server
leaves both partitions on the other). For every role and fault asked for, `trials` times:
the writers run a few seconds, the fault is dealt to the process that plays the role at
that moment, and held; then it ends (SIGCONT, heal, disarm; a killed process is started
again once every writer has appended after the kill).

Per role and fault the bench reports the longest stall any writer saw (the longest time
between two acknowledged appends of one writer, from the last one before the fault to the
first one after every writer is appending again), p50 and max over the trials, and how long
after the fault's end the last writer appended again. At the end every writer's log is read
back: each acknowledged record must be there (`lost` counts those that are not).

Roles: lock-leader, lock-follower, sm-leader, pm-leader, en-primary and en-secondary (of the
open extent of a written partition's commit log), ps (the owner of a written partition), fe
(the front end writer 0 talks to). Faults: freeze-5s and freeze-30s (SIGSTOP, then SIGCONT),
isolate-30s (cut off from every other process of the stamp, both ways, then healed), kill
(SIGKILL), slow-disk (every journal fsync of an extent node 200 ms late for 10 s; extent
nodes only). Targets: a stall of at most 1 s for every role but the partition server, at
most 3 s for it (its lease must run out); every writer appending again within 5 s of the
fault's end; nothing acknowledged lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import uvloop
from stampsdk import errors as sdk_errors
from stampsdk.aio import Client as AsyncClient

from common import rpc
from common.errors import StampError
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from lock_service.client import LockClient
from partition_layer.client import AsyncPartitionClient, PartitionClient
from partition_layer.partition_streams import stream_name
from partition_layer.requests import route_key
from stream_layer.sm_client import AsyncStreamManagerClient
from tools import cmd_isolate
from tools.bench.availability_cases import FAULTS, HOLD_S, ROLES, cases
from tools.bench.fresh_stamp import with_fresh_stamp
from tools.bench.front_end import admin_sdk
from tools.bench.measure import row
from tools.chaos.nemesis import restore
from tools.chaos.stamp_faults import partition_op
from tools.local_stamp import LocalStamp

Progress = Callable[[str], None]
SLOW_DISK = "journal.before_fsync=delay:200"
ACCOUNT = "admin"
WRITERS = 8
RECORD_BYTES = 128
# The writers append this long before each fault: a steady state, and acks to measure from.
WARM_S = 3.0
# Every writer must append again within this of the fault's end, or the trial says so
# (`resumed` false) and the bench goes on: a latch must not hang the bench.
RESUME_DEADLINE_S = 60.0
POLL_S = 0.05
STATUS_TIMEOUT_S = 0.5
TARGET_STALL_S = 1.0
TARGET_STALL_PS_S = 3.0
TARGET_RESUME_S = 5.0


@dataclass
class Writer:
    """One SDK client appending `RECORD_BYTES` records to its own log, one at a time."""

    index: int
    client: AsyncClient
    acks: list[float] = field(default_factory=list)  # monotonic time of each acknowledgement
    acked: list[bytes] = field(default_factory=list)
    errors: int = 0

    @property
    def log(self) -> str:
        return log_name(self.index)

    async def run(self, stop: asyncio.Event) -> None:
        sequence = 0
        while not stop.is_set():
            record = f"{self.index}:{sequence}:".encode().ljust(RECORD_BYTES, b".")
            sequence += 1
            try:
                await self.client.append(self.log, [record])
            except (sdk_errors.Unavailable, sdk_errors.DeadlineExceeded, sdk_errors.Throttled):
                self.errors += 1  # the SDK gave up: counted, and the writer goes on
                continue
            self.acks.append(time.monotonic())
            self.acked.append(record)

    def stall_since(self, start: float) -> float:
        """The longest gap between two acknowledgements from the last one before `start`
        on (0 with fewer than two)."""
        times = [t for t in self.acks if t >= start]
        before = [t for t in self.acks if t < start]
        if before:
            times.insert(0, before[-1])
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


@dataclass
class Trial:
    stall_s: float
    resume_s: float | None  # None: some writer did not append again within the deadline
    errors: int
    target: str


def run_availability(roles: tuple[str, ...] = ROLES, faults: tuple[str, ...] = FAULTS,
                     trials: int = 1, progress: Progress = lambda _: None
                     ) -> list[dict[str, Any]]:
    return with_fresh_stamp("", lambda stamp: uvloop.run(
        _bench(stamp, roles, faults, trials, progress)), progress,
        stream_layer_only=False, faults=True)


async def _bench(stamp: LocalStamp, roles: tuple[str, ...], faults: tuple[str, ...],
                 trials: int, progress: Progress) -> list[dict[str, Any]]:
    await asyncio.to_thread(_two_partitions, stamp)
    writers = [Writer(i, admin_sdk(stamp)) for i in range(WRITERS)]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(w.run(stop)) for w in writers]
    results: dict[tuple[str, str], list[Trial]] = {}
    try:
        todo = cases(roles, faults)
        for trial in range(trials):
            for number, (role, fault) in enumerate(todo, 1):
                moved = await asyncio.to_thread(_spread_partitions, stamp)
                if moved:
                    progress(f"shape restored before {fault} of {role}: {moved}")
                found = await _trial(stamp, writers, tasks, role, fault)
                results.setdefault((role, fault), []).append(found)
                progress(f"trial {trial + 1}/{trials}, {number}/{len(todo)}: {fault} of "
                         f"{role} ({found.target}): longest stall {found.stall_s:.2f} s")
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    lost = await _lost(stamp, writers)
    for writer in writers:
        await writer.client.close()
    return ([_row(role, fault, found) for (role, fault), found in results.items()]
            + [row({"check": "acknowledged records read back"},
                   {"acknowledged": sum(len(w.acked) for w in writers), "lost": lost,
                    "writer_errors": sum(w.errors for w in writers)})])


def _row(role: str, fault: str, found: list[Trial]) -> dict[str, Any]:
    stalls = [t.stall_s for t in found]
    resumes = [t.resume_s for t in found]
    target = TARGET_STALL_PS_S if role == "ps" else TARGET_STALL_S
    resumed = all(r is not None for r in resumes)
    worst_resume = max((r for r in resumes if r is not None), default=None)
    return row({"role": role, "fault": fault, "trials": len(found)},
               {"stall_p50_s": round(statistics.median(stalls), 3),
                "stall_max_s": round(max(stalls), 3),
                "resume_max_s": None if worst_resume is None else round(worst_resume, 3),
                "resumed": resumed, "writer_errors": sum(t.errors for t in found),
                "target_stall_s": target,
                "met": resumed and max(stalls) <= target
                and (worst_resume or 0.0) <= TARGET_RESUME_S})


def log_name(index: int) -> str:
    return f"writer-{index}"


def _two_partitions(stamp: LocalStamp) -> None:
    """Split the bootstrap partition at writer 4's log and move the upper half to the other
    partition server: writers 0..3 write to one, 4..7 to the other."""
    partition_op(stamp, "split", ACCOUNT, log_name(WRITERS // 2), 0)
    partition_op(stamp, "move", ACCOUNT, log_name(WRITERS // 2), 0)


def _spread_partitions(stamp: LocalStamp) -> str | None:
    """Give each trial the shape the targets are set for, one partition per partition
    server: an earlier fault of a partition server moved its partition to the other one,
    and nothing moves it back while the load is even (the balancer weighs load, not
    placement). What was moved, or None."""
    with PartitionClient.from_stamp(str(stamp.data_dir)) as client:
        current, _ = client.partition_map()
    low = current.lookup(route_key(ACCOUNT, log_name(0)))
    high = current.lookup(route_key(ACCOUNT, log_name(WRITERS // 2)))
    if low.id == high.id or not low.server or low.server != high.server:
        return None  # spread already, or a partition between servers: nothing to restore
    return partition_op(stamp, "move", ACCOUNT, log_name(WRITERS // 2), 0)


async def _trial(stamp: LocalStamp, writers: list[Writer], tasks: list[asyncio.Task[None]],
                 role: str, fault: str) -> Trial:
    await _all_appending(writers, tasks, time.monotonic())
    await asyncio.sleep(WARM_S)  # the schedule: a steady load before the fault
    target = await _target(stamp, writers[0], role)
    errors_before = sum(w.errors for w in writers)
    started = time.monotonic()
    ended = await _deal(stamp, target, fault)
    resumed = await _all_appending(writers, tasks, ended)
    if fault == "kill":
        await asyncio.to_thread(stamp.start, target)
    await asyncio.to_thread(restore, stamp)  # anything left frozen or dead by the fault
    return Trial(stall_s=max(w.stall_since(started) for w in writers),
                 resume_s=None if resumed is None else resumed - ended,
                 errors=sum(w.errors for w in writers) - errors_before, target=target)


async def _all_appending(writers: list[Writer], tasks: list[asyncio.Task[None]],
                         after: float, deadline_s: float = RESUME_DEADLINE_S
                         ) -> float | None:
    """When the last writer acknowledged its first append after `after` (None: some writer
    had not within `deadline_s`). A writer's error other than the stamp being unavailable
    (which the writer counts and goes on) ends the bench."""
    give_up = time.monotonic() + deadline_s
    while time.monotonic() < give_up:
        for task in tasks:
            if task.done():
                task.result()  # a writer that stopped: its error ends the bench
                raise StampError("a writer stopped")
        firsts = [next((t for t in w.acks[-64:] if t > after), None) for w in writers]
        if all(t is not None for t in firsts):
            return max(t for t in firsts if t is not None)
        await asyncio.sleep(POLL_S)
    return None


async def _deal(stamp: LocalStamp, target: str, fault: str) -> float:
    """Deal `fault` to `target`, hold it, end it; returns when it ended (monotonic)."""
    hold = HOLD_S[fault]
    if fault == "kill":
        stamp.kill(target)
        return time.monotonic()
    if fault.startswith("freeze"):
        pid = stamp.record(target).pid
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(hold)  # the fault's length, not a wait for a condition
        finally:
            os.kill(pid, signal.SIGCONT)
        return time.monotonic()
    address = stamp.address(target)
    if fault == "isolate-30s":
        await asyncio.to_thread(cmd_isolate.isolate, stamp, target)
        try:
            await asyncio.sleep(hold)
        finally:
            await asyncio.to_thread(cmd_isolate.heal, stamp, target)
        return time.monotonic()
    await asyncio.to_thread(rpc.arm_remote, address, SLOW_DISK)
    try:
        await asyncio.sleep(hold)
    finally:
        await asyncio.to_thread(rpc.disarm_remote, address)
    return time.monotonic()


# ---- who plays a role now ---------------------------------------------------------------------

async def _target(stamp: LocalStamp, writer: Writer, role: str) -> str:
    """The name of the process that plays `role` for `writer`'s log now."""
    finders: dict[str, Callable[[], Awaitable[str]]] = {
        "lock-leader": lambda: _lock_member(stamp, leader=True),
        "lock-follower": lambda: _lock_member(stamp, leader=False),
        "sm-leader": lambda: _sm_leader(stamp),
        "pm-leader": lambda: _pm_leader(stamp),
        "en-primary": lambda: _log_replica(stamp, writer.log, 0),
        "en-secondary": lambda: _log_replica(stamp, writer.log, 1),
        "ps": lambda: _owner(stamp, writer.log),
        "fe": lambda: _front_end(stamp, writer),
    }
    return await finders[role]()


async def _lock_member(stamp: LocalStamp, leader: bool) -> str:
    def find() -> str:
        members = stamp.lock_servers()
        client = LockClient([r.address for r in members], holder="bench-availability")
        try:
            roles = {}
            for record in members:
                with contextlib.suppress(StampError):
                    roles[record.name] = client.status(record.address,
                                                       timeout_s=STATUS_TIMEOUT_S).role
        finally:
            client.close()
        wanted = [name for name, got in sorted(roles.items()) if (got == "leader") == leader]
        if not wanted:
            raise StampError(f"no lock-service {'leader' if leader else 'follower'} "
                             f"answered ({roles})")
        return wanted[0]
    return await asyncio.to_thread(find)


async def _sm_leader(stamp: LocalStamp) -> str:
    client = _sm_client(stamp)
    try:
        for record in stamp.stream_managers():
            with contextlib.suppress(StampError):
                if (await client.status(record.address, STATUS_TIMEOUT_S)).leader:
                    return record.name
    finally:
        await client.close()
    raise StampError("no stream manager says it leads")


async def _pm_leader(stamp: LocalStamp) -> str:
    for record in stamp.partition_managers():
        async with rpc.aio_channel(record.address, 1 << 20) as channel:
            with contextlib.suppress(StampError):
                status = await rpc.call(pb_grpc.PartitionManagerStub(channel).Status(
                    pb.ManagerStatusRequest(), timeout=STATUS_TIMEOUT_S))
                if status.leader:
                    return record.name
    raise StampError("no partition manager says it leads")


async def _partition_of(stamp: LocalStamp, log: str) -> tuple[int, str]:
    client = AsyncPartitionClient([r.address for r in stamp.partition_managers()],
                                  stamp.config.partition)
    try:
        current, _ = await client.partition_map()
    finally:
        await client.close()
    entry = current.lookup(route_key(ACCOUNT, log))
    return entry.id, entry.server


async def _owner(stamp: LocalStamp, log: str) -> str:
    return (await _partition_of(stamp, log))[1]


async def _log_replica(stamp: LocalStamp, log: str, index: int) -> str:
    """Replica `index` (0: the primary) of the open extent of the commit log of `log`'s
    partition."""
    partition_id, _ = await _partition_of(stamp, log)
    client = _sm_client(stamp)
    try:
        [info] = [s for s in await client.list_streams(stream_name(partition_id, "log"))
                  if s.name == stream_name(partition_id, "log")]
    finally:
        await client.close()
    return info.extents[-1].replicas[index]


async def _front_end(stamp: LocalStamp, writer: Writer) -> str:
    return stamp.name_of(writer.client.next_endpoint)


def _sm_client(stamp: LocalStamp) -> AsyncStreamManagerClient:
    return AsyncStreamManagerClient([r.address for r in stamp.stream_managers()],
                                    stamp.config.stream_manager)


# ---- nothing acknowledged lost --------------------------------------------------------------

async def _lost(stamp: LocalStamp, writers: list[Writer]) -> int:
    """Acknowledged records missing from their writer's log, read back from the start."""
    reader = admin_sdk(stamp)
    missing = 0
    try:
        for writer in writers:
            found: set[bytes] = set()
            seq = 0
            while True:
                got = await reader.read(writer.log, seq)
                if not got:
                    break
                found.update(data for _, data in got)
                seq = got[-1][0] + 1
            missing += sum(1 for record in writer.acked if record not in found)
    finally:
        await reader.close()
    return missing
