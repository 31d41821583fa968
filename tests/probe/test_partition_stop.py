"""A partition server stopping, on purpose or not (issue 15, hole 8): an unexpected exception
in the group committer unloads the partition cleanly and it is served again; a SIGTERM
answers every request it holds, leaves no task behind and exits 0. Real processes; the
checker proves afterwards that no acknowledged append was lost."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from common import rpc
from common.process import LOG_FILE
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from partition_layer.client import PartitionClient
from partition_layer.payload_crc import payload_crcs
from partition_layer.session import CallSession
from tests.support.partitions import aserving
from tests.support.stamps import StampFactory, log_says, owner_of, partition_stamp
from tools.chaos.extents import acknowledged, append_load, check_logs
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

# What asyncio logs about a task nobody looked after or an exception that reached the top of
# the process; and the traceback any escaped exception prints.
ABANDONED = ("exception was never retrieved", "Task was destroyed but it is pending",
             "unhandled exception")
TRACEBACK = "Traceback (most recent call last)"


def unclean_lines(stamp: LocalStamp, name: str, marks: tuple[str, ...]) -> list[str]:
    text = (Path(stamp.record(name).dir) / LOG_FILE).read_text(errors="replace")
    return [line for line in text.splitlines() if any(mark in line for mark in marks)]


async def wait_exit_code(pid: int, timeout_s: float) -> int:
    """Reap our child `pid` once it exits; its exit code (negative: killed by that signal)."""
    deadline = time.monotonic() + timeout_s
    while True:
        reaped, status = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return os.waitstatus_to_exitcode(status)
        assert time.monotonic() < deadline, f"process {pid} still runs after {timeout_s}s"
        await asyncio.sleep(0.05)


def test_committer_bug_unloads_the_partition_and_it_is_served_again(
        stamp_factory: StampFactory) -> None:
    """A non-Stamp exception where the committer decides a block: the partition stops
    serving (its queued operations hear NotOwner, its lease goes), the PM has it loaded
    again, the writers ride through, and every acknowledged append is still there."""
    stamp = partition_stamp(stamp_factory)
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        owner = owner_of(stamp, pc)
        acked: list[tuple[str, int, bytes]] = []

        async def scenario() -> None:
            stop = asyncio.Event()
            load = asyncio.ensure_future(append_load(pc.aio, 32, stop, acked))
            await acknowledged(acked, 200, 60)
            rpc.arm_remote(stamp.address(owner), "ps.commit.encode=bug,times=1")
            deadline = time.monotonic() + 60
            while not log_says(stamp, owner, "fault point ps.commit.encode fired"):
                assert time.monotonic() < deadline, "the fault point never fired"
                await asyncio.sleep(0.05)
            failed_at = len(acked)
            # Appends go on once the partition is served again (here or on the other PS).
            await acknowledged(acked, failed_at + 300, 60)
            stop.set()
            await asyncio.wait_for(load, 60)
            servers = [r.name for r in stamp.partition_servers()]
            assert any([await aserving(stamp, name) for name in servers])
        pc.run(scenario())
        # The bug is logged with its traceback, and nothing is left unlooked-after.
        assert log_says(stamp, owner, "partition 1: the group committer failed")
        assert log_says(stamp, owner, "partition 1 stops serving: its group committer failed")
        assert unclean_lines(stamp, owner, ABANDONED) == []
        check_logs(pc, acked)


def test_sigterm_answers_every_request_and_exits_cleanly(stamp_factory: StampFactory) -> None:
    """SIGTERM to the owner while blocks are in flight and requests are queued behind them:
    each request on an open stream gets an answer (done, or NotOwner/Unavailable: retry),
    none hears a broken stream; the process exits 0 with nothing unclean in its log; the
    other PS takes over and nothing acknowledged is lost."""
    stamp = partition_stamp(stamp_factory)
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        pc.append("acct", "log-0", [b"first"])
        owner = owner_of(stamp, pc)
        acked: list[tuple[str, int, bytes]] = [("log-0", 0, b"first")]
        # Every block waits a while before it is appended: blocks stay in flight and
        # operations queue behind them when the signal comes.
        rpc.arm_remote(stamp.address(owner), "ps.commit.before_append=delay:3000")

        async def direct_appends(session: CallSession, count: int) -> list[pb.Response]:
            return await asyncio.gather(*(session.call(pb.Request(
                account="acct", pname=f"direct-{i % 3}",
                append=pb.AppendOp(records=[f"d{i}".encode()],
                                   crcs=payload_crcs([f"d{i}".encode()]),
                                   token=f"direct-{i}")), 60)
                for i in range(count)))

        async def scenario() -> tuple[list[pb.Response], int]:
            session = CallSession(stamp.address(owner), lambda: pb_grpc.PartitionServerStub(
                rpc.aio_channel(stamp.address(owner), 16 << 20)))
            stop = asyncio.Event()
            load = asyncio.ensure_future(append_load(pc.aio, 16, stop, acked))
            try:
                direct = asyncio.ensure_future(direct_appends(session, 60))
                deadline = time.monotonic() + 60
                while not log_says(stamp, owner, "fault point ps.commit.before_append fired"):
                    assert time.monotonic() < deadline, "no block reached the append"
                    await asyncio.sleep(0.05)
                pid = stamp.record(owner).pid
                os.kill(pid, signal.SIGTERM)
                answers = await asyncio.wait_for(direct, 60)
                code = await wait_exit_code(pid, 60)
                stopped_at = len(acked)
                await acknowledged(acked, stopped_at + 200, 60)  # at the other PS now
                stop.set()
                await asyncio.wait_for(load, 60)
            finally:
                await session.close()
            return answers, code
        answers, code = pc.run(scenario())
        assert code == 0, f"{owner} exited with {code}"
        assert unclean_lines(stamp, owner, (*ABANDONED, TRACEBACK)) == []
        retryable = {"NotOwner", "Unavailable"}
        for response in answers:
            assert not response.error or response.error in retryable, response
        done = [(f"direct-{i % 3}", r.first_seq, f"d{i}".encode())
                for i, r in enumerate(answers) if not r.error]
        check_logs(pc, acked + done)
