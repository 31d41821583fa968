"""The partition manager splits and merges (issue 17, manager_ops.py), real processes: an
operator's `stamp partition split` and `merge` under an append load, a SIGKILL of the PM
leader at each of its steps (fault points pm.split.pending_written, pm.split.before_publish,
pm.merge.pending_written, pm.merge.before_publish: the standby finishes the op), and a
split the PS keeps failing before it commits (rolled back after the bound).

Checks everywhere: every acknowledged append reads back at its sequence number with its
bytes, no log has a gap or a doubled record (tools/chaos/extents.py); the map's version only grows
and every version seen holds invariant 4 (PartitionMap.from_pb validates it); the history
in the lock service says what happened.

Needs branches psplit17 (the PS's Split / Merge and create_if_missing), sm17 and views17 (the
children's streams and views) merged with this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from common import rpc
from common.errors import StampError
from common.proto import faults_pb2
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from partition_layer import keys
from partition_layer.client import PartitionClient
from partition_layer.partition_map import PartitionMap
from tests.conftest import config_toml, stamp_config
from tests.support.stamps import log_says
from tools.chaos.extents import append_load, check_logs
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

PARTITION = {"partition_lease_ttl_ms": 1000, "server_session_ttl_ms": 1000,
             "manager_lease_ttl_ms": 1000}
# No balancing pass: only the operator changes the map here.
MANAGER: dict[str, float | str] = {"balance_interval_s": 0}
OP_WAIT_S = 90.0


@contextlib.contextmanager
def started_stamp(root: Path, manager: dict[str, float | str],
                  partition: dict[str, int] = PARTITION) -> Iterator[LocalStamp]:
    """3 ENs, 1 SM, 3 lock replicas, 2 PMs, 2 PSs, with `manager` as its partition_manager
    config section and `partition` as its partition section."""
    config = stamp_config(3, 1, lock_servers=3, partition_managers=2, partition_servers=2,
                          partition=partition)
    config_file = root / "stamp.toml"
    config_file.write_text(config_toml(partition=partition,
                                       partition_manager=manager))  # type: ignore[arg-type]
    stamp = LocalStamp(root / "stamp", config, str(config_file))
    try:
        stamp.up()
        yield stamp
    finally:
        stamp.kill_all()


@pytest.fixture
def pm_stamp(tmp_path: Path) -> Iterator[LocalStamp]:
    """The balancing pass off: only the test changes the map."""
    with started_stamp(tmp_path, MANAGER) as stamp:
        yield stamp


def cli(stamp: LocalStamp, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir",
                             str(stamp.data_dir), *args], capture_output=True, text=True,
                            timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"stamp {' '.join(args)}:\n{result.stdout}{result.stderr}")
    return result


async def manager_map(stamp: LocalStamp) -> PartitionMap | None:
    """The map as a live PM answers it (validated by from_pb: invariant 4)."""
    for rec in stamp.partition_managers():
        if not stamp.alive(rec.name):
            continue
        async with rpc.aio_channel(rec.address, 16 << 20) as channel:
            try:
                reply = await rpc.call(pb_grpc.PartitionManagerStub(channel).GetMap(
                    pb.GetMapRequest(), timeout=2))
            except StampError:
                continue
        return PartitionMap.from_pb(reply)[0]
    return None


async def leader(stamp: LocalStamp) -> str | None:
    for rec in stamp.partition_managers():
        if not stamp.alive(rec.name):
            continue
        async with rpc.aio_channel(rec.address, 16 << 20) as channel:
            try:
                reply = await rpc.call(pb_grpc.PartitionManagerStub(channel).Status(
                    pb.ManagerStatusRequest(), timeout=2))
            except StampError:
                continue
        if reply.leader:
            return rec.name
    return None


class MapWatch:
    """Polls the map while a scenario runs: every version seen, each validated."""

    def __init__(self, stamp: LocalStamp) -> None:
        self.stamp = stamp
        self.seen: dict[int, PartitionMap] = {}
        self._task: asyncio.Task[None] | None = None

    async def _poll(self) -> None:
        while True:
            current = await manager_map(self.stamp)
            if current is not None:
                known = self.seen.get(current.version)
                assert known is None or known.partitions == current.partitions, \
                    f"two maps with version {current.version}"
                self.seen[current.version] = current
            await asyncio.sleep(0.02)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._poll())

    async def stop(self) -> None:
        assert self._task is not None
        if self._task.done():
            self._task.result()  # an assertion in the poller fails the test
        self._task.cancel()

    async def until(self, check: Callable[[PartitionMap], bool], what: str) -> PartitionMap:
        deadline = time.monotonic() + OP_WAIT_S
        while True:
            current = await manager_map(self.stamp)
            if current is not None and check(current):
                return current
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.05)


async def acked_more(acked: list[object], count: int) -> None:
    target = len(acked) + count
    deadline = time.monotonic() + OP_WAIT_S
    while len(acked) < target:
        assert time.monotonic() < deadline, f"appends stalled at {len(acked)}"
        await asyncio.sleep(0.01)


def name_key(pname: str) -> bytes:
    return keys.encode_key("acct", pname, keys.KIND_META, b"")


def history(stamp: LocalStamp) -> list[dict[str, object]]:
    entries: list[dict[str, object]] = json.loads(
        cli(stamp, "partition", "history", "--json").stdout)["entries"]
    return entries


def test_split_and_merge_by_hand_under_load(pm_stamp: LocalStamp) -> None:
    """`stamp partition split 1 --key acct/log-2`, a move of the right child to the other
    PS, then `merge` of the children (the right one moved back first), under 8 appenders
    over log-0..3: each prints its unavailable time, the map goes 1 -> 2+3 -> 4,
    ls --json shows the ranges in hex, the history has both, every write reads back."""
    stamp = pm_stamp
    acked: list[tuple[str, int, bytes]] = []
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        pc.wait_served()

        async def scenario() -> None:
            watch = MapWatch(stamp)
            watch.start()
            stop = asyncio.Event()
            load = asyncio.ensure_future(append_load(pc.aio, 8, stop, acked))
            await acked_more(acked, 200)
            out = (await asyncio.to_thread(
                cli, stamp, "partition", "split", "1", "--key", "acct/log-2")).stdout
            assert out.startswith("split partition 1 into 2 [-inf, acct/log-2), "
                                  "3 [acct/log-2, +inf) on ps-"), out
            assert "the range was unavailable" in out
            await acked_more(acked, 200)
            # The halves on different servers: the merge first moves the right one back.
            current = await manager_map(stamp)
            assert current is not None
            other = next(r.name for r in stamp.partition_servers()
                         if r.name != current.get(2).server)
            await asyncio.to_thread(cli, stamp, "partition", "move", "3", other)
            await acked_more(acked, 100)
            out = (await asyncio.to_thread(cli, stamp, "partition", "merge", "2")).stdout
            assert out.startswith("merged partition 2+3 into 4 [-inf, +inf)"), out
            await acked_more(acked, 200)
            stop.set()
            await load
            await watch.stop()
            versions = sorted(watch.seen)
            shapes = [[p.id for p in watch.seen[v].partitions] for v in versions]
            assert [1] in shapes and [2, 3] in shapes and shapes[-1] == [4], shapes
            assert shapes.index([1]) < shapes.index([2, 3]) < shapes.index([4])
        pc.run(scenario())
        check_logs(pc, acked)

    listed = json.loads(cli(stamp, "partition", "ls", "--json").stdout)["partitions"]
    assert [(r["id"], r["low"], r["high"]) for r in listed] == [(4, "", None)]
    done = [(e["op"], e["from_ids"], e["to_ids"], e["trigger"], e["result"])
            for e in history(stamp) if e["op"] in ("split", "merge", "move")]
    assert done == [("split", [1], [2, 3], "operator", "ok"),
                    ("move", [3], [3], "operator", "ok"),   # by hand
                    ("move", [3], [3], "operator", "ok"),   # the merge's, back
                    ("merge", [2, 3], [4], "operator", "ok")], done


def test_operator_mistakes_are_one_line(pm_stamp: LocalStamp) -> None:
    stamp = pm_stamp
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        pc.wait_served()
    for args, fragment in (
            (("partition", "split", "9", "--key", "acct/x"), "no partition 9"),
            (("partition", "split", "1", "--key", "/x"), "ACCOUNT/PARTITION_NAME"),
            (("partition", "merge", "1"), "no right neighbour"),
            (("partition", "merge", "1", "7"), "no partition 7")):
        result = cli(stamp, *args, check=False)
        lines = result.stderr.splitlines()
        assert result.returncode != 0 and len(lines) == 1 and fragment in lines[0] \
            and "Traceback" not in result.stderr, (args, result.stderr)
    result = cli(stamp, "partition", "split", "1", check=False)  # no load reported: no key
    assert result.returncode == 1 and len(result.stderr.splitlines()) == 1 \
        and "give --key" in result.stderr, result.stderr
    cli(stamp, "partition", "split", "1", "--key", "acct/m")
    result = cli(stamp, "partition", "split", "2", "--key", "acct/z", check=False)
    assert result.returncode == 1 and "not strictly inside" in result.stderr, result.stderr
    result = cli(stamp, "partition", "merge", "3", "2", check=False)
    assert result.returncode == 1 and "not adjacent" in result.stderr, result.stderr
    out = cli(stamp, "partition", "balance", "--dry-run").stdout
    assert out.strip(), "balance --dry-run prints its decision"


@pytest.mark.parametrize("point", ["pm.split.pending_written", "pm.split.before_publish",
                                   "pm.merge.pending_written", "pm.merge.before_publish"])
def test_pm_leader_killed_mid_operation(pm_stamp: LocalStamp, point: str) -> None:
    """The PM leader SIGKILLs itself at `point`; the standby leads, finds the pending op and
    finishes it (before the PS was asked: it asks; after: the stream manager says it
    committed and it publishes). The map never shows both the parent and a child."""
    stamp = pm_stamp
    acked: list[tuple[str, int, bytes]] = []
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        pc.wait_served()

        async def scenario() -> None:
            watch = MapWatch(stamp)
            watch.start()
            stop = asyncio.Event()
            load = asyncio.ensure_future(append_load(pc.aio, 8, stop, acked))
            await acked_more(acked, 100)
            if point.startswith("pm.merge"):
                await asyncio.to_thread(cli, stamp, "partition", "split", "1", "--key",
                                        "acct/log-2")
                await acked_more(acked, 100)
            old = await leader(stamp)
            assert old is not None
            await asyncio.to_thread(rpc.arm_remote, stamp.address(old), f"{point}=crash")
            args = ("merge", "2", "3") if point.startswith("pm.merge") else \
                ("split", "1", "--key", "acct/log-2")
            result = await asyncio.to_thread(cli, stamp, "partition", *args, check=False)
            assert result.returncode == 1, result.stdout  # its PM died under it
            assert log_says(stamp, old, f"fault point {point}: crashing the process")
            stamp.kill(old)  # reaps it
            want = [4] if point.startswith("pm.merge") else [2, 3]
            await watch.until(lambda m: [p.id for p in m.partitions] == want
                              and not m.pending, f"the standby to finish: {want}")
            await acked_more(acked, 100)
            stop.set()
            await load
            await watch.stop()
            for current in watch.seen.values():
                ids = {p.id for p in current.partitions}
                assert not ({1} & ids and {2, 3} & ids) and not ({4} & ids and {2, 3} & ids)
        pc.run(scenario())
        check_logs(pc, acked)
    ops = [(e["op"], e["result"]) for e in history(stamp) if e["op"] in ("split", "merge")]
    assert ops[-1] == ("merge" if point.startswith("pm.merge") else "split", "ok"), ops


@pytest.fixture
def quick_retry_stamp(tmp_path: Path) -> Iterator[LocalStamp]:
    """As `pm_stamp`, with a pending split tried again 0.2 s (not 1 s) times its attempts
    after a failed call: the 5 attempts before a roll-back take 2 s of backoff, not 10 s
    (still longer than the 1 s partition lease the backoff must outlast)."""
    with started_stamp(tmp_path, MANAGER,
                       {**PARTITION, "split_retry_backoff_ms": 200}) as stamp:
        yield stamp


def test_split_that_never_commits_is_rolled_back(quick_retry_stamp: LocalStamp) -> None:
    """The PS fails every Split after writing its intent (ps.split.intent_written=fail): the
    PM counts the failed calls, rolls the split back after its bound, and the parent serves
    again (its loader drops the intent); the history says so; no write is lost."""
    stamp = quick_retry_stamp
    acked: list[tuple[str, int, bytes]] = []
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        pc.wait_served()
        owner = pc.partition_map()[0].get(1).server

        async def scenario() -> None:
            stop = asyncio.Event()
            load = asyncio.ensure_future(append_load(pc.aio, 4, stop, acked))
            await acked_more(acked, 100)
            await asyncio.to_thread(rpc.arm_remote, stamp.address(owner),
                                    "ps.split.intent_written=fail")
            result = await asyncio.to_thread(cli, stamp, "partition", "split", "1", "--key",
                                             "acct/log-2", check=False)
            # The operator's call waits for the outcome: rolled back. It waits for seconds:
            # its progress line may come first (tools/progress.py), then the one-line error.
            errors = [line for line in result.stderr.splitlines()
                      if not line.startswith("[partition split] ")]
            assert result.returncode == 1 and len(errors) == 1 and "rolled back: not " \
                "committed after 5 failed attempts" in errors[0], result.stderr
            deadline = time.monotonic() + OP_WAIT_S
            while not any(str(e["result"]).startswith("rolled back")
                          for e in await asyncio.to_thread(history, stamp)):
                assert time.monotonic() < deadline, "the split was never rolled back"
                await asyncio.sleep(0.2)
            await acked_more(acked, 100)  # partition 1 serves again
            current = await manager_map(stamp)
            assert current is not None and [p.id for p in current.partitions] == [1]
            await asyncio.to_thread(rpc._faults_call, stamp.address(owner), "Disarm",
                                    faults_pb2.DisarmRequest(name="ps.split.intent_written"),
                                    5.0)
            out = (await asyncio.to_thread(cli, stamp, "partition", "split", "1", "--key",
                                           "acct/log-2")).stdout
            assert out.startswith("split partition 1 into 4 "), out  # 2 and 3 stay spent
            await acked_more(acked, 100)
            stop.set()
            await load
        pc.run(scenario())
        check_logs(pc, acked)


# A partition is hot from 20 ops/s (8 appenders make hundreds), its figures count from the
# first second; no merge (2 PSs x 5 is above any count reached here).
HOT: dict[str, float | str] = {"split_ops_per_s_min": 20, "settle_s": 0.5,
                               "finder_requests_min": 50}


def load_splits(stamp: LocalStamp) -> list[dict[str, object]]:
    return [e for e in history(stamp) if e["op"] == "split" and e["trigger"] == "load"]


def test_balance_dry_run_then_for_real(tmp_path: Path) -> None:
    """`stamp partition balance --dry-run` names the split of the hot partition with its
    reason and changes nothing; `stamp partition balance` does it (trigger "load" in the
    history); every write reads back."""
    acked: list[tuple[str, int, bytes]] = []
    with started_stamp(tmp_path, {**MANAGER, **HOT}) as stamp, \
            PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        pc.wait_served()

        async def scenario() -> None:
            stop = asyncio.Event()
            load = asyncio.ensure_future(append_load(pc.aio, 8, stop, acked))
            deadline = time.monotonic() + OP_WAIT_S
            while True:
                out = json.loads((await asyncio.to_thread(
                    cli, stamp, "partition", "balance", "--dry-run", "--json")).stdout)
                if any(a["op"] == "split" for a in out["actions"]):
                    break
                assert time.monotonic() < deadline, f"no split proposed: {out}"
                await asyncio.sleep(0.5)
            split = next(a for a in out["actions"] if a["op"] == "split")
            assert split["partition_ids"] == [1] and split["trigger"] == "load" \
                and "ops/s" in split["reason"], split
            current = await manager_map(stamp)
            assert current is not None and [p.id for p in current.partitions] == [1]
            assert not load_splits(stamp), "a dry run did something"
            out = (await asyncio.to_thread(cli, stamp, "partition", "balance")).stdout
            assert "ran split of partition 1" in out, out
            done = load_splits(stamp)
            assert [(e["from_ids"], e["result"]) for e in done] == [([1], "ok")], done
            await acked_more(acked, 100)
            stop.set()
            await load
        pc.run(scenario())
        check_logs(pc, acked)


def test_balance_pass_splits_a_hot_partition_by_itself(tmp_path: Path) -> None:
    """The leader's pass (every second here) splits the hot partition at its load key and
    records it; the writers never see an error; every write reads back."""
    acked: list[tuple[str, int, bytes]] = []
    with started_stamp(tmp_path, {"balance_interval_s": 1, **HOT}) as stamp, \
            PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        pc.wait_served()

        async def scenario() -> None:
            stop = asyncio.Event()
            load = asyncio.ensure_future(append_load(pc.aio, 8, stop, acked))
            deadline = time.monotonic() + OP_WAIT_S
            while not any(e["result"] == "ok" for e in
                          await asyncio.to_thread(load_splits, stamp)):
                assert time.monotonic() < deadline, "the pass split nothing"
                assert not load.done(), load  # an appender error ends the load
                await asyncio.sleep(0.5)
            await acked_more(acked, 100)
            stop.set()
            await load
            current = await manager_map(stamp)
            assert current is not None and len(current.partitions) >= 2
        pc.run(scenario())
        check_logs(pc, acked)


def test_split_children_move_when_their_server_dies(pm_stamp: LocalStamp) -> None:
    """A split at the policy's key (no --key), then the children's PS is SIGKILLed: the PM
    reassigns both to the other PS (history: reassign, dead server), which loads them from
    their own streams (never created empty: they were born of a split); every write reads
    back."""
    stamp = pm_stamp
    acked: list[tuple[str, int, bytes]] = []
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        pc.wait_served()

        async def scenario() -> None:
            stop = asyncio.Event()
            load = asyncio.ensure_future(append_load(pc.aio, 8, stop, acked))
            await acked_more(acked, 200)
            # No --key: the policy's key, from the load the partition's heartbeats report
            # (a clear error until they report enough requests).
            deadline = time.monotonic() + OP_WAIT_S
            while True:
                result = await asyncio.to_thread(cli, stamp, "partition", "split", "1",
                                                 check=False)
                if result.returncode == 0:
                    break
                assert "give --key" in result.stderr, result.stderr
                assert time.monotonic() < deadline, result.stderr
                await asyncio.sleep(0.5)
            assert result.stdout.startswith("split partition 1 into 2 [-inf, acct/log-"), \
                result.stdout
            await acked_more(acked, 100)
            current = await manager_map(stamp)
            assert current is not None
            victim = current.get(2).server
            stamp.kill(victim)
            await acked_more(acked, 200)  # both halves serve again elsewhere
            stop.set()
            await load
            current = await manager_map(stamp)
            assert current is not None and [p.id for p in current.partitions] == [2, 3]
            assert {p.server for p in current.partitions} != {victim}
        pc.run(scenario())
        check_logs(pc, acked)
    moved = {tuple(e["from_ids"]) for e in history(stamp)  # type: ignore[arg-type]
             if e["op"] == "reassign" and e["trigger"] == "dead server"}
    assert {(2,), (3,)} <= moved, history(stamp)


# One step on each side of the commit: what the PM does with a dead PS's operation (move its
# sources to the live PS and ask again, or publish what the stream manager says committed)
# depends only on the side. The PS's own handling of every step is
# tests/probe/test_ps_split_merge.py's (a crash at each of the five), and
# test_split_merge.py crashes and restarts the PS at two others (sealed, committed).
PS_SPLIT_POINTS = ["ps.split.intent_written", "ps.split.committed"]
PS_MERGE_POINTS = ["ps.merge.intent_written", "ps.merge.committed"]


@pytest.mark.parametrize("point", PS_SPLIT_POINTS + PS_MERGE_POINTS)
def test_ps_killed_at_each_step(pm_stamp: LocalStamp, point: str) -> None:
    """The PS SIGKILLs itself at `point` of a split (or merge) the operator asked for, and
    stays down: the PM's call fails, the op is pending in the map. Before the commit
    the PM moves the op's sources to the live PS and asks it again (a merge's two halves
    loaded there first); after it, the stream manager says it committed and the PM publishes.
    Either way the op completes on the live PS, the operator's command reports it done, the
    map never shows both the parent and a child, and every write reads back."""
    stamp = pm_stamp
    merge = point.startswith("ps.merge")
    acked: list[tuple[str, int, bytes]] = []
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        pc.wait_served()

        async def scenario() -> None:
            watch = MapWatch(stamp)
            watch.start()
            stop = asyncio.Event()
            load = asyncio.ensure_future(append_load(pc.aio, 8, stop, acked))
            await acked_more(acked, 200)
            if merge:
                await asyncio.to_thread(cli, stamp, "partition", "split", "1", "--key",
                                        "acct/log-2")
                await acked_more(acked, 100)
            current = await manager_map(stamp)
            assert current is not None
            owner = current.partitions[0].server
            survivor = next(r.name for r in stamp.partition_servers() if r.name != owner)
            await asyncio.to_thread(rpc.arm_remote, stamp.address(owner), f"{point}=crash")
            args = ("merge", "2", "3") if merge else ("split", "1", "--key", "acct/log-2")
            # The operator's call fails at the PS, then waits for the PM to finish the op.
            out = (await asyncio.to_thread(cli, stamp, "partition", *args)).stdout
            assert out.startswith("merged partition 2+3 into 4 " if merge else
                                  "split partition 1 into 2 "), out
            assert log_says(stamp, owner, f"fault point {point}: crashing the process")
            stamp.kill(owner)  # reaps it; it stays down
            want = [(4, survivor)] if merge else [(2, survivor), (3, survivor)]
            await watch.until(lambda m: [(p.id, p.server) for p in m.partitions] == want
                              and not m.pending, f"the {args[0]} finished on {survivor}")
            await acked_more(acked, 200)  # the result serves
            stop.set()
            await load
            await watch.stop()
            for seen in watch.seen.values():
                ids = {p.id for p in seen.partitions}
                assert not ({1} & ids and {2, 3} & ids) and not ({4} & ids and {2, 3} & ids)
        pc.run(scenario())
        check_logs(pc, acked)
    done = [(e["op"], e["result"]) for e in history(stamp) if e["op"] in ("split", "merge")]
    assert done[-1] == ("merge" if merge else "split", "ok"), done


def test_balance_pass_survives_failing_actions_and_a_policy_bug(tmp_path: Path) -> None:
    """A policy whose actions fail, and which throws on every other pass: each failed
    action is recorded in the history ("failed: why") pass after pass, the map stays
    whole and unchanged, and writes go on."""
    acked: list[tuple[str, int, bytes]] = []
    manager: dict[str, float | str] = {
        "balance_interval_s": 0.5, "policy": "tests.probe.pm_policies.FailingPolicy"}
    with started_stamp(tmp_path, manager) as stamp, \
            PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        pc.wait_served()

        async def scenario() -> None:
            stop = asyncio.Event()
            load = asyncio.ensure_future(append_load(pc.aio, 4, stop, acked))
            deadline = time.monotonic() + OP_WAIT_S
            while True:
                failed = [e for e in await asyncio.to_thread(history, stamp)
                          if str(e["result"]).startswith("failed: ")]
                # three passes with actions means the loop outlived two policy exceptions
                if len([e for e in failed if e["op"] == "split"]) >= 3:
                    break
                assert time.monotonic() < deadline, f"the pass stopped: {failed}"
                await asyncio.sleep(0.5)
            assert {e["op"] for e in failed} == {"split", "move"}, failed
            assert any("not the first key" in str(e["result"]) or "not an encoded key"
                       in str(e["result"]) for e in failed), failed
            await acked_more(acked, 100)
            stop.set()
            await load
            current = await manager_map(stamp)
            assert current is not None and [p.id for p in current.partitions] == [1]
        pc.run(scenario())
        check_logs(pc, acked)
