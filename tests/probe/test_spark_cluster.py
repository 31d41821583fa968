"""The jobs on a real standalone Spark cluster (issue 18 "Set-up and scale"): a master and a
worker started from the pyspark installation (bin/spark-class) on loopback, and `stamp job
gc --master spark://127.0.0.1:PORT` sweeping a deleted stream's extents through them."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from common.process import free_port
from spark.driver import run_job
from tests.conftest import config_toml, stamp_config
from tests.probe.test_spark_gc import holdings, write
from tests.probe.test_stream_manager import client_for
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

HOST = "127.0.0.1"
START_TIMEOUT_S = 120


def wait_listening(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        with socket.socket() as sock:
            if sock.connect_ex((HOST, port)) == 0:
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{what} did not listen on {port}")
        time.sleep(0.1)


@pytest.fixture
def spark_cluster(tmp_path: Path) -> Iterator[str]:
    """A standalone master and one worker (1 core) on loopback; killed by PID."""
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    env = {**os.environ, "SPARK_LOCAL_IP": HOST, "SPARK_LOG_DIR": str(tmp_path),
           "SPARK_WORKER_DIR": str(tmp_path / "work"), "PYSPARK_PYTHON": sys.executable}
    port = free_port(HOST)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        log = (tmp_path / "master.log").open("wb")
        procs.append(subprocess.Popen(
            [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", HOST,
             "--port", str(port), "--webui-port", str(free_port(HOST))],
            env=env, stdout=log, stderr=subprocess.STDOUT))
        wait_listening(port, procs[0], "the Spark master")
        url = f"spark://{HOST}:{port}"
        log = (tmp_path / "worker.log").open("wb")
        procs.append(subprocess.Popen(
            [str(spark_class), "org.apache.spark.deploy.worker.Worker", url, "--host", HOST,
             "--cores", "1", "--memory", "1g", "--webui-port", str(free_port(HOST))],
            env=env, stdout=log, stderr=subprocess.STDOUT))
        registered = tmp_path / "master.log"
        deadline = time.monotonic() + START_TIMEOUT_S
        while b"Registering worker" not in registered.read_bytes():
            assert time.monotonic() < deadline and procs[1].poll() is None, \
                "the worker did not register"
            time.sleep(0.1)
        yield url
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGKILL)
            proc.wait()


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
