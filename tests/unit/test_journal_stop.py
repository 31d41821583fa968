"""The journal's stop is clean even mid-write, and a real write error still ends the process
(issue 15 hole 8b). Each case runs in its own process: the error path calls os._exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r"""
import asyncio, sys, time
from pathlib import Path
from common import faults
from common.errors import Unavailable
from stream_layer.extent_node.journal import Journal

async def main(directory: str, fault: str) -> None:
    journal = Journal(Path(directory), 1 << 20, 8 << 20, 64 << 20)
    journal.start()
    name, action, arg = fault.split(":")
    faults.arm(name, action, float(arg))
    # More records than the loop syncs inline: the batch goes to the journal's thread.
    futures = [journal.submit(b"record %d" % i) for i in range(8)]
    deadline = time.monotonic() + 30
    while "hits=0" in faults.armed()[name]:  # until the batch is at the fault point
        assert time.monotonic() < deadline, "the batch never reached the fault point"
        await asyncio.sleep(0.005)
    if action == "fail":
        # The error must end the process by itself. (A stop now would race it: cancelled
        # before it sees its write's error, the journal's task takes the stop for a clean
        # one, and the batch fails as stopped, which is also safe.)
        await asyncio.sleep(30)
        print("the write error did not end the process")
        return
    await journal.stop()
    outcomes = [type(f.exception()).__name__ if f.exception() else "durable"
                for f in futures]
    print("stopped:", ",".join(sorted(set(outcomes))))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def _run(tmp_path: Path, fault: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "journal"), fault],
                          env=env, capture_output=True, text=True, timeout=60)


def test_stop_during_a_write_is_clean(tmp_path: Path) -> None:
    done = _run(tmp_path, "journal.before_write:delay:300")
    assert done.returncode == 0, done.stderr
    # The batch the stop caught is not reported durable, and nobody is left waiting.
    assert "stopped: Unavailable" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("fault", ["journal.before_fsync:fail:0",
                                   "journal.before_write:fail:0"])
def test_a_write_error_still_ends_the_process(tmp_path: Path, fault: str) -> None:
    done = _run(tmp_path, fault)
    assert done.returncode == 70, done.stdout + done.stderr
    assert "journal write failed" in done.stderr
