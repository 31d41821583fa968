"""Watching a real stamp (issue 19): every process — lock, SM, EN, PM, PS, FE — serves its
Prometheus metrics and answers the gRPC health service; health says whether a process can do
its job (a front end cut off from the lock service is NOT_SERVING until healed); `stamp top`
drawn in a real terminal (tmux) shows every process; and a SIGKILLed process of each kind is
reported unhealthy by `stamp status` within 2 s of the kill."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from stampsdk import Client

from common import health
from tests.conftest import module_stamp
from tests.support.waiting import wait_until
from tools import dashboard
from tools.cmd_isolate import heal, isolate
from tools.cmd_stamp import status_rows
from tools.local_stamp import LocalStamp
from tools.scrape import Samples, scrape_many

# serial: its bounds are timings (or it freezes processes); `make test` runs it alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

# What each kind of process must export, beside the RPC and process metrics every one has.
METRICS_OF_KIND = {
    "lock": ["stamp_raft_term", "stamp_raft_commit_index", "stamp_lock_leases"],
    "stream-manager": ["stamp_raft_term", "stamp_raft_commit_index", "stamp_sm_extents",
                       "stamp_sm_repair_backlog", "stamp_sm_repairs_in_flight"],
    "extent-node": ["stamp_en_bytes", "stamp_en_extents", "stamp_journal_fsync_seconds_bucket",
                    "stamp_journal_group_commit_records_bucket"],
    "partition-manager": ["stamp_pm_leader", "stamp_pm_map_version"],
    "partition-server": ["stamp_ps_partitions", "stamp_ps_op_seconds_bucket",
                         "stamp_ps_ops_total"],
    "front-end": ["stamp_fe_requests_total", "stamp_fe_throttled_total"],
    "job-scheduler": ["stamp_job_scheduler_active", "stamp_job_last_success_timestamp_seconds",
                      "stamp_job_backlog", "stamp_job_last_run_ok"],
}
KILL_REPORTED_S = 2.0  # the bound: killed -> reported unhealthy by `stamp status`
TOP_DRAWN_S = 60.0


@pytest.fixture(scope="module")
def stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    with module_stamp(tmp_path_factory, "watch", {}, extent_nodes=3, stream_managers=1,
                      lock_servers=3, partition_managers=1, partition_servers=2,
                      front_ends=2, job_schedulers=1) as local:
        yield local


def cli(stamp: LocalStamp, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir",
                           str(stamp.data_dir), *args], capture_output=True, text=True,
                          timeout=120, check=True)


def scrape_all(stamp: LocalStamp) -> dict[str, Samples | None]:
    found = asyncio.run(scrape_many(r.metrics_address for r in stamp.records.values()))
    return {r.name: found.get(r.metrics_address) for r in stamp.records.values()}


def test_every_process_serves_its_metrics_and_answers_health(stamp: LocalStamp) -> None:
    text = stamp.admin_connection_string_file.read_text().strip()
    with Client.from_connection_string(text) as sdk:
        for i in range(20):
            sdk.append(f"watched-{i % 4}", [b"record %d" % i])
    scraped = scrape_all(stamp)
    for rec in stamp.records.values():
        samples = scraped[rec.name]
        assert samples is not None, f"{rec.name} served no metrics at {rec.metrics_address}"
        for name in ["process_cpu_seconds_total", *METRICS_OF_KIND[rec.kind]]:
            assert name in samples.by_name, f"{rec.name} ({rec.kind}) has no {name}"
    # Per partition, on the servers that serve one (the bootstrap partition, at least).
    serving = [r.name for r in stamp.partition_servers()
               if scraped[r.name].value("stamp_ps_partitions") > 0]
    assert serving and all(
        {"stamp_partition_ops_per_second", "stamp_partition_size_bytes",
         "stamp_partition_p99_seconds"} <= set(scraped[name].by_name) for name in serving)
    # What was just done shows: appends answered by the PSs, made durable by the ENs, taken
    # by the front ends; the Raft groups have a term and commit index.
    assert sum(scraped[r.name].value("stamp_ps_ops_total", op="append", outcome="ok")
               for r in stamp.partition_servers()) >= 20
    assert all(scraped[r.name].value("stamp_journal_fsync_seconds_count") > 0
               for r in stamp.extent_nodes())
    assert sum(scraped[r.name].value("stamp_fe_requests_total")
               for r in stamp.front_ends()) >= 20
    assert all(scraped[r.name].value("stamp_raft_term") >= 1
               and scraped[r.name].value("stamp_raft_commit_index") >= 1
               for r in stamp.lock_servers() + stamp.stream_managers())
    # The scrape configuration `stamp up` wrote names every process; the Grafana dashboard
    # it wrote beside it reads only metrics the stamp exports.
    text = (stamp.data_dir / "prometheus.yml").read_text()
    assert all(f'"{r.metrics_address}"' in text for r in stamp.records.values())
    board = json.loads((stamp.data_dir / dashboard.DASHBOARD_FILE).read_text())
    exported = {name for samples in scraped.values() if samples for name in samples.by_name}
    assert dashboard.metric_names(dashboard.queries(board)) - exported == set()
    # Health: every process serving, as `stamp status --json` reports it. A server starts
    # NOT_SERVING and checks itself every watch.health_check_interval_ms (1 s): a stamp that
    # came up quickly may be asked before a stream manager's first check saw its leader.
    every = {name: health.SERVING for name in stamp.records}

    def healths() -> dict[str, str]:
        status = json.loads(cli(stamp, "status", "--json").stdout)
        return {p["name"]: p["health"] for p in status["processes"]}
    wait_until(lambda: healths() == every, 10.0, "every process to report SERVING")


def test_a_front_end_cut_off_from_the_lock_service_is_not_serving_until_healed(
        stamp: LocalStamp) -> None:
    fe = stamp.record("fe-2")
    timeout_s = stamp.config.watch.health_rpc_timeout_ms / 1000
    isolate(stamp, fe.name, [r.name for r in stamp.lock_servers()])
    try:
        _wait_health(fe.address, health.NOT_SERVING, timeout_s)
    finally:
        heal(stamp, fe.name)
    _wait_health(fe.address, health.SERVING, timeout_s)


def _wait_health(address: str, wanted: str, timeout_s: float, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while (found := asyncio.run(health.check_one(address, timeout_s))) != wanted:
        assert time.monotonic() < deadline, f"{address} stayed {found}, never {wanted}"
        time.sleep(0.05)


@pytest.mark.skipif(shutil.which("tmux") is None,
                    reason="tmux is not installed (apt-get install tmux): `stamp top` cannot "
                           "be drawn in a terminal here")
def test_stamp_top_in_a_terminal_shows_every_process(stamp: LocalStamp) -> None:
    # A tmux server of this test's own (its own socket): nobody else's sessions are touched,
    # and its window size is the one asked for.
    tmux = ["tmux", "-L", f"stamp-top-{uuid.uuid4().hex[:8]}", "-f", "/dev/null"]
    session = "top"
    # The terminal's own size, not one this test's environment may name (rich reads them).
    command = (f"env -u COLUMNS -u LINES {sys.executable} -m tools.cli --data-dir "
               f"{stamp.data_dir} top; "
               f"echo top-exited-$?; sleep 60")
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "160", "-y", "70",
                    command], check=True, cwd=Path(__file__).resolve().parents[2])
    try:
        subprocess.run([*tmux, "resize-window", "-t", session, "-x", "160", "-y", "70"],
                       check=True)
        deadline = time.monotonic() + TOP_DRAWN_S
        while True:
            screen = _capture(tmux, session)
            shown = {line.split()[0] for line in screen.splitlines() if line.split()}
            missing = set(stamp.records) - shown
            if not missing and "repair backlog" in screen and "partitions by load" in screen:
                break
            assert time.monotonic() < deadline, f"`stamp top` never showed {missing}:\n{screen}"
            time.sleep(0.2)
        assert f"{len(stamp.records)}/{len(stamp.records)} processes serving" in screen
        subprocess.run([*tmux, "send-keys", "-t", session, "C-c"], check=True)
        deadline = time.monotonic() + 10
        while "top-exited-0" not in (screen := _capture(tmux, session)):
            assert time.monotonic() < deadline, f"`stamp top` did not stop on ^C:\n{screen}"
            time.sleep(0.1)
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)


def _capture(tmux: list[str], session: str) -> str:
    return subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True,
                          text=True, check=True).stdout


def test_a_frozen_process_is_reported_unreachable_within_2_s_and_serving_once_thawed(
        stamp: LocalStamp) -> None:
    """SIGSTOP: the process keeps its sockets (the kernel still accepts connections), so
    only the health RPC's deadline tells it apart from a live one."""
    rec = stamp.record("en-2")
    os.kill(rec.pid, signal.SIGSTOP)
    try:
        frozen_at = time.monotonic()
        while True:
            rows = {row["name"]: row for row in asyncio.run(status_rows(stamp))}
            if rows["en-2"]["health"] != health.SERVING:
                break
        assert time.monotonic() - frozen_at <= KILL_REPORTED_S
        assert rows["en-2"]["health"] == health.UNREACHABLE and rows["en-2"]["alive"]
    finally:
        os.kill(rec.pid, signal.SIGCONT)
    _wait_health(rec.address, health.SERVING, 1.0)


def test_a_killed_process_of_each_kind_is_reported_unhealthy_within_2_s(
        stamp: LocalStamp) -> None:
    """Last in this module: it kills processes. `stamp status`'s rows (what the command
    prints) are asked again until the killed one is reported; the deadline runs from the
    kill."""
    for name in ("en-3", "ps-2", "fe-1", "lock-3", "pm-1", "sm-1", "jobs-1"):
        stamp.kill(name)
        killed_at = time.monotonic()
        while True:
            rows = {row["name"]: row for row in asyncio.run(status_rows(LocalStamp.load(
                stamp.data_dir)))}
            if rows[name]["health"] != health.SERVING:
                break
            assert time.monotonic() - killed_at < KILL_REPORTED_S, f"{name} still SERVING"
        assert time.monotonic() - killed_at <= KILL_REPORTED_S, (
            f"{name} reported {rows[name]['health']} only after "
            f"{time.monotonic() - killed_at:.2f} s")
        assert rows[name]["health"] == health.UNREACHABLE
    # The command itself says so too.
    status = json.loads(cli(stamp, "status", "--json").stdout)
    assert {p["name"] for p in status["processes"] if p["health"] != health.SERVING} >= {
        "en-3", "ps-2", "fe-1", "lock-3", "pm-1", "sm-1", "jobs-1"}
