"""A real standalone Spark cluster on loopback for probe tests: one master and one worker,
started from the pyspark installation's `bin/spark-class` (no separate Spark download), each
in its own directory, stopped by PID (SIGKILL) when the context ends.

    with standalone_cluster(tmp_path) as master_url:   # spark://127.0.0.1:PORT
        session = spark_session(master_url)

Both bind to 127.0.0.1 (SPARK_LOCAL_IP: the RPC endpoints and the web UIs); ports are picked
free. Readiness is read from their logs, with a deadline.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark

START_TIMEOUT_S = 120.0  # a JVM on a busy 2-core machine takes its time
WORKER_CORES = 2
WORKER_MEMORY = "1g"
_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_REGISTERED = re.compile(r"(Successfully registered with master)")


def _spark_class() -> Path:
    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _wait_for(log: Path, popen: subprocess.Popen[bytes], pattern: re.Pattern[str],
              what: str) -> str:
    """The first group of `pattern` once the log shows it (AssertionError if the process
    exits or START_TIMEOUT_S passes first)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        found = pattern.search(log.read_text(errors="replace"))
        if found:
            return found.group(1)
        if popen.poll() is not None:
            raise AssertionError(f"the Spark {what} exited ({popen.returncode}):\n"
                                 f"{log.read_text(errors='replace')[-3000:]}")
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(0.2)
    raise AssertionError(f"the Spark {what} was not ready within {START_TIMEOUT_S:g} s:\n"
                         f"{log.read_text(errors='replace')[-3000:]}")


def _start(root: Path, name: str, args: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
    home = root / name
    home.mkdir(parents=True, exist_ok=True)
    log = home / "out.log"
    # The master and worker JVMs with the C1 compiler only unless the environment says
    # otherwise, as the tests' drivers (tests/conftest.py): they start about 1 s sooner.
    env = {"SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1",
           **os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(home),
           "SPARK_WORKER_DIR": str(home / "work"), "SPARK_NO_DAEMONIZE": "1"}
    with log.open("wb") as out:
        popen = subprocess.Popen([str(_spark_class()), *args], cwd=home, env=env, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    return popen, log


@contextlib.contextmanager
def standalone_cluster(root: Path) -> Iterator[str]:
    """A master and a worker (WORKER_CORES, WORKER_MEMORY); yields the master's URL."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        master, master_log = _start(root, "master", [
            "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
            "--webui-port", "0"])
        started.append(master)
        url = _wait_for(master_log, master, _MASTER_URL, "master")
        worker, worker_log = _start(root, "worker", [
            "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--port",
            "0", "--webui-port", "0", "--cores", str(WORKER_CORES), "--memory",
            WORKER_MEMORY, "--work-dir", str(root / "worker" / "work")])
        started.append(worker)
        _wait_for(worker_log, worker, _REGISTERED, "worker")
        yield url
    finally:
        for popen in reversed(started):
            # Its own session: the executors the worker launched go with it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
            popen.wait(30)
