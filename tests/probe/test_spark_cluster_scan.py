"""The Stamp data source on a real standalone Spark cluster (issue 18: where a user outgrows
one machine): a master and a worker started from the pyspark installation on loopback
(tests/spark_cluster.py), a driver with master spark://127.0.0.1:PORT, and a scan of a stamp
with several range partitions whose result equals the SDK's. (`stamp job gc` on the same
cluster belongs with the maintenance jobs, not on main when this was written.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from stampsdk import Client

from spark.datasource import register
from spark.session import spark_session
from tests.conftest import module_stamp
from tests.spark_cluster import standalone_cluster
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

PARTITION = {"bootstrap_split_keys": ("admin/g02", "admin/g04")}
GROUPS = 6
ROWS = 30


@pytest.fixture(scope="module")
def stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    with module_stamp(tmp_path_factory, "sparkcluster", PARTITION, extent_nodes=3,
                      stream_managers=1, lock_servers=3, partition_managers=1,
                      partition_servers=2, front_ends=1) as local:
        local.wait_partitions_served()
        yield local


@pytest.mark.timeout(600)
def test_a_scan_on_a_standalone_cluster_equals_the_sdk(stamp: LocalStamp, tmp_path: Path
                                                      ) -> None:
    cs = stamp.admin_connection_string_file.read_text().strip()
    with Client.from_connection_string(cs) as client:
        for g in range(GROUPS):
            client.batch(f"g{g:02}", [("put", f"r{r:03}", b"v%d" % r) for r in range(ROWS)])
        client.append("log-a", [b"a%d" % i for i in range(50)])
        expected = [tuple(e) for e in client.scan()]
    with standalone_cluster(tmp_path / "spark") as master:
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
