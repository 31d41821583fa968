"""Starting, finding and killing Stamp's server processes. Everything is by PID, never by name.

Contract between a server and whoever started it: once the server accepts RPCs it writes
`<proc dir>/ready.json` = {"name", "pid", "address"} atomically (tmp + rename). The starter
removes any stale ready.json before spawning and waits for one carrying the new pid.
A server's stdout and stderr go to `<proc dir>/server.log`.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from common import durable_fs
from common.config import HOST
from common.errors import Unavailable

READY_FILE = "ready.json"
LOG_FILE = "server.log"


@dataclass(frozen=True)
class Ready:
    name: str
    pid: int
    address: str


def write_ready(proc_dir: str | Path, name: str, address: str) -> None:
    proc_dir = Path(proc_dir)
    tmp = proc_dir / (READY_FILE + ".tmp")
    tmp.write_text(json.dumps({"name": name, "pid": os.getpid(), "address": address}))
    os.replace(tmp, proc_dir / READY_FILE)


def read_ready(proc_dir: str | Path) -> Ready | None:
    try:
        raw = json.loads((Path(proc_dir) / READY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return Ready(raw["name"], int(raw["pid"]), raw["address"])


PORT_PICK_TRIES = 200
EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"


# Every port this process has handed out: a port is free until its process binds it, so a
# stamp planning some 60 ports (gRPC, Raft, metrics) drew the same one twice about one time
# in ten without this (a process then failed with "address already in use").
_PICKED: set[tuple[str, int]] = set()


def free_port(host: str = HOST) -> int:
    """A port free right now on `host`, for a process that binds it moments later.

    Picked below the kernel's ephemeral range: a port the kernel hands out (bind to 0) can be
    taken in the meantime as the source port of any outgoing connection — with a whole stamp
    starting, that happened. Ports below the range are only ever taken by a bind."""
    low, high = port_range()
    rng = random.SystemRandom()
    for _ in range(PORT_PICK_TRIES):
        port = rng.randrange(low, high)
        if (host, port) in _PICKED:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            _PICKED.add((host, port))
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # a crowded machine
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# Test support: parallel test workers (pytest-xdist, tests/conftest.py) each set their own
# slice "LOW-HIGH" (HIGH excluded) of the range below, inherited by every process they start,
# so two workers' stamps never pick the same port.
PORT_RANGE_ENV_VAR = "STAMP_PORT_RANGE"


def port_range() -> tuple[int, int]:
    """Where free_port picks: the 16384 ports below the kernel's ephemeral range, or the
    slice of them $STAMP_PORT_RANGE names."""
    high = _ephemeral_low()
    low = max(1024, high - 16384)
    with contextlib.suppress(ValueError):
        first, end = (int(part) for part in os.environ.get(PORT_RANGE_ENV_VAR, "").split("-"))
        if low <= first < end <= high:
            return first, end
    return low, high


def _ephemeral_low() -> int:
    try:
        return int(Path(EPHEMERAL_RANGE_FILE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# gRPC's EventEngine keeps a pool of threads per process that, after any I/O, wake with a
# backoff from 15 ms to 3 s to look for work: in an idle stamp about 40% of all the CPU its
# 23 processes used (3.0 of 7.7% of a core, /proc schedstat by thread name), for a heartbeat
# every second or two. A server spawned here runs gRPC's client and listener endpoints on the
# classic I/O manager instead, which sleeps until there is I/O: an idle extent node's CPU
# fell from 0.23% to 0.16% (issue 29). Whoever sets GRPC_EXPERIMENTS themselves (even empty)
# gets their own: `GRPC_EXPERIMENTS= stamp up` runs a stamp on gRPC's defaults.
GRPC_EXPERIMENTS_ENV_VAR = "GRPC_EXPERIMENTS"
SERVER_GRPC_EXPERIMENTS = "-event_engine_client,-event_engine_listener"


def stamp_command(*args: str) -> list[str]:
    """argv that runs the `stamp` CLI with this interpreter (works without the venv on PATH)."""
    return [sys.executable, "-m", "tools.cli", *args]


def spawn(argv: Sequence[str], proc_dir: str | Path, env: dict[str, str] | None = None
          ) -> subprocess.Popen[bytes]:
    """Start a server in its own session (so a terminal's ^C does not reach it)."""
    proc_dir = Path(proc_dir)
    durable_fs.make_dirs(proc_dir)
    with contextlib.suppress(FileNotFoundError):
        (proc_dir / READY_FILE).unlink()
    full_env = {GRPC_EXPERIMENTS_ENV_VAR: SERVER_GRPC_EXPERIMENTS, **os.environ, **(env or {})}
    with open(proc_dir / LOG_FILE, "ab") as log:
        return subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=full_env, start_new_session=True,
                                cwd=os.getcwd())


def wait_ready(proc_dir: str | Path, pid: int, timeout_s: float,
               popen: subprocess.Popen[bytes] | None = None) -> Ready:
    """Wait until the server with `pid` reports ready; raise Unavailable if it dies or hangs."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while time.monotonic() < deadline:
        ready = read_ready(proc_dir)
        if ready is not None and ready.pid == pid:
            return ready
        if (popen is not None and popen.poll() is not None) or not is_alive(pid):
            raise Unavailable(f"process {pid} in {proc_dir} exited before it was ready:\n"
                              f"{log_tail(proc_dir)}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    raise Unavailable(f"process {pid} in {proc_dir} not ready after {timeout_s:g}s:\n"
                      f"{log_tail(proc_dir)}")


def log_tail(proc_dir: str | Path, lines: int = 20) -> str:
    try:
        text = (Path(proc_dir) / LOG_FILE).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def is_alive(pid: int) -> bool:
    """True if `pid` is a running process (a zombie counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def kill(pid: int, sig: int = signal.SIGKILL, wait_s: float = 10.0) -> None:
    """Send `sig` to `pid` and, for SIGKILL/SIGTERM, wait until it is gone."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + wait_s
    while is_alive(pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.005)
    if is_alive(pid):
        raise Unavailable(f"process {pid} did not exit within {wait_s:g}s of signal {sig}")
