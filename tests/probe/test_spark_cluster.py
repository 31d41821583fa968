"""Stamp's Spark code on a real standalone Spark cluster (issue 18 "Set-up and scale": where a
user outgrows one machine): a master and a worker started from the pyspark installation
(bin/spark-class) on loopback (tests/spark_cluster.py), shared by this module's tests (a
cluster's two JVMs take 10 to 20 s to start on a busy 2-core machine; each test is an
application of its own, as a user's would be):

- the data source: a driver with master spark://127.0.0.1:PORT scans a stamp with several
  range partitions, and the result equals the SDK's;
- the jobs: `stamp job gc --master spark://127.0.0.1:PORT` sweeps a deleted stream's
  extents through the cluster.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from stampsdk import Client

from spark.datasource import register
from spark.driver import run_job
from spark.session import spark_session
from tests.conftest import config_toml, module_stamp, stamp_config
from tests.spark_cluster import standalone_cluster
from tests.support.extent_nodes import holdings
from tests.support.streams import client_for, write
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

PARTITION = {"bootstrap_split_keys": ("admin/g02", "admin/g04")}
GROUPS = 6
ROWS = 30


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone master and worker on loopback (tests/spark_cluster.py); killed by PID."""
    with standalone_cluster(tmp_path_factory.mktemp("spark")) as url:
        yield url


@pytest.fixture
def stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    with module_stamp(tmp_path_factory, "sparkcluster", PARTITION, extent_nodes=3,
                      stream_managers=1, lock_servers=3, partition_managers=1,
                      partition_servers=2, front_ends=1) as local:
        local.wait_partitions_served()
        yield local


@pytest.mark.timeout(600)
def test_a_scan_on_a_standalone_cluster_equals_the_sdk(stamp: LocalStamp, spark_cluster: str
                                                      ) -> None:
    cs = stamp.admin_connection_string_file.read_text().strip()
    with Client.from_connection_string(cs) as client:
        for g in range(GROUPS):
            client.batch(f"g{g:02}", [("put", f"r{r:03}", b"v%d" % r) for r in range(ROWS)])
        client.append("log-a", [b"a%d" % i for i in range(50)])
        expected = [tuple(e) for e in client.scan()]
    master = spark_cluster
    assert master.startswith("spark://127.0.0.1:")
    session = spark_session(master, app_name="test-spark-cluster")
    try:
        assert session.sparkContext.master == master
        register(session)
        df = session.read.format("stamp").option("connectionString", cs).load()
        assert df.rdd.getNumPartitions() == 3
        assert sorted(tuple(r) for r in df.collect()) == expected
        logs = (session.read.format("stamp").option("connectionString", cs)
                .option("log", "log-a").load())
        assert logs.count() == 50
    finally:
        session.stop()


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
