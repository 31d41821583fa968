"""The fence of a scheduled run's process (spark/job_process.py): its watchdog kills the
run's whole process tree — also a process that put itself in a group of its own, as
PySpark's Python daemon does — as soon as the scheduler's claim pipe closes, or once the
last claim it was given runs out; while claims keep coming, the run lives. Real processes,
no Spark."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common import process

ROOT = Path(__file__).resolve().parents[2]
# A run's stand-in: a child in a process group of its own (PySpark's daemon calls
# os.setpgid(0, 0)), and the watchdog on the claim pipe, as job_process.main starts it.
RUN = """
import os, subprocess, sys, threading, time
from spark.job_process import watch_claim
child = subprocess.Popen([sys.executable, "-c",
                          "import os, time; os.setpgid(0, 0); time.sleep(600)"])
print(child.pid, flush=True)
threading.Thread(target=watch_claim, daemon=True,
                 args=(int(sys.argv[1]), float(sys.argv[2]), os.getpgid(os.getppid()))).start()
time.sleep(600)
"""
CLAIM_S = 30.0  # long enough that only the test ends it


class Run:
    def __init__(self) -> None:
        read_fd, self.claim_fd = os.pipe()
        self.popen = subprocess.Popen(
            [sys.executable, "-c", RUN, str(read_fd), repr(time.monotonic() + CLAIM_S)],
            pass_fds=(read_fd,), start_new_session=True, stdout=subprocess.PIPE, cwd=ROOT)
        os.close(read_fd)
        assert self.popen.stdout is not None
        self.child = int(self.popen.stdout.readline())
        self.pids = [self.popen.pid, self.child]

    def claim(self, until: float) -> None:
        os.write(self.claim_fd, f"{until!r}\n".encode())

    def alive(self) -> list[int]:
        self.popen.poll()
        return [pid for pid in self.pids if process.is_alive(pid)]

    def wait_gone(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.alive():
            assert time.monotonic() < deadline, f"still alive: {self.alive()}"
            time.sleep(0.01)
        assert self.popen.wait(timeout=timeout_s) != 0

    def kill(self) -> None:
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        self.popen.wait(timeout=10)
        with contextlib.suppress(OSError):
            os.close(self.claim_fd)


@pytest.fixture
def run() -> Iterator[Run]:
    started = Run()
    yield started
    started.kill()


def test_the_run_and_its_own_process_group_die_when_the_claim_pipe_closes(run: Run) -> None:
    assert run.alive() == run.pids
    os.close(run.claim_fd)  # what the kernel does when the scheduler dies
    run.wait_gone()


def test_the_run_lives_while_claims_come_and_dies_once_the_last_runs_out(run: Run) -> None:
    for _ in range(5):
        run.claim(time.monotonic() + CLAIM_S)
        time.sleep(0.05)
        assert run.alive() == run.pids
    run.claim(time.monotonic() + 0.2)  # the scheduler froze after this extension
    run.wait_gone()


def test_the_scheduler_side_kill_spares_its_own_group() -> None:
    """kill_tree from the scheduler (a child that does not react): the run's groups die,
    the caller's (spare) group does not."""
    from spark.job_process import kill_tree

    started = Run()
    try:
        kill_tree(started.popen.pid, os.getpgid(0))
        started.wait_gone()
    finally:
        started.kill()
