"""`stamp job gc` on real processes and a real local Spark (issue 18): orphans made the real
way — a deposed stream manager leader's spare extents, the replicas on a node that came back
after they were made again elsewhere, the extents of a deleted stream — are marked by one
run and swept by a later one after the grace period, while an appender keeps rolling its
stream over (onto the new leader's spares); live extents and extents two streams share are
never touched, and an extent node that was down during the sweep has its orphans swept by the
next run."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.rpc import arm_remote, disarm_remote
from spark.driver import job_session, run_job
from spark.job_result import DONE
from stream_layer import stream_ops
from tests.conftest import config_toml, stamp_config
from tests.support.extent_nodes import holdings
from tests.support.streams import Acked, client_for, leader_name, write
from tests.support.waiting import wait_for
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

FAST_DEATH = {"heartbeat_interval_ms": 200, "suspect_after_ms": 1000, "dead_after_ms": 2500}
SMALL_EXTENTS = {"extent_bytes_max": 100_000}
GRACE_S = 3.0


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    session = job_session("local[2]", app_name="stamp-test-gc")
    yield session
    session.stop()


@pytest.fixture
def stamp(tmp_path: Path) -> Iterator[LocalStamp]:
    """6 ENs, 3 SMs (a leader to depose), 1 lock replica (the marks), a short gc grace."""
    config = stamp_config(6, 3, extent_node=SMALL_EXTENTS, stream_manager=FAST_DEATH,
                          lock_servers=1)
    path = tmp_path / "stamp.toml"
    path.write_text(config_toml(extent_node=SMALL_EXTENTS, stream_manager=FAST_DEATH,
                                jobs={"gc_grace_s": GRACE_S}))
    local = LocalStamp(tmp_path / "stamp", config, str(path))
    try:
        local.up()
        yield local
    finally:
        local.kill_all()


def test_gc_sweeps_orphans_after_the_grace_and_never_live_or_shared_extents(
        stamp: LocalStamp, spark: object, rng: random.Random) -> None:
    data_dir = str(stamp.data_dir)

    async def make_orphans() -> tuple[dict[str, Acked], set[int], int, str]:
        client = client_for(stamp)
        written = {"a": await write(client, "a", rng, 40)}
        # Stream "b" is made of two of its sealed extents, and 40 blocks of 100 or 9000
        # bytes can all fit in one (STAMP_SEED=3616822233 wrote 93,000 bytes): more, until
        # there are two.
        tail = await client.open_stream("a")
        for _ in range(64):
            extents = (await client.sm.open_stream("a")).extents
            if sum(e.state == "sealed" for e in extents) >= 2:
                break
            block = rng.randbytes(9000)
            written["a"].append(((await tail.append([block]))[0], block))
        doomed = await write(client, "doomed", rng, 30)
        doomed_extents = {loc.extent_id for loc, _ in doomed}
        await client.sm.delete_stream("doomed")
        sealed = [e.extent_id for e in (await client.sm.open_stream("a")).extents
                  if e.state == "sealed"]
        await client.sm.multi_modify([stream_ops.create_from_op("b", sealed[:2])])
        written["b"] = [(loc, d) for loc, d in written["a"] if loc.extent_id in sealed[:2]]
        # A failed create: a node refuses its next create; the replicas the same create made
        # on two others are known to nobody (the leader places the extent anew).
        # Two nodes are armed: placement may pass one over for a while (a seal on a busy
        # machine found it slow), and the test must not wait on which it picks.
        refusers = [stamp.address("en-1"), stamp.address("en-2")]
        for address in refusers:
            arm_remote(address, "en.create=fail,times=1")
        more = await client.open_stream("a")
        for _ in range(40):  # rollovers: spares taken, refilled by new creates
            block = rng.randbytes(9000)
            written["a"].append(((await more.append([block]))[0], block))

        async def half_made() -> set[int]:
            infos, busy = await client.sm.list_extents_and_busy()
            return set().union(*(await holdings(stamp, client)).values()) - busy - {
                e.extent_id for e in infos}
        unknown = await wait_for(half_made, 15, "a create that failed half way")
        for address in refusers:  # one may not have refused yet: no later create fails
            disarm_remote(address)
        # A deposed leader's spares: known to nobody once another leader serves.
        _, old_spares = await client.sm.list_extents_and_busy()
        assert old_spares, "the leader keeps spare extents"
        old_leader = await leader_name(stamp, client)
        stamp.kill(old_leader)
        assert await leader_name(stamp, client) != old_leader
        stamp.start(old_leader)
        # A node back after its replicas were made again elsewhere.
        shared = await client.sm.get_extent(sealed[0])
        away = shared.replicas[1]
        stamp.kill(away)

        async def copied() -> bool:
            return away not in (await client.sm.get_extent(sealed[0])).replicas
        await wait_for(copied, 30, f"extent {sealed[0]} to be copied off {away}")
        stamp.start(away)
        await client.extents.wait_serving(stamp.address(away))
        await client.close()
        return written, doomed_extents | old_spares | unknown, sealed[0], away

    written, orphans, stale_extent, away = asyncio.run(make_orphans())

    async def gc_under_appends() -> tuple[list, Acked]:
        """Two gc runs a grace period apart while "a" grows and rolls over."""
        client = client_for(stamp)
        stream = await client.open_stream("a")
        appended: Acked = []
        stop = asyncio.Event()

        async def appender() -> None:
            while not stop.is_set():
                block = rng.randbytes(9000)
                appended.append(((await stream.append([block]))[0], block))
        task = asyncio.get_running_loop().create_task(appender())
        try:
            first = await asyncio.to_thread(run_job, "gc", data_dir, session=spark)
            assert first.results == [], "the first run only marks"
            marked = time.time()

            async def grace_over() -> bool:
                return time.time() >= marked + GRACE_S
            await wait_for(grace_over, GRACE_S + 5, "the grace period")
            second = await asyncio.to_thread(run_job, "gc", data_dir, session=spark)
        finally:
            stop.set()
            await task
        await client.close()
        return second.results, appended

    swept, appended = asyncio.run(gc_under_appends())
    assert swept and {r.status for r in swept} == {DONE}, swept
    written["a"] += appended

    async def check() -> None:
        client = client_for(stamp)
        held = await holdings(stamp, client)
        everywhere = set().union(*held.values())
        assert not orphans & everywhere, f"orphans left: {orphans & everywhere}"
        assert stale_extent not in held[away], "the stale replica on the node that came back"
        infos, busy = await client.sm.list_extents_and_busy()
        for info in infos:  # every live extent on every recorded replica
            if info.state in ("open", "sealed") and info.streams:
                for node in info.replicas:
                    assert info.extent_id in held[node], (info.extent_id, node)
        assert busy <= everywhere, "the new leader's spares were deleted"
        for name, acked in written.items():
            stream = await client.open_stream(name)
            for loc, data in acked:
                assert await stream.read(loc) == data, (name, loc)
        await client.close()
    asyncio.run(check())


def test_gc_killed_mid_sweep_with_a_node_down_is_finished_by_the_next_runs(
        stamp: LocalStamp, spark: object, rng: random.Random) -> None:
    data_dir = str(stamp.data_dir)

    async def make_orphans() -> tuple[dict[str, Acked], set[int], str]:
        client = client_for(stamp)
        written = {"keep": await write(client, "keep", rng, 30)}
        doomed = set()
        for n in range(3):
            doomed |= {loc.extent_id for loc, _ in await write(client, f"doomed{n}", rng, 20)}
            await client.sm.delete_stream(f"doomed{n}")
        down = (await client.sm.get_extent(min(doomed))).replicas[0]
        await client.close()
        return written, doomed, down

    written, doomed, down = asyncio.run(make_orphans())
    first = run_job("gc", data_dir, session=spark)
    assert first.results == []  # marks only, and says when a later run may sweep them
    marked = time.time()
    assert first.pending["copies"] >= len(doomed), first.pending
    assert first.started_at + GRACE_S <= first.pending["reclaim_by"] <= marked + GRACE_S

    async def grace_over() -> bool:
        return time.time() >= marked + GRACE_S
    asyncio.run(wait_for(grace_over, GRACE_S + 5, "the grace period"))

    stamp.kill(down)  # down during the sweep: its copies wait
    crashed = subprocess.run(
        [sys.executable, "-m", "tools.cli", "--data-dir", data_dir, "job", "gc", "--json"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "STAMP_FAULTS": "gc.before_delete_copy=crash,after=1"})
    assert crashed.returncode == 1 and "Spark job failed" in crashed.stderr, crashed.stderr
    stamp.start(down)

    async def left_somewhere() -> set[int]:
        client = client_for(stamp)
        await client.extents.wait_serving(stamp.address(down))
        held = set().union(*(await holdings(stamp, client)).values())
        await client.close()
        return held & doomed
    assert asyncio.run(left_somewhere()), "the killed run left nothing to finish"

    # The next runs finish: extents the killed run deleted in the stream manager lose their
    # copies at once, the others were marked a grace period ago already (a second run: the
    # copies on the node that was down, if the stream manager moved them meanwhile).
    for _ in range(2):
        finish = run_job("gc", data_dir, session=spark)
        assert {r.status for r in finish.results} <= {DONE}, finish.results
        if not asyncio.run(left_somewhere()):
            break
    assert asyncio.run(left_somewhere()) == set()

    async def live() -> None:
        client = client_for(stamp)
        for name, acked in written.items():
            stream = await client.open_stream(name)
            for loc, data in acked:
                assert await stream.read(loc) == data, (name, loc)
        await client.close()
    asyncio.run(live())
