"""The scheduler's half of a run (spark/scheduler.py): start spark/job_process.py in a
process group of its own, keep extending its claim while the lease holds, and end it when
the lease is lost, the scheduler stops, or the run takes too long.

Contract: `launch` blocks until the run's process has exited. It writes the child claim
deadlines no later than `claim_until()` (the lease's claim deadline; 0 once lost), so the
child's watchdog (job_process.py) ends the run by then even if this process freezes or
dies; when it ends a run itself it closes the claim (the child kills its tree at once), then
waits `STOP_WAIT_S` and kills the tree from here too (a child that does not react)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark.job_process import EXIT_STOPPED, kill_tree

STOP_WAIT_S = 5.0
# The claim is extended this often while the lease holds (a fraction of the lease's time,
# so a renewal reaches the child long before the claim it holds runs out).
EXTEND_FRACTION = 1 / 8
EXTEND_MAX_S = 1.0


@dataclass
class RunOutcome:
    result: str                  # "ok", or "failed: why"
    seconds: float
    stopped: str = ""            # why the scheduler ended it ("" : it ended by itself)
    report: dict[str, Any] = field(default_factory=dict)  # totals etc. (job_process.py)


def launch(job: str, data_dir: str, master: str, extent_range: tuple[int, int] | None,
           claim_until: Callable[[], float], stop: threading.Event, timeout_s: float,
           run_dir: Path, lease_ttl_s: float) -> RunOutcome:
    """Run `job` in its own process under the claim (module contract)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    report_path = run_dir / f"{job}-report.json"
    with contextlib.suppress(FileNotFoundError):
        report_path.unlink()
    read_fd, write_fd = os.pipe()
    argv = [sys.executable, "-m", "spark.job_process", "--data-dir", data_dir, "--job", job,
            "--claim-fd", str(read_fd), "--claim-until", repr(claim_until()),
            "--report", str(report_path)]
    if master:
        argv += ["--master", master]
    if extent_range is not None:
        argv += ["--extents", f"{extent_range[0]}-{extent_range[1]}"]
    started = time.monotonic()
    with open(run_dir / f"{job}.log", "wb") as log:  # the last run of each job
        try:
            popen = subprocess.Popen(argv, pass_fds=(read_fd,), start_new_session=True,
                                     stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT)
        finally:
            os.close(read_fd)
        stopped = _supervise(popen, write_fd, claim_until, stop, started + timeout_s,
                             min(EXTEND_MAX_S, lease_ttl_s * EXTEND_FRACTION))
    seconds = time.monotonic() - started
    return _outcome(popen.returncode, stopped, seconds, report_path, run_dir / f"{job}.log")


def _supervise(popen: subprocess.Popen[bytes], write_fd: int,
               claim_until: Callable[[], float], stop: threading.Event, deadline: float,
               extend_s: float) -> str:
    """Extend the claim until the run exits; end it early (and say why) otherwise."""
    stopped = ""
    try:
        while popen.poll() is None:
            until = claim_until()
            now = time.monotonic()
            if until <= now:
                stopped = "the scheduler lost its lease"
            elif stop.is_set():
                stopped = "the scheduler is stopping"
            elif now >= deadline:
                stopped = "it ran past jobs.scheduler_run_timeout_s"
            if stopped:
                break
            with contextlib.suppress(OSError):  # a child gone meanwhile: poll() says so
                os.write(write_fd, f"{until!r}\n".encode())
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=extend_s)
    finally:
        os.close(write_fd)  # the child's watchdog ends the run at once if it still goes
    if stopped:
        try:
            popen.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            kill_tree(popen.pid, os.getpgid(0))
            with contextlib.suppress(OSError):
                os.killpg(popen.pid, 9)
            popen.wait()
    return stopped


def _outcome(code: int, stopped: str, seconds: float, report_path: Path, log_path: Path
             ) -> RunOutcome:
    report: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        report = json.loads(report_path.read_text())
    if stopped:
        return RunOutcome(f"failed: stopped: {stopped}", seconds, stopped, report)
    if code == 0:
        return RunOutcome("ok", seconds, report=report)
    if code == EXIT_STOPPED:
        return RunOutcome("failed: stopped: its claim ran out", seconds, "claim", report)
    if code == 1 and report:
        totals = report.get("totals", {})
        return RunOutcome(f"failed: {totals.get('failed', 0)} items failed, "
                          f"{totals.get('damaged', 0)} damaged", seconds, report=report)
    return RunOutcome(f"failed: exit code {code}: {_last_line(log_path)}", seconds,
                      report=report)


def _last_line(path: Path) -> str:
    with contextlib.suppress(OSError):
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
        if lines:
            return lines[-1][-300:]
    return "(no output)"
