"""A location of two stamps in tests (issue 30; tools/local_location.py): its CLI, waiting on
it, and stopping whatever a test left of it by PID (frozen processes thawed first)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tools.local_location import LocalLocation

CLI_TIMEOUT_S = 180


def location_cli(directory: Path, *args: str, code: int = 0) -> str:
    """`stamp location --dir DIRECTORY ARGS...` (no terminal: stdin closed); its stdout, or
    its stderr when it is to fail with `code`."""
    done = subprocess.run([sys.executable, "-m", "tools.cli", "location", "--dir",
                           str(directory), *args], capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == code, (done.stdout, done.stderr)
    return done.stdout if code == 0 else done.stderr


def until(check: Callable[[], bool], what: str | Callable[[], str],
          timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, \
            f"not within {timeout_s} s: {what() if callable(what) else what}"
        time.sleep(0.05)


def stop_location(directory: Path) -> None:
    """SIGKILL every process of the location's service and stamps by PID (their records),
    each thawed first (a test's SIGSTOP may have been cut short)."""
    local = LocalLocation(directory)
    for part in [local.service(), *(stamp for _, stamp in local.stamps())]:
        if part.stamp_file.exists():
            for pid in part.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            part.kill_all()
