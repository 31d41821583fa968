"""A lock-service group of real replica processes on this machine, for probe tests and
benchmarks: start, SIGKILL and restart replicas by PID (never by name), find the leader.

Ports (gRPC and Raft) are picked free on 127.0.0.1 once, at construction; a restarted
replica comes back on the same ones, so clients keep their address lists. The replicas share
the stamp secret `BASE_DIR/stamp-secret` (common/stamp_secret.py), made at the first start.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import faults, process, stamp_secret
from common.config import HOST
from common.errors import StampError, Unavailable
from common.process import free_port
from common.proto import lock_service_pb2 as pb
from lock_service.client import LockClient

START_TIMEOUT_S = 20.0
LEADER_TIMEOUT_S = 15.0
POLL_INTERVAL_S = 0.01


@dataclass
class ReplicaProcess:
    name: str
    dir: Path
    port: int
    raft_port: int
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def raft_address(self) -> str:
        return f"{HOST}:{self.raft_port}"

    @property
    def pid(self) -> int | None:
        return None if self.popen is None else self.popen.pid


class LocalLockGroup:
    def __init__(self, base_dir: str | Path, size: int = 3,
                 env: dict[str, str] | None = None) -> None:
        self.base_dir = Path(base_dir)
        self.env = env or {}
        self.replicas = {f"lock-{i}": ReplicaProcess(f"lock-{i}", self.base_dir / f"lock-{i}",
                                                     free_port(), free_port())
                         for i in range(1, size + 1)}

    @property
    def addresses(self) -> list[str]:
        return [r.address for r in self.replicas.values()]

    def client(self, holder: str, **kwargs: object) -> LockClient:
        return LockClient(self.addresses, holder, **kwargs)  # type: ignore[arg-type]

    def start_all(self) -> None:
        for name in self.replicas:
            self.spawn(name)
        for name in self.replicas:
            self.wait_ready(name)

    def start(self, name: str) -> None:
        self.spawn(name)
        self.wait_ready(name)

    def spawn(self, name: str) -> None:
        replica = self.replicas[name]
        assert replica.pid is None or not process.is_alive(replica.pid), f"{name} is running"
        peers = ",".join(r.raft_address for r in self.replicas.values() if r.name != name)
        secret = stamp_secret.ensure(self.base_dir)
        replica.popen = process.spawn(
            [sys.executable, "-m", "lock_service.main", "--name", name, "--dir",
             str(replica.dir), "--port", str(replica.port), "--raft-port",
             str(replica.raft_port), "--peers", peers, "--secret-file", str(secret),
             *(["--faults-rpc"] if os.environ.get(faults.RPC_ENV_VAR) == "1" else [])],
            replica.dir, env=self.env)

    def wait_ready(self, name: str) -> None:
        replica = self.replicas[name]
        assert replica.popen is not None
        process.wait_ready(replica.dir, replica.popen.pid, START_TIMEOUT_S, replica.popen)

    def kill(self, name: str) -> None:
        """SIGKILL one replica and reap it."""
        replica = self.replicas[name]
        if replica.popen is not None:
            process.kill(replica.popen.pid)
            replica.popen.wait()
            replica.popen = None

    def stop(self) -> None:
        """SIGKILL every replica this group started (a fixture finalizer calls this)."""
        for name in self.replicas:
            self.kill(name)

    def running(self) -> list[str]:
        return [name for name, r in self.replicas.items() if r.popen is not None]

    def statuses(self, client: LockClient, with_digest: bool = False
                 ) -> dict[str, pb.StatusReply]:
        """Status of every running replica that answers."""
        found = {}
        for name in self.running():
            with contextlib.suppress(StampError):
                found[name] = client.status(self.replicas[name].address, timeout_s=1.0,
                                            with_digest=with_digest)
        return found

    def leader(self, client: LockClient, timeout_s: float = LEADER_TIMEOUT_S) -> str:
        """The name of the one running replica that says it leads."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            leaders = [name for name, s in self.statuses(client).items() if s.role == "leader"]
            if len(leaders) == 1:
                return leaders[0]
            time.sleep(POLL_INTERVAL_S)
        raise Unavailable(f"no single leader among {self.running()} within {timeout_s}s")

    def log_tails(self) -> str:
        return "\n".join(f"--- {name}\n{process.log_tail(r.dir, 30)}"
                         for name, r in self.replicas.items())
