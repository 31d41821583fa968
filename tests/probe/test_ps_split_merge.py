"""Split and merge on the partition server (issue 17, split_merge.py), real processes.

No PM runs in these stamps: the PM of this branch does not know splits yet and would fight
one (pm17 teaches it), so the tests load partitions themselves (Load with create_if_missing
for the bootstrap partition 1, as the PM does) and talk to the PS directly: its Call stream
routes each request by key to the partition it serves.

- a split at a name boundary: both children serve the right halves; every acknowledged
  record and entity reads back with the same bytes, seq and ETag; append tokens stay
  exactly-once; more writes to both; a merge back; a kill -9 of the PS and a reload of the
  merged partition on another PS; the split-away parent cannot be loaded anywhere again.
- a SIGKILL (fault point `crash`) at each step of a split and of a merge: before the
  commit, a load of the parent rolls the intent back; after it, the same Split or Merge
  again finishes it; the data is checked after each.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from common import rpc
from common.errors import (
    Fenced,
    InvalidArgument,
    NotOwner,
    PreconditionFailed,
    StampError,
    Throttled,
)
from common.process import LOG_FILE
from stream_layer.sm_client import AsyncStreamManagerClient
from tests.probe.ps_direct import (
    Acked,
    DirectPS,
    append_request,
    name_key,
    newest_record,
    until,
)
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

StampFactory = Callable[..., LocalStamp]
LOGS = tuple(f"log-{i}" for i in range(6))
GROUPS = ("ents-0", "ents-1", "tbl-0")  # "ents-*" < every "log-*" < "tbl-0"


def direct_stamp(factory: StampFactory, servers: int) -> LocalStamp:
    # The hold (split_hold_ms) spans the whole split here, however long a loaded machine
    # makes it: these tests check that a held request runs on the child, not the 2 s
    # default's bound (one test's split sits 1 s at a fault point; under make test's load
    # the children's loads took the rest, and the held append was answered NotOwner).
    return factory(3, 1, lock_servers=3, partition_servers=servers,
                   partition={"partition_lease_ttl_ms": 1000, "split_hold_ms": 15_000})


def _warm_start(stamp: LocalStamp, server: str, partition_id: int
                ) -> tuple[int, int, int] | None:
    """(rows, indexes, blocks) the partition's load took over from its parents, as the
    server logged it (None: not logged)."""
    text = (Path(stamp.record(server).dir) / LOG_FILE).read_text(errors="replace")
    found = re.search(rf"partition {partition_id}: warm from its parents: (\d+) rows, "
                      rf"(\d+) indexes, (\d+) blocks", text)
    return None if found is None else (int(found[1]), int(found[2]), int(found[3]))


def fresh_acked() -> Acked:
    return Acked(logs={pname: [] for pname in LOGS}, groups=GROUPS)


async def partition_streams(stamp: LocalStamp, partition_id: int) -> list[str]:
    sm = AsyncStreamManagerClient([r.address for r in stamp.stream_managers()])
    try:
        return [s.name for s in await sm.list_streams(f"partition/{partition_id}/")]
    finally:
        await sm.close()


async def crash_at(ps: DirectPS, point: str,
                   operation: Callable[[DirectPS], Awaitable[object]]) -> DirectPS:
    """Arm `point` to crash the PS, run `operation` (it fails as the process dies), check
    the point fired, restart the process; a fresh DirectPS to it."""
    await asyncio.to_thread(rpc.arm_remote, ps.address, point)
    with pytest.raises(StampError):
        await operation(ps)
    name = point.partition("=")[0]
    assert ps.log_says(f"fault point {name}: crashing the process"), point
    await ps.close()
    ps.stamp.kill(ps.name)  # reaps it
    ps.stamp.start(ps.name)
    return DirectPS(ps.stamp, ps.name)


def test_split_then_merge_reads_every_write_back(stamp_factory: StampFactory) -> None:
    stamp = direct_stamp(stamp_factory, 2)
    acked = fresh_acked()

    async def scenario() -> None:
        ps1, ps2 = DirectPS(stamp, "ps-1"), DirectPS(stamp, "ps-2")
        try:
            await ps1.load(1, create=True)
            for tag in ("a", "b"):
                await acked.write_round(ps1, tag)
            # While it splits, a request for the parent's range waits at the PS and runs
            # on the child that holds its key (split_hold_ms), not answered NotOwner.
            await asyncio.to_thread(rpc.arm_remote, ps1.address,
                                    "ps.split.intent_written=delay:1000,times=1")
            splitting = asyncio.ensure_future(ps1.split(1, "log-3", 2, 3))
            await until(_async(lambda: ps1.log_says("fault point ps.split.intent_written fired")),
                        30, "the split to write its intent")
            held = await ps1.call(append_request("log-0", [b"held"], "held"))
            assert held.first_seq == len(acked.logs["log-0"])
            acked.logs["log-0"].append(b"held")
            split = await splitting
            assert (split.left.low, split.left.high, split.left.has_high) == (
                b"", name_key("log-3"), True)
            assert (split.right.low, split.right.has_high) == (name_key("log-3"), False)
            assert 0 < split.unavailable_s <= split.seconds
            assert await ps1.served() == {2: (b"", name_key("log-3")),
                                          3: (name_key("log-3"), None)}
            # Each child started with its parent's cached indexes (warm_start.py): its
            # first operations wait for none from the extent nodes.
            for child in (2, 3):
                warm = _warm_start(stamp, "ps-1", child)
                assert warm is not None and warm[1] > 0, warm
            for child, key_range in ((2, split.left), (3, split.right)):
                # Each child's own record, appended once it serves (checkpoint.py
                # publish_first): the next load need not derive again.
                await until(lambda c=child: _own_record(stamp, c), 30, "the child's record")
                record = await newest_record(stamp, child)
                assert (record.partition_id, record.intents) == (child, [])
                assert record.key_range.low == key_range.low
            await acked.check(ps1)
            # Each child scans its own rows of the parent's shared run, none of the other's.
            await acked.check_scan(ps1, "ents-0", {"ents-0", "ents-1"})
            await acked.check_scan(ps1, "log-3", {"tbl-0"})
            await acked.retry_last_appends(ps1)  # tokens moved with their names
            await acked.write_round(ps1, "c")  # to both children
            await acked.check(ps1)
            # The parent is gone for good: not here, not elsewhere, and nothing made anew.
            for ps in (ps1, ps2):
                with pytest.raises(PreconditionFailed):
                    await ps.load(1)
            assert await partition_streams(stamp, 1) == []

            merged = await ps1.merge(2, 3, 4)
            assert (merged.range.low, merged.range.has_high) == (b"", False)
            assert await ps1.served() == {4: (b"", None)}
            await until(lambda: _own_record(stamp, 4), 30, "the merged partition's record")
            await acked.check(ps1)
            await acked.check_scan(ps1, "ents-0", set(GROUPS))
            await acked.retry_last_appends(ps1)
            await acked.write_round(ps1, "d")  # only in the merged partition's commit log
            for ps in (ps1, ps2):
                for gone in (2, 3):
                    with pytest.raises(PreconditionFailed):
                        await ps.load(gone)
            stamp.kill("ps-1")
            await ps1.close()
            await ps2.load(4)  # waits for the dead owner's lease to lapse
            assert await ps2.served() == {4: (b"", None)}
            await acked.check(ps2)
            await acked.check_scan(ps2, "ents-0", set(GROUPS))
            await acked.write_round(ps2, "e")
            await acked.check(ps2)
        finally:
            await ps1.close()
            await ps2.close()
    asyncio.run(scenario())


def test_a_crash_at_each_step_of_a_split(stamp_factory: StampFactory) -> None:
    stamp = direct_stamp(stamp_factory, 1)
    acked = fresh_acked()

    async def scenario() -> None:
        ps = DirectPS(stamp, "ps-1")
        try:
            await ps.load(1, create=True)
            await acked.write_round(ps, "a")
            # Before the commit: the parent's load rolls back (or there is nothing to).
            for point in ("ps.split.checkpointed=crash", "ps.split.intent_written=crash"):
                ps = await crash_at(ps, point, lambda p: p.split(1, "log-3", 2, 3))
                await ps.load(1)
                assert await ps.served() == {1: (b"", None)}
                assert await partition_streams(stamp, 2) == []
                record = await newest_record(stamp, 1)  # rolled back: no intent left
                assert (record.partition_id, record.intents) == (1, [])
                await acked.check(ps)
                await acked.write_round(ps, point)
            assert ps.log_says("partition 1: meta rolled back")
            # Sealed, not committed: Split again loads the parent (rolled back) and splits.
            ps = await crash_at(ps, "ps.split.sealed=crash",
                                lambda p: p.split(1, "log-3", 2, 3))
            await ps.split(1, "log-3", 2, 3)
            assert set(await ps.served()) == {2, 3}
            await acked.check(ps)
            await acked.write_round(ps, "after-sealed")
            # Committed: the parent cannot come back; Split again loads the children.
            ps = await crash_at(ps, "ps.split.committed=crash",
                                lambda p: p.split(3, "log-4", 4, 5))
            await ps.load(2)
            with pytest.raises(PreconditionFailed):
                await ps.load(3)
            await ps.split(3, "log-4", 4, 5)
            assert await ps.served() == {2: (b"", name_key("log-3")),
                                         4: (name_key("log-3"), name_key("log-4")),
                                         5: (name_key("log-4"), None)}
            await acked.check(ps)
            await acked.retry_last_appends(ps)
            await acked.write_round(ps, "after-committed")
            ps = await crash_at(ps, "ps.split.children_loading=crash",
                                lambda p: p.split(5, "log-5", 6, 7))
            await asyncio.gather(ps.load(2), ps.load(4))
            await ps.split(5, "log-5", 6, 7)
            assert set(await ps.served()) == {2, 4, 6, 7}
            await acked.check(ps)
            await acked.write_round(ps, "end")
            await acked.check(ps)
        finally:
            await ps.close()
    asyncio.run(scenario())


def test_a_crash_at_each_step_of_a_merge(stamp_factory: StampFactory) -> None:
    stamp = direct_stamp(stamp_factory, 1)
    acked = fresh_acked()

    async def scenario() -> None:
        ps = DirectPS(stamp, "ps-1")
        try:
            await ps.load(1, create=True)
            await acked.write_round(ps, "a")
            await ps.split(1, "log-3", 2, 3)
            await acked.write_round(ps, "b")
            for point in ("ps.merge.checkpointed=crash", "ps.merge.intent_written=crash",
                          "ps.merge.sealed=crash"):
                ps = await crash_at(ps, point, lambda p: p.merge(2, 3, 4))
                await asyncio.gather(ps.load(2), ps.load(3))  # roll back their intents
                assert set(await ps.served()) == {2, 3}
                assert await partition_streams(stamp, 4) == []
                for side in (2, 3):
                    record = await newest_record(stamp, side)
                    assert (record.partition_id, record.intents) == (side, [])
                await acked.check(ps)
                await acked.write_round(ps, point)
            await ps.merge(2, 3, 4)
            await acked.check(ps)
            await ps.split(4, "log-2", 5, 6)
            await acked.write_round(ps, "c")
            # Committed: Merge again loads the merged partition.
            ps = await crash_at(ps, "ps.merge.committed=crash", lambda p: p.merge(5, 6, 7))
            await ps.merge(5, 6, 7)
            assert await ps.served() == {7: (b"", None)}
            await acked.check(ps)
            await acked.retry_last_appends(ps)
            await acked.write_round(ps, "d")
            await ps.split(7, "log-1", 8, 9)
            ps = await crash_at(ps, "ps.merge.merged_loading=crash", lambda p: p.merge(8, 9, 10))
            await ps.merge(8, 9, 10)
            assert await ps.served() == {10: (b"", None)}
            await acked.check(ps)
            await acked.write_round(ps, "end")
            await acked.check(ps)
        finally:
            await ps.close()
    asyncio.run(scenario())


def test_split_refuses_bad_keys_and_ids(stamp_factory: StampFactory) -> None:
    stamp = direct_stamp(stamp_factory, 1)

    async def scenario() -> None:
        ps = DirectPS(stamp, "ps-1")
        try:
            # No streams and not a bootstrap load: refused, nothing made.
            with pytest.raises(PreconditionFailed):
                await ps.load(1)
            assert await partition_streams(stamp, 1) == []
            await ps.load(1, create=True)
            acked = fresh_acked()
            await acked.write_round(ps, "a")
            inside_a_name = name_key("log-3") + b"\x02"  # the records of log-3
            with pytest.raises(InvalidArgument, match="strictly inside"):
                await ps.split_at(1, b"", 2, 3)  # the range's own low key
            with pytest.raises(InvalidArgument, match="first key of a partition name"):
                await ps.split_at(1, inside_a_name, 2, 3)
            for left, right in ((2, 2), (1, 3), (0, 3)):
                with pytest.raises(InvalidArgument, match="distinct ids"):
                    await ps.split(1, "log-3", left, right)
            assert await ps.served() == {1: (b"", None)}  # it serves on
            await acked.check(ps)
            await ps.split(1, "log-3", 2, 3)
            with pytest.raises(PreconditionFailed, match="in use"):
                await ps.split(3, "log-4", 2, 5)
            with pytest.raises(PreconditionFailed, match="not served here"):
                await ps.merge(2, 9, 10)
            await until(lambda: _serves(ps, {2, 3}), 10, "the children to serve")
            await acked.check(ps)
        finally:
            await ps.close()
    asyncio.run(scenario())


async def _serves(ps: DirectPS, ids: set[int]) -> bool:
    return set(await ps.served()) == ids


@pytest.mark.serial  # timing-sensitive: run alone (`make test`)
def test_a_deposed_owner_cannot_commit_a_split(stamp_factory: StampFactory) -> None:
    """The owner is frozen (SIGSTOP) between sealing and the multi-modify; its lease lapses,
    the other PS loads the parent (rolling the intent back) and takes writes; then the old
    owner wakes and sends the multi-modify: its fence guard makes it change nothing."""
    stamp = direct_stamp(stamp_factory, 2)
    acked = fresh_acked()

    async def scenario() -> None:
        ps1, ps2 = DirectPS(stamp, "ps-1"), DirectPS(stamp, "ps-2")
        try:
            await ps1.load(1, create=True)
            await acked.write_round(ps1, "a")
            await asyncio.to_thread(rpc.arm_remote, ps1.address,
                                    "ps.split.sealed=delay:2000,times=1")
            split = asyncio.ensure_future(ps1.split(1, "log-3", 2, 3))
            await until(_async(lambda: ps1.log_says("fault point ps.split.sealed fired")), 30,
                        "the split to reach its sealed step")
            os.kill(stamp.record("ps-1").pid, signal.SIGSTOP)
            try:
                await ps2.load(1)  # once ps-1's lease lapsed: fences, rolls the intent back
                assert await ps2.served() == {1: (b"", None)}
                await acked.write_round(ps2, "b")
            finally:
                os.kill(stamp.record("ps-1").pid, signal.SIGCONT)
            with pytest.raises(Fenced):
                await split
            assert ps1.log_says("split failed after its intent was written")
            assert await partition_streams(stamp, 2) == []
            assert await partition_streams(stamp, 3) == []
            assert 1 not in await ps1.served()
            await acked.check(ps2)
            await acked.write_round(ps2, "c")
            await acked.check(ps2)
        finally:
            await ps1.close()
            await ps2.close()
    asyncio.run(scenario())


def _async(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def wrapped() -> bool:
        return check()
    return wrapped


def test_writers_ride_through_a_split_and_a_merge(stamp_factory: StampFactory) -> None:
    """Writers append to the PS all along; a request that reaches the parent mid-split
    waits there (split_hold_ms) and runs on the child that holds its key: no writer is ever
    answered NotOwner. (A NotOwner is still sent again with the same token, so a refusal
    would fail only the last assertion.) Afterwards every acknowledged append is there once,
    at the seq it was acknowledged with, with no gap."""
    stamp = direct_stamp(stamp_factory, 1)
    acked = Acked(logs={f"log-{i}": [] for i in range(16)})
    refused: list[str] = []
    acked_at: list[float] = []

    async def writer(ps: DirectPS, pnames: list[str], stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set():
            pname = pnames[n % len(pnames)]
            batch, token = [f"{pname}/{n}".encode()], f"{pname}-w{n}"
            while True:
                try:
                    first = (await ps.call(append_request(pname, batch, token))).first_seq
                    break
                except (NotOwner, Throttled) as exc:
                    refused.append(str(exc))
                    await asyncio.sleep(0.005)
            assert first == len(acked.logs[pname]), (pname, first)
            acked.logs[pname].extend(batch)
            acked_at.append(asyncio.get_running_loop().time())
            n += 1

    async def scenario() -> None:
        ps = DirectPS(stamp, "ps-1")
        try:
            await ps.load(1, create=True)
            stop = asyncio.Event()
            names = list(acked.logs)
            writers = [asyncio.ensure_future(writer(ps, names[i::8], stop)) for i in range(8)]

            async def more(n: int) -> None:
                target = len(acked_at) + n
                await until(_async(lambda: len(acked_at) >= target), 60, f"{n} more appends")
            await more(200)
            split = await ps.split(1, "log-5", 2, 3)
            await more(200)
            merge = await ps.merge(2, 3, 4)
            await more(200)
            stop.set()
            await asyncio.gather(*writers)
            await acked.check(ps)
            gap = max(b - a for a, b in itertools.pairwise(acked_at))
            print(f"split unavailable {split.unavailable_s:.3f}s, merge "
                  f"{merge.unavailable_s:.3f}s; longest gap between acks {gap:.3f}s, "
                  f"{len(refused)} refusals")
            assert [r for r in refused if "Throttled" not in r] == [], refused[:3]
        finally:
            await ps.close()
    asyncio.run(scenario())


async def _own_record(stamp: LocalStamp, partition_id: int) -> bool:
    record = await newest_record(stamp, partition_id)
    return (record.partition_id, record.intents) == (partition_id, [])
