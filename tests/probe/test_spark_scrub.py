"""`stamp job scrub` on real processes and a real local Spark (issue 18): a byte flipped in a
replica file on disk, and one in a fragment file, are found by the scrub (a dry run reports
them and changes nothing), repaired from good copies, and a rerun finds nothing; every block
still reads back; the runs are kept in the stamp's lock service (`stamp job ls`)."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spark.driver import job_session, past_runs, run_job
from spark.job_result import DAMAGED, OK, REPAIRED
from stream_layer.client import AsyncStreamClient
from stream_layer.ec.convert import convert_extent
from stream_layer.extent_node.replica import replica_paths
from tests.support.erasure import fragment_file, sealed_extent
from tests.support.streams import client_for
from tests.support.waiting import wait_for
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

StampFactory = Callable[..., LocalStamp]


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    """One SparkSession for the module: a cold start costs seconds."""
    session = job_session("local[2]", app_name="stamp-test-jobs")
    yield session
    session.stop()


def replica_file(stamp: LocalStamp, node: str, extent_id: int) -> Path:
    return replica_paths(Path(stamp.record(node).dir) / "extents", extent_id)[0]


def flip(path: Path, rng: random.Random) -> None:
    raw = bytearray(path.read_bytes())
    raw[rng.randrange(len(raw))] ^= 0x20
    path.write_bytes(bytes(raw))


async def settled(client: AsyncStreamClient, stamp: LocalStamp, extent_id: int) -> None:
    """Every replica sealed at the recorded length and written through to its file."""
    info = await client.sm.get_extent(extent_id)

    async def all_sealed() -> bool:
        for address in info.addresses:
            length, sealed = await client.extents.commit_length(address, extent_id)
            if not sealed or length != info.sealed_length:
                return False
        return True
    await wait_for(all_sealed, 20, f"extent {extent_id}'s replicas to seal")
    for address in info.addresses:
        await client.extents.checkpoint(address)


def by_item(report: object) -> dict[int, object]:
    return {r.item: r for r in report.results}  # type: ignore[attr-defined]


def test_scrub_finds_and_repairs_a_flipped_replica_byte_and_fragment_byte(
        stamp_factory: StampFactory, spark: object, rng: random.Random) -> None:
    stamp = stamp_factory(6, 1, lock_servers=1)

    async def setup() -> tuple[int, int, list, list, str]:
        client = client_for(stamp)
        _, acked_r = await sealed_extent(client, rng, blocks=60, name="replicated")
        _, acked_c = await sealed_extent(client, rng, blocks=60, name="coded")
        rep_id, ec_id = acked_r[0][0].extent_id, acked_c[0][0].extent_id
        await settled(client, stamp, rep_id)
        await settled(client, stamp, ec_id)
        info = await convert_extent(client.sm, client.extents, ec_id)
        rep_info = await client.sm.get_extent(rep_id)
        flip(replica_file(stamp, rep_info.replicas[1], rep_id), rng)
        flip(fragment_file(stamp, info.fragments[2], ec_id, 2), rng)
        await client.close()
        return rep_id, ec_id, acked_r, acked_c, rep_info.replicas[1]

    rep_id, ec_id, acked_r, acked_c, bad_node = asyncio.run(setup())
    bad_file = replica_file(stamp, bad_node, rep_id)
    corrupt = bad_file.read_bytes()

    dry = by_item(run_job("scrub", str(stamp.data_dir), dry_run=True, session=spark))
    assert (dry[rep_id].status, dry[rep_id].found, dry[rep_id].fixed) == (DAMAGED, 1, 0)
    assert (dry[ec_id].status, dry[ec_id].found, dry[ec_id].fixed) == (DAMAGED, 1, 0)
    assert bad_node in dry[rep_id].detail
    assert bad_file.read_bytes() == corrupt, "a dry run changed a replica"

    seen: list[tuple[int, int]] = []
    fixed = by_item(run_job("scrub", str(stamp.data_dir), session=spark,
                            on_progress=lambda done, total: seen.append((done, total))))
    assert (fixed[rep_id].status, fixed[rep_id].found, fixed[rep_id].fixed) == (REPAIRED, 1, 1)
    assert (fixed[ec_id].status, fixed[ec_id].found, fixed[ec_id].fixed) == (REPAIRED, 1, 1)
    assert fixed[rep_id].copies == 3 and fixed[rep_id].bytes > 0
    assert seen and seen[-1][0] == seen[-1][1] > 0, seen

    again = run_job("scrub", str(stamp.data_dir), session=spark)
    assert {r.status for r in again.results} == {OK}, again.results
    assert again.totals["found"] == 0

    async def read_back() -> None:
        client = client_for(stamp)
        for name, acked in (("replicated", acked_r), ("coded", acked_c)):
            stream = await client.open_stream(name)
            for loc, data in acked:
                assert await stream.read(loc) == data
        # Each replica of the repaired extent serves every block itself.
        info = await client.sm.get_extent(rep_id)
        for address in info.addresses:
            for loc, data in acked_r:
                assert await client.extents.read(address, loc) == data
        await client.close()
    asyncio.run(read_back())

    runs = past_runs(str(stamp.data_dir))
    assert [(r.job, r.dry_run, r.totals["found"], r.totals["fixed"]) for r in runs] == [
        ("scrub", True, 2, 0), ("scrub", False, 2, 2), ("scrub", False, 0, 0)]
    listing = subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir",
                              str(stamp.data_dir), "job", "ls"], capture_output=True,
                             text=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout.count("scrub") == 3


def test_a_repair_killed_half_way_is_finished_by_the_stream_manager(
        stamp_factory: StampFactory, spark: object, rng: random.Random) -> None:
    """What a scrub task SIGKILLed between re-creating a bad replica and sealing it leaves:
    an empty open replica of a sealed extent. The node reports it open in its heartbeat, and
    the stream manager seals it at the recorded length from the other replicas."""
    stamp = stamp_factory(3, 1, lock_servers=1)

    async def scenario() -> int:
        client = client_for(stamp)
        _, acked = await sealed_extent(client, rng, blocks=40, name="s")
        extent_id = acked[0][0].extent_id
        await settled(client, stamp, extent_id)
        info = await client.sm.get_extent(extent_id)
        victim = info.addresses[2]
        await client.extents.delete_extent(victim, extent_id)
        await client.extents.create_extent(victim, extent_id, list(info.addresses))

        async def resealed() -> bool:
            length, sealed = await client.extents.commit_length(victim, extent_id)
            return sealed and length == info.sealed_length
        await wait_for(resealed, 30, "the stream manager to seal the empty replica")
        for loc, data in acked:
            assert await client.extents.read(victim, loc) == data
        await client.close()
        return extent_id

    extent_id = asyncio.run(scenario())
    report = by_item(run_job("scrub", str(stamp.data_dir), session=spark))
    assert report[extent_id].status == OK, report[extent_id]
