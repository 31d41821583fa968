"""gc's first stage on real processes and a real local Spark (issue 18: "the partition layer
reports which extents of its streams it still needs ... and the stream manager drops the
others"): a partition whose log was written (small records in the commit log and runs, big
ones in blob data), trimmed and checkpointed (runs merged on the way) releases its commit-log
extents below the replay point, merged-away run extents and trimmed blob values; the orphan
sweep deletes them a grace period later; every untrimmed record reads back, also after a
SIGKILL of the PS and a reload. A split's children share their parent's extents: one
child's release keeps them (its sibling holds them), and they are deleted only once both
let go.

No PM runs here (as in test_ps_split_merge.py): the tests load partitions on the PS
themselves and talk to it directly (tests/probe/ps_direct.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common import rpc
from common.errors import StampError, Trimmed
from common.proto import partition_pb2 as pb
from spark.driver import JobReport, job_session, run_job
from spark.job_result import DONE
from stream_layer.sm_client import AsyncStreamManagerClient
from tests.conftest import config_toml, stamp_config
from tests.probe.ps_direct import DirectPS, append_request, until
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

GRACE_S = 2.0
# Just above a run writer's appends (1 MiB, partition_layer/runs.py): streams roll over often.
EXTENTS = {"extent_bytes_max": 1_300_000}
# Small memtables and a short commit log: checkpoints (and run merges) while the test writes.
PARTITION = {"memtable_bytes_max": 64 * 1024, "commit_log_bytes_max": 128 * 1024,
             "runs_max": 2, "partition_lease_ttl_ms": 1000}
KINDS = ("log", "row", "blob")
Logs = dict[str, list[bytes]]


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    session = job_session("local[2]", app_name="stamp-test-gc-release")
    yield session
    session.stop()


@pytest.fixture
def stamp(tmp_path: Path) -> Iterator[LocalStamp]:
    """3 ENs, 1 SM, 1 lock replica (the gc marks, the leases), 1 PS, a short gc grace."""
    config = stamp_config(3, 1, extent_node=EXTENTS, lock_servers=1, partition_servers=1,
                          partition=PARTITION)
    path = tmp_path / "stamp.toml"
    path.write_text(config_toml(extent_node=EXTENTS, partition=PARTITION,
                                jobs={"gc_grace_s": GRACE_S}))
    local = LocalStamp(tmp_path / "stamp", config, str(path))
    try:
        local.up()
        yield local
    finally:
        local.kill_all()


def sm_client(stamp: LocalStamp) -> AsyncStreamManagerClient:
    return AsyncStreamManagerClient([r.address for r in stamp.stream_managers()])


async def streams_of(stamp: LocalStamp, partition_id: int) -> dict[str, list[int]]:
    sm = sm_client(stamp)
    try:
        return {kind: [e.extent_id for e in (await sm.open_stream(
            f"partition/{partition_id}/{kind}")).extents] for kind in KINDS}
    finally:
        await sm.close()


async def extent_states(stamp: LocalStamp) -> dict[int, tuple[str, tuple[str, ...]]]:
    """extent id -> (state, the streams holding it)."""
    sm = sm_client(stamp)
    try:
        return {e.extent_id: (e.state, tuple(e.streams)) for e in await sm.list_extents()}
    finally:
        await sm.close()


async def on_nodes(stamp: LocalStamp) -> set[int]:
    """Every extent some extent node holds a replica of."""
    from stream_layer.extent_client import AsyncExtentClient
    client = AsyncExtentClient()
    try:
        held: set[int] = set()
        for node in stamp.extent_nodes():
            held |= {e.extent_id for e in await client.list_extents(node.address)}
        return held
    finally:
        await client.close()


async def write(ps: DirectPS, logs: Logs, pname: str, appends: int, records: int,
                record_bytes: int) -> None:
    for n in range(appends):
        batch = [f"{pname}/{len(logs[pname]) + i}/".encode().ljust(record_bytes, b".")
                 for i in range(records)]
        first = (await ps.call(append_request(pname, batch, f"{pname}-{n}-{time.time()}"))
                 ).first_seq
        assert first == len(logs[pname])
        logs[pname] += batch


async def trim(ps: DirectPS, pname: str, upto: int) -> None:
    await ps.call(pb.Request(pname=pname, trim=pb.TrimOp(upto_seq=upto)))


async def check(ps: DirectPS, logs: Logs, trimmed: dict[str, int]) -> None:
    """Every untrimmed acknowledged record reads back (bytes and seq); below the trim
    point a read is refused as trimmed."""
    for pname, records in logs.items():
        first = trimmed.get(pname, 0)
        got: list[tuple[int, bytes]] = []
        while first + len(got) < len(records):
            reply = await ps.call(pb.Request(pname=pname, read=pb.ReadOp(
                from_seq=first + len(got), limit=1000)))
            assert reply.records, (pname, first + len(got))
            got += [(r.seq, r.data) for r in reply.records]
        assert got == list(enumerate(records))[first:], pname
        if first:
            with pytest.raises(Trimmed):
                await ps.call(pb.Request(pname=pname, read=pb.ReadOp(from_seq=0, limit=1)))


async def checkpoint(ps: DirectPS, partition_id: int) -> None:
    """Unload (which checkpoints everything) and load again."""
    await rpc.call(ps.stub.Unload(pb.UnloadRequest(partition_id=partition_id), timeout=60))
    await ps.load(partition_id)


def gc(stamp: LocalStamp, spark: object) -> JobReport:
    return run_job("gc", str(stamp.data_dir), session=spark)  # type: ignore[arg-type]


def after_grace() -> None:
    """A grace period from now (after a run that marked: its marks are older)."""
    marked = time.time()

    async def over() -> bool:
        return time.time() >= marked + GRACE_S
    asyncio.run(until(over, GRACE_S + 10, "the gc grace period"))


def released_by(report: JobReport) -> dict[int, int]:
    return {r.item: r.released for r in report.results if r.kind == "partition"}


async def fill_and_trim(stamp: LocalStamp, logs: Logs, trimmed: dict[str, int]
                        ) -> dict[str, list[int]]:
    """Partition 1 with a log in blob data ("big") and one in the commit log and runs
    ("small"), both trimmed to their last records and checkpointed; its streams' extents."""
    ps = DirectPS(stamp, "ps-1")
    try:
        await ps.load(1, create=True)
        await write(ps, logs, "big", 8, 1, 400 * 1024)  # blob data, 3 to an extent
        for _ in range(4):  # the commit log and runs, merged as they come
            await write(ps, logs, "small", 40, 8, 3000)
        trimmed.update(big=len(logs["big"]) - 1, small=len(logs["small"]) - 40)
        for pname, upto in trimmed.items():
            await trim(ps, pname, upto)
        await checkpoint(ps, 1)
        await check(ps, logs, trimmed)
    finally:
        await ps.close()
    return await streams_of(stamp, 1)


def test_a_trimmed_log_releases_its_extents_and_gc_deletes_them(
        stamp: LocalStamp, spark: object) -> None:
    logs: Logs = {"big": [], "small": []}
    trimmed: dict[str, int] = {}
    before = asyncio.run(fill_and_trim(stamp, logs, trimmed))
    # A dry run through the CLI says what it would release and changes nothing.
    dry = subprocess.run(
        [sys.executable, "-m", "tools.cli", "--data-dir", str(stamp.data_dir), "job", "gc",
         "--master", "local[1]", "--dry-run", "--json"],
        capture_output=True, text=True, timeout=600)
    assert dry.returncode == 0, dry.stderr[-3000:]
    said = json.loads(dry.stdout)
    (would,) = [r for r in said["items"] if r["kind"] == "partition"]
    assert would["status"] == "would" and would["released"] > 0, would
    assert said["totals"]["released"] == would["released"] > 0
    assert asyncio.run(streams_of(stamp, 1)) == before
    first = gc(stamp, spark)
    assert first.totals["released"] == would["released"], "the dry run said as much"
    assert released_by(first)[1] > 0, first.results
    after = asyncio.run(streams_of(stamp, 1))
    dropped = {kind: set(before[kind]) - set(after[kind]) for kind in KINDS}
    assert dropped["log"] and dropped["row"] and dropped["blob"], (before, after)
    assert first.totals["released"] == sum(map(len, dropped.values()))
    assert first.totals["released_bytes"] > 6 * 400 * 1024  # two blob extents at least
    states = asyncio.run(extent_states(stamp))
    gone = set().union(*dropped.values())
    assert all(states[e] == ("sealed", ()) for e in gone), {e: states[e] for e in gone}

    async def reads_back() -> None:
        ps = DirectPS(stamp, "ps-1")
        try:
            await check(ps, logs, trimmed)
        finally:
            await ps.close()
    asyncio.run(reads_back())  # released, not deleted yet: nothing changed for a reader

    after_grace()
    second = gc(stamp, spark)
    swept = {r.item for r in second.results if r.kind == "extent" and r.status == DONE}
    assert gone <= swept, (gone, swept)
    states = asyncio.run(extent_states(stamp))
    assert all(states[e][0] == "deleted" for e in gone)
    assert not gone & asyncio.run(on_nodes(stamp)), "a released extent's replica is left"

    # A SIGKILL of the PS and a reload: the partition needs nothing that was deleted.
    stamp.kill("ps-1")
    stamp.start("ps-1")

    async def reload() -> None:
        ps = DirectPS(stamp, "ps-1")
        try:
            await until(lambda: _loaded(ps, 1), 60, "partition 1 loaded again")
            await check(ps, logs, trimmed)
            await write(ps, logs, "small", 3, 8, 3000)
            await check(ps, logs, trimmed)
        finally:
            await ps.close()
    asyncio.run(reload())
    # And a gc run now (nothing trimmed since): every record still reads back.
    gc(stamp, spark)
    asyncio.run(reads_back())


async def _loaded(ps: DirectPS, partition_id: int) -> bool:
    await ps.load(partition_id)
    return True


def test_split_children_keep_shared_extents_until_both_let_go(
        stamp: LocalStamp, spark: object) -> None:
    logs: Logs = {"a-log": [], "z-log": []}
    trimmed: dict[str, int] = {}

    async def fill_and_split() -> tuple[dict[str, list[int]], dict[str, list[int]]]:
        ps = DirectPS(stamp, "ps-1")
        try:
            await ps.load(1, create=True)
            for _ in range(3):
                for pname in logs:
                    await write(ps, logs, pname, 30, 8, 3000)
            await ps.split(1, "z-log", 2, 3)  # 2: a-log, 3: z-log; both share 1's extents
            left, right = await streams_of(stamp, 2), await streams_of(stamp, 3)
            # Only the left child lets go (its own release, directly): its log below the
            # replay point, which the right child holds still.
            trimmed["a-log"] = len(logs["a-log"])
            await trim(ps, "a-log", trimmed["a-log"])
            await write(ps, logs, "a-log", 60, 8, 3000)
            await checkpoint(ps, 2)
            reply = await rpc.call(ps.stub.ReleaseExtents(
                pb.ReleaseExtentsRequest(partition_id=2), timeout=60))
            log_release = {s.kind: s for s in reply.streams}["log"]
            assert log_release.dropped, reply
            shared = set(log_release.dropped) & set(right["log"])
            assert shared, (log_release, right)
            assert not shared & set(log_release.unreferenced), "the sibling holds them"
            await check(ps, logs, trimmed)
            return left, right
        finally:
            await ps.close()

    left, right = asyncio.run(fill_and_split())
    shared_log = set(left["log"]) & set(right["log"])
    states = asyncio.run(extent_states(stamp))
    held_by_right = {e for e in shared_log if states[e][1] == ("partition/3/log",)}
    assert held_by_right, "the left child dropped shared log extents; the right holds them"

    # gc runs, a grace period apart: the right child still needs what it replays from the
    # parent's log (it never checkpointed), so those stay; the ones it lets go now go.
    gc(stamp, spark)
    after_grace()
    gc(stamp, spark)
    states = asyncio.run(extent_states(stamp))
    right_now = asyncio.run(streams_of(stamp, 3))
    for extent_id in shared_log:
        if extent_id in right_now["log"]:
            assert states[extent_id][0] == "sealed", (extent_id, states[extent_id])
        else:
            assert states[extent_id][0] == "deleted", (extent_id, states[extent_id])
    kept = shared_log & set(right_now["log"])
    assert kept, "the right child's replay point lies in a shared extent"

    # The right child checkpoints: now it lets go too, and the shared extents are deleted.
    async def right_lets_go() -> None:
        ps = DirectPS(stamp, "ps-1")
        try:
            await write(ps, logs, "z-log", 60, 8, 3000)
            await checkpoint(ps, 3)
            await check(ps, logs, trimmed)
        finally:
            await ps.close()
    asyncio.run(right_lets_go())
    third = gc(stamp, spark)
    assert released_by(third).get(3), third.results
    after_grace()
    gc(stamp, spark)
    states = asyncio.run(extent_states(stamp))
    assert all(states[e][0] == "deleted" for e in kept), {e: states[e] for e in kept}
    assert not kept & asyncio.run(on_nodes(stamp))

    async def both_read_back() -> None:
        ps = DirectPS(stamp, "ps-1")
        try:
            await check(ps, logs, trimmed)
        finally:
            await ps.close()
    asyncio.run(both_read_back())


def test_a_ps_killed_between_two_streams_drops_is_finished_by_the_next_run(
        stamp: LocalStamp, spark: object) -> None:
    """A SIGKILL of the PS after it dropped its commit-log extents and before its row and
    blob extents: the reload needs none of what went, every record reads back, and the
    next gc run releases the rest."""
    logs: Logs = {"big": [], "small": []}
    trimmed: dict[str, int] = {}
    before = asyncio.run(fill_and_trim(stamp, logs, trimmed))

    async def crash_mid_release() -> None:
        ps = DirectPS(stamp, "ps-1")
        try:
            await asyncio.to_thread(rpc.arm_remote, ps.address,
                                    "ps.release.after_drop=crash")
            with pytest.raises(StampError):
                await rpc.call(ps.stub.ReleaseExtents(
                    pb.ReleaseExtentsRequest(partition_id=1), timeout=60))
        finally:
            await ps.close()
    asyncio.run(crash_mid_release())
    stamp.kill("ps-1")  # reaps it
    half = asyncio.run(streams_of(stamp, 1))
    assert set(half["log"]) < set(before["log"]), (before["log"], half["log"])
    assert (half["row"], half["blob"]) == (before["row"], before["blob"])
    stamp.start("ps-1")

    async def reload_and_check() -> None:
        ps = DirectPS(stamp, "ps-1")
        try:
            await until(lambda: _loaded(ps, 1), 60, "partition 1 loaded again")
            await check(ps, logs, trimmed)
        finally:
            await ps.close()
    asyncio.run(reload_and_check())
    finished = gc(stamp, spark)
    assert released_by(finished)[1] > 0, finished.results
    after = asyncio.run(streams_of(stamp, 1))
    assert set(after["row"]) < set(before["row"]) and set(after["blob"]) < set(before["blob"])
    after_grace()
    gc(stamp, spark)
    gone = set().union(*(set(before[k]) - set(after[k]) for k in KINDS))
    assert not gone & asyncio.run(on_nodes(stamp))
    stamp.kill("ps-1")
    stamp.start("ps-1")
    asyncio.run(reload_and_check())
