"""Split and merge of range partitions under load (issue 17), on real processes.

32 writers, each with 2 logs and an entity group (64 logs, ETag-conditioned puts, atomic
batches), run while partitions are split, moved and merged by hand, and while the PS or the
PM leader is SIGKILLed at each step of a split and a merge. Afterwards (tools/chaos)
every acknowledged write reads back with the same bytes at the same sequence number, no log
has a gap, no record was appended twice, every ETag condition held; throughout
(tests/split_merge_probe.MapWatcher) every map version seen has disjoint ranges covering the
key space, and no two partitions with overlapping ranges were served at once."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from common import rpc
from common.process import LOG_FILE
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from partition_layer.client import PartitionClient
from partition_layer.payload_crc import payload_crcs
from partition_layer.session import CallSession
from tests.split_merge_probe import (
    MapWatcher,
    all_served,
    current_map,
    name_key,
    pm_call,
)
from tests.support.waiting import wait_until
from tools.chaos.check import check
from tools.chaos.history import AccountView
from tools.chaos.workload import ACCOUNT, MixedWorkload
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

StampFactory = Callable[..., LocalStamp]
WRITERS = 32


# Leases and the pending-op backoff as tests/probe/test_pm_split_merge.py has them, for the
# tests that kill processes: a failover waits out the dead process's leases, and a split or
# merge it interrupted waits for the PM's retries; timers, not work (2 s and 1.5 s leases,
# 1 s backoff by default).
QUICK_RECOVERY = {"partition_lease_ttl_ms": 1000, "server_session_ttl_ms": 1000,
                  "manager_lease_ttl_ms": 1000, "split_retry_backoff_ms": 200}


def split_stamp(factory: StampFactory, partition: dict[str, int] | None = None) -> LocalStamp:
    # Balancing stays off: these tests split and merge by hand.
    return factory(3, 1, lock_servers=3, partition_managers=2, partition_servers=2,
                   partition_manager={"balance_interval_s": 0}, partition=partition)


def account_client(stamp: LocalStamp) -> AccountView:
    return AccountView(PartitionClient.from_stamp(str(stamp.data_dir)), ACCOUNT)


def workload(stamp: LocalStamp, seed: int) -> MixedWorkload:
    return MixedWorkload(lambda: account_client(stamp), WRITERS,
                         seed, large_every=50, logs_per_writer=2, cas_every=4, batch_every=6)


def more_ops(load: MixedWorkload, count: int, timeout_s: float = 60) -> None:
    target = load.ops() + count
    wait_until(lambda: load.ops() >= target, timeout_s, f"{count} more acknowledged ops")


def split(stamp: LocalStamp, partition_id: int, account: str, pname: str
          ) -> pb.PartitionOpReply:
    reply = pm_call(stamp, "Split", pb.SplitPartitionRequest(
        partition_id=partition_id, key=name_key(account, pname), trigger="operator"))
    assert reply.done.result == "ok", reply.done
    assert list(reply.done.from_ids) == [partition_id] and len(reply.done.to_ids) == 2
    return reply


def merge(stamp: LocalStamp, left: int, right: int = 0) -> pb.PartitionOpReply:
    reply = pm_call(stamp, "Merge", pb.MergePartitionsRequest(left_id=left, right_id=right,
                                                               trigger="operator"))
    assert reply.done.result == "ok", reply.done
    assert len(reply.done.to_ids) == 1
    return reply


@pytest.mark.serial  # timing-sensitive: run alone (`make test`)
def test_split_move_and_merge_by_hand_under_load(stamp_factory: StampFactory) -> None:
    stamp = split_stamp(stamp_factory)
    load = workload(stamp, seed=17)
    with MapWatcher(stamp) as watcher:
        load.start()
        try:
            more_ops(load, 500)
            # "group-*" < "log-1*" < "log-2*": the cuts fall among the writers' names.
            left, right = split(stamp, 1, "acct", "log-2").done.to_ids
            more_ops(load, 300)
            low, middle = split(stamp, left, "acct", "log-1").done.to_ids
            more_ops(load, 300)
            # The right child moves to the other PS, then merges back with its neighbour
            # (the PM first brings both onto one PS).
            current = current_map(stamp)
            other = next(r.name for r in stamp.partition_servers()
                         if r.name != current.get(right).server)
            pm_call(stamp, "Move", pb.MoveRequest(partition_id=right, server=other))
            more_ops(load, 300)
            (joined,) = merge(stamp, middle, right).done.to_ids
            more_ops(load, 300)
            (whole,) = merge(stamp, low).done.to_ids
            more_ops(load, 300)
        finally:
            load.stop()
        final = current_map(stamp)
        assert [p.id for p in final.partitions] == [whole]
        assert joined not in {p.id for p in final.partitions}
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        checked = check(AccountView(pc, ACCOUNT), load.histories)
    assert checked["records"] > 1000
    watcher.check(versions_min=5)
    history = pm_call(stamp, "History", pb.HistoryRequest()).entries
    # In this order (a merge may add moves of its own, bringing both halves together).
    ops = iter(e.op for e in history if e.trigger == "operator")
    assert all(op in ops for op in ["split", "split", "move", "merge", "merge"]), \
        [(e.op, e.trigger) for e in history]
    assert all(e.result == "ok" and e.unavailable_s < 10 for e in history
               if e.op in ("split", "merge"))


def test_a_split_child_serves_after_its_server_dies(stamp_factory: StampFactory) -> None:
    """Children are ordinary partitions once published: SIGKILL their PS and both move."""
    stamp = split_stamp(stamp_factory, QUICK_RECOVERY)
    load = workload(stamp, seed=18)
    with MapWatcher(stamp) as watcher:
        load.start()
        try:
            more_ops(load, 300)
            split(stamp, 1, "acct", "log-2")
            more_ops(load, 200)
            victim = current_map(stamp).partitions[0].server
            stamp.kill(victim)
            wait_until(lambda: all(p.server != victim for p in current_map(stamp).partitions),
                       30, "the children to move off the dead PS")
            wait_until(lambda: all_served(stamp), 30, "every partition served")
            more_ops(load, 300)
        finally:
            load.stop()
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        check(AccountView(pc, ACCOUNT), load.histories)
    watcher.check(versions_min=3)


def _recovered(stamp: LocalStamp, before: int) -> bool:
    """The PM finished or rolled back the interrupted operation: a history entry newer
    than `before` entries, and every partition of the map served."""
    entries = pm_call(stamp, "History", pb.HistoryRequest()).entries
    return len(entries) > before and all_served(stamp)


# The partition server's steps, one on each side of the commit: what the PM does after a
# crash (roll the intent back, or finish loading the children) depends only on which side
# the operation died on. tests/probe/test_ps_split_merge.py crashes the PS at every one of
# them (checkpointed, intent_written, sealed, committed, children or merged loading).
SPLIT_STEPS = ["ps.split.sealed", "ps.split.committed"]
MERGE_STEPS = ["ps.merge.sealed", "ps.merge.committed"]
PM_STEPS = ["pm.split.pending_written", "pm.split.before_publish",
            "pm.merge.pending_written", "pm.merge.before_publish"]


def test_sigkill_at_each_step_of_a_split_and_a_merge(stamp_factory: StampFactory) -> None:
    """For each step: arm `crash` there on the process that runs it, ask for the operation,
    restart what died, and wait until the PM has finished or rolled it back. One stamp and
    one workload go through all of them; the checks run at the end (and the watcher
    throughout)."""
    stamp = split_stamp(stamp_factory, QUICK_RECOVERY)
    load = workload(stamp, seed=19)
    cut = iter(f"log-{n}" for n in range(2, 30))
    with MapWatcher(stamp) as watcher:
        load.start()
        try:
            more_ops(load, 300)
            for step in SPLIT_STEPS + MERGE_STEPS + PM_STEPS:
                current = current_map(stamp)
                merging = ".merge." in step
                if merging and len(current.partitions) < 2:
                    split(stamp, current.partitions[0].id, "acct", next(cut))
                    current = current_map(stamp)
                elif not merging and len(current.partitions) > 3:
                    merge(stamp, current.partitions[0].id)  # keep the map small
                    current = current_map(stamp)
                key = name_key("acct", next(cut))
                target = current.partitions[0] if merging else current.lookup(key)
                if step.startswith("ps."):
                    victim = target.server
                else:
                    victim = next(r.name for r in stamp.partition_managers()
                                  if stamp.alive(r.name) and pm_leads(stamp, r.name))
                rpc.arm_remote(stamp.address(victim), f"{step}=crash,times=1")
                before = len(pm_call(stamp, "History", pb.HistoryRequest()).entries)
                try:
                    if merging:
                        pm_call(stamp, "Merge", pb.MergePartitionsRequest(
                            left_id=target.id, trigger="operator"), timeout_s=30)
                    else:
                        pm_call(stamp, "Split", pb.SplitPartitionRequest(
                            partition_id=target.id, key=key, trigger="operator"),
                            timeout_s=30)
                except Exception:  # the crash cut the call: the PM resolves it
                    pass
                wait_until(lambda v=victim: not stamp.alive(v), 30, f"{step} to crash {victim}")
                stamp.start(victim)
                wait_until(lambda b=before: _recovered(stamp, b), 60,
                           f"the operation interrupted at {step} to be finished or undone")
                more_ops(load, 100)
        finally:
            load.stop()
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        check(AccountView(pc, ACCOUNT), load.histories)
    watcher.check(versions_min=3)


def pm_leads(stamp: LocalStamp, name: str) -> bool:
    async def ask() -> bool:
        async with rpc.aio_channel(stamp.address(name), 16 << 20) as channel:
            reply = await rpc.call(pb_grpc.PartitionManagerStub(channel).Status(
                pb.ManagerStatusRequest(), timeout=2))
        return reply.leader
    return asyncio.run(ask())


@pytest.mark.serial  # timing-sensitive: run alone (`make test`)
def test_split_copies_no_data(stamp_factory: StampFactory) -> None:
    """A partition holding 200 MB splits with the stamp's disk growing by less than 1%:
    the children's streams point at the parent's extents."""
    stamp = split_stamp(stamp_factory)
    value = bytes(range(256)) * 4096  # 1 MiB: blob data
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        for n in range(200):
            pc.append("acct", f"big-{n % 4}", [value])
        pc.append("acct", "log-x", [b"small"])
        before = disk_bytes(stamp)
        started = time.monotonic()
        reply = split(stamp, 1, "acct", "big-2")
        grown = disk_bytes(stamp) - before
        assert grown < before / 100, f"the split wrote {grown} bytes of {before}"
        assert time.monotonic() - started < 30
        for n in range(4):
            assert pc.read("acct", f"big-{n}", 0, 100)[-1][1] == value
        assert reply.done.unavailable_s < 10


def disk_bytes(stamp: LocalStamp) -> int:
    """Bytes the stamp's files hold on disk (allocated blocks, as du counts them)."""
    total = 0
    for path in stamp.data_dir.rglob("*"):
        if path.is_file():
            total += path.stat().st_blocks * 512
    return total


@pytest.mark.serial  # timing-sensitive: run alone (`make test`)
def test_deposed_ps_cannot_make_a_write_visible_after_a_split(stamp_factory: StampFactory
                                                               ) -> None:
    """The owner freezes (SIGSTOP) in the middle of a commit; its lease lapses, the other
    PS loads the partition and the PM splits it there; then the frozen one wakes up and
    carries on with its commit, into streams that were retired by the split. The append
    must fail and the record never appear, in either child."""
    stamp = split_stamp(stamp_factory)
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        pc.append("acct", "log", [b"r0"])
        old = current_map(stamp).get(1).server
        new = next(r.name for r in stamp.partition_servers() if r.name != old)
        rpc.arm_remote(stamp.address(old), "ps.commit.before_append=delay:1000,times=1; "
                                           "ps.lease_lost=delay:3000")

        async def stale_append() -> pb.Response | Exception:
            session = CallSession(stamp.address(old), lambda: pb_grpc.PartitionServerStub(
                rpc.aio_channel(stamp.address(old), 16 << 20)))
            try:
                return await session.call(pb.Request(
                    account="acct", pname="log", append=pb.AppendOp(
                        records=[b"stale"], crcs=payload_crcs([b"stale"]), token="stale-1")),
                    60)
            except Exception as exc:  # a broken stream is an answer too
                return exc
            finally:
                await session.close()

        async def scenario() -> pb.Response | Exception:
            pending = asyncio.ensure_future(stale_append())
            while not log_says(stamp, old, "fault point ps.commit.before_append fired"):
                await asyncio.sleep(0.01)
            os.kill(stamp.record(old).pid, signal.SIGSTOP)
            try:
                await asyncio.to_thread(wait_until, lambda: current_map(stamp).get(1).server
                                        == new and all_served(stamp), 30,
                                        "the other PS to take the partition over")
                reply = await asyncio.to_thread(split, stamp, 1, "acct", "log")
                assert len(reply.done.to_ids) == 2
            finally:
                os.kill(stamp.record(old).pid, signal.SIGCONT)
            return await pending
        answer = pc.run(scenario())
        assert isinstance(answer, Exception) or answer.error, f"stale append acked: {answer}"
        wait_until(lambda: log_says(stamp, old, "partition 1 stops serving"), 15,
                   "the old owner to stop serving")
        assert pc.read("acct", "log", 0, 10) == [(0, b"r0")]
        assert pc.peek("acct", "log") == (0, 1)
        assert pc.append("acct", "log", [b"r1"]) == 1


def log_says(stamp: LocalStamp, name: str, text: str) -> bool:
    return text in (Path(stamp.record(name).dir) / LOG_FILE).read_text(errors="replace")
