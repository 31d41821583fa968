"""The jobs on a real standalone Spark cluster (issue 18 "Set-up and scale"): a master and a
worker started from the pyspark installation (bin/spark-class) on loopback, and `stamp job
gc --master spark://127.0.0.1:PORT` sweeping a deleted stream's extents through them."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark.driver import run_job
from tests.conftest import config_toml, stamp_config
from tests.spark_cluster import standalone_cluster
from tests.support.extent_nodes import holdings
from tests.support.streams import client_for, write
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow


@pytest.fixture
def spark_cluster(tmp_path: Path) -> Iterator[str]:
    """A standalone master and worker on loopback (tests/spark_cluster.py); killed by PID."""
    with standalone_cluster(tmp_path / "spark") as url:
        yield url


def test_gc_runs_on_a_standalone_cluster(tmp_path: Path, spark_cluster: str) -> None:
    config = stamp_config(3, 1, lock_servers=1)
    path = tmp_path / "stamp.toml"
    path.write_text(config_toml(jobs={"gc_grace_s": 0}))
    stamp = LocalStamp(tmp_path / "stamp", config, str(path))
    try:
        stamp.up()
        rng = random.Random(18)

        async def doomed() -> set[int]:
            client = client_for(stamp)
            await write(client, "keep", rng, 10)
            gone = {loc.extent_id for loc, _ in await write(client, "gone", rng, 10)}
            await client.sm.delete_stream("gone")
            await client.close()
            return gone
        gone = asyncio.run(doomed())
        assert run_job("gc", str(stamp.data_dir)).results == []  # marks: no Spark needed
        swept = subprocess.run(
            [sys.executable, "-m", "tools.cli", "--data-dir", str(stamp.data_dir), "job", "gc",
             "--master", spark_cluster, "--json"],
            capture_output=True, text=True, timeout=600)
        assert swept.returncode == 0, swept.stderr[-3000:]
        report = json.loads(swept.stdout)
        assert report["master"] == spark_cluster
        assert {r["item"] for r in report["items"] if r["status"] == "done"} == gone

        async def left() -> set[int]:
            client = client_for(stamp)
            held = set().union(*(await holdings(stamp, client)).values())
            await client.close()
            return held
        assert not gone & asyncio.run(left())
    finally:
        stamp.kill_all()
