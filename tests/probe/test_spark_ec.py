"""`stamp job ec` on real processes and a real local Spark (issue 18): the sealed extents of
the streams whose policy asks for it are erasure-coded and lose their replicas, others are
left alone; every block reads back right before, during and after (a reader runs through the
job); a job killed half way (a Spark task SIGKILLed right after recording a conversion)
leaves every extent readable, and the rerun finishes it."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from common.errors import StampError
from spark.driver import job_session, past_runs, run_job
from spark.job_result import DONE
from stream_layer.client import AsyncStreamClient
from stream_layer.framing import Location
from tests.support.streams import client_for
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

StampFactory = Callable[..., LocalStamp]
SMALL_EXTENTS = {"extent_bytes_max": 200_000}  # a few blocks each: many sealed extents
Acked = list[tuple[Location, bytes]]


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    """One SparkSession for the module: a cold start costs seconds."""
    session = job_session("local[2]", app_name="stamp-test-ec")
    yield session
    session.stop()


def cli(stamp: LocalStamp, *args: str, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir",
                           str(stamp.data_dir), *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


async def write(client: AsyncStreamClient, name: str, rng: random.Random, blocks: int
                ) -> Acked:
    stream = await client.create_stream(name)
    acked = []
    for _ in range(blocks):
        block = rng.randbytes(rng.choice([100, 5000, 30_000]))
        acked.append(((await stream.append([block]))[0], block))
    return acked


async def extents_of(client: AsyncStreamClient, name: str) -> list[Any]:
    return list((await client.sm.open_stream(name)).extents)


async def check_all(client: AsyncStreamClient, written: dict[str, Acked]) -> None:
    for name, acked in written.items():
        stream = await client.open_stream(name)
        for loc, data in acked:
            assert await stream.read(loc) == data, (name, loc)


def test_ec_job_codes_due_extents_under_concurrent_reads(
        stamp_factory: StampFactory, spark: object, rng: random.Random) -> None:
    stamp = stamp_factory(6, 1, lock_servers=1, extent_node=SMALL_EXTENTS)

    async def setup() -> dict[str, Acked]:
        client = client_for(stamp)
        written = {name: await write(client, name, rng, 60) for name in ("rows", "log", "old")}
        await client.close()
        return written
    written = asyncio.run(setup())
    for args in (("rows", "--ec", "3+2"), ("ol?", "--ec", "3+2", "--after", "1h")):
        done = cli(stamp, "stream", "policy", *args)
        assert done.returncode == 0, done.stderr
    listed = cli(stamp, "stream", "policies")
    assert "RS(3,2)" in listed.stdout and "ol?" in listed.stdout, listed.stdout

    async def during() -> tuple[Any, int]:
        client = client_for(stamp)
        streams = {name: await client.open_stream(name) for name in written}  # cached maps
        stop = asyncio.Event()
        passes = 0

        async def reader() -> None:
            nonlocal passes
            while not stop.is_set():
                for name, acked in written.items():
                    for loc, data in acked:
                        assert await streams[name].read(loc) == data, (name, loc)
                passes += 1
        reading = asyncio.get_running_loop().create_task(reader())
        try:
            report = await asyncio.to_thread(run_job, "ec", str(stamp.data_dir),
                                             session=spark)
            # At least one whole pass after the job, on the maps cached before it.
            seen = passes
            while passes < seen + 2 and not reading.done():
                await asyncio.sleep(0.01)
        finally:
            stop.set()
            await reading
        await client.close()
        return report, passes
    report, passes = asyncio.run(during())
    assert passes >= 2

    async def after() -> None:
        client = client_for(stamp)
        rows = await extents_of(client, "rows")
        coded = [e for e in rows if e.state == "erasure_coded"]
        assert len(coded) == len(rows) - 1 >= 2, [e.state for e in rows]  # all but the open
        assert all(not e.replicas and (e.ec_k, e.ec_m) == (3, 2) for e in coded)
        assert {r.item: r.status for r in report.results} == {e.extent_id: DONE
                                                               for e in coded}
        for name in ("log", "old"):
            assert {e.state for e in await extents_of(client, name)} <= {"sealed", "open"}
        await check_all(client, written)
        await client.close()
    asyncio.run(after())
    again = run_job("ec", str(stamp.data_dir), session=spark)
    assert again.results == [], "a second run found work"


def test_ec_job_killed_half_way_stays_readable_and_a_rerun_finishes(
        stamp_factory: StampFactory, spark: object, rng: random.Random) -> None:
    stamp = stamp_factory(6, 1, lock_servers=1, extent_node=SMALL_EXTENTS)

    async def setup() -> dict[str, Acked]:
        client = client_for(stamp)
        written = {"rows": await write(client, "rows", rng, 40)}
        await client.sm.set_stream_policy("rows", 3, 2, 0)
        await client.close()
        return written
    written = asyncio.run(setup())

    # The CLI's Spark task kills itself (SIGKILL) right after it recorded the first
    # conversion, before deleting the replicas: the job fails half way.
    crashed = cli(stamp, "job", "ec", "--json",
                  env={"STAMP_FAULTS": "ec.convert.after_record=crash"})
    assert crashed.returncode == 1, crashed.stdout + crashed.stderr
    assert "Spark job failed" in crashed.stderr

    async def half_way() -> None:
        client = client_for(stamp)
        states = [(e.state, len(e.replicas)) for e in await extents_of(client, "rows")]
        assert ("erasure_coded", 3) in states, states  # recorded, replicas still there
        await check_all(client, written)
        await client.close()
    asyncio.run(half_way())

    report = run_job("ec", str(stamp.data_dir), session=spark)
    assert report.results and {r.status for r in report.results} == {DONE}

    async def finished() -> None:
        client = client_for(stamp)
        rows = await extents_of(client, "rows")
        assert [(e.state, len(e.replicas)) for e in rows[:-1]] == [
            ("erasure_coded", 0)] * (len(rows) - 1)
        await check_all(client, written)
        await client.close()
    asyncio.run(finished())
    results = [r.result.split(":")[0] for r in past_runs(str(stamp.data_dir))]
    assert results == ["failed", "ok"]
    with pytest.raises(StampError):
        run_job("nothing", str(stamp.data_dir), session=spark)
