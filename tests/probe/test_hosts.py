"""A stamp across three "hosts" (issue 19): the loopback addresses 127.0.0.2-4, one fault
domain each, one config with `[hosts]` and every port fixed, as a real multi-machine stamp
would have. Each host runs `stamp up --config FILE --only HOST` with its own data directory,
all three at once, as three machines would; then a whole host is SIGKILLed and the stamp
goes on: acknowledged records stay readable, new appends are acknowledged, and `stamp
status` on a surviving host reports the dead host's processes unhealthy (by their health
service: it has no pids of theirs)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common import health, process, stamp_secret, tls
from common.errors import StampError
from partition_layer.client import PartitionClient
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
UP_TIMEOUT_S = 180
FAILOVER_S = 90.0


def _ports(host: str, count: int) -> list[int]:
    """`count` distinct free ports on `host`, each with its metrics port (+1000) free too."""
    found: list[int] = []
    while len(found) < count:
        port = process.free_port(host)
        if port not in found and port + 1000 not in found and port - 1000 not in found \
                and _free(host, port + 1000):
            found.append(port)
    return found


def _free(host: str, port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _config(root: Path) -> Path:
    """3 lock, 3 SM, 9 EN (3 per host, the host's fault domain), 2 PM, 2 PS: a host each for
    the Raft replicas, PM and PS on the first two hosts."""
    lines, hosts = [], []
    for i, host in enumerate(HOSTS, start=1):
        lock, lock_raft, sm, sm_raft, *ens = _ports(host, 7)
        lines += [f'[[lock_servers]]\nname = "lock-{i}"\nport = {lock}\nraft_port = {lock_raft}',
                  f'[[stream_managers]]\nname = "sm-{i}"\nport = {sm}\nraft_port = {sm_raft}']
        hosts += [f'"lock-{i}" = "{host}"', f'"sm-{i}" = "{host}"']
        for j, port in enumerate(ens):
            name = f"en-{3 * (i - 1) + j + 1}"
            lines.append(f'[[extent_nodes]]\nname = "{name}"\nfault_domain = "fd-{i}"\n'
                         f'upgrade_domain = "ud-{j + 1}"\nport = {port}')
            hosts.append(f'"{name}" = "{host}"')
    for kind, prefix in (("partition_managers", "pm"), ("partition_servers", "ps")):
        for i, host in enumerate(HOSTS[:2], start=1):
            [port] = _ports(host, 1)
            lines.append(f'[[{kind}]]\nname = "{prefix}-{i}"\nport = {port}')
            hosts.append(f'"{prefix}-{i}" = "{host}"')
    path = root / "hosts.toml"
    path.write_text("\n".join(["front_ends = []", "job_schedulers = []", *lines,
                               "[partition_manager]\nbalance_interval_s = 0",
                               "[hosts]", *hosts]) + "\n")
    return path


@pytest.fixture
def three_hosts(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Path]]]:
    config = _config(tmp_path)
    data_dirs = {host: tmp_path / f"host-{host}" for host in HOSTS}
    # One stamp secret and one CA (a stamp across hosts runs TLS), copied to every host's
    # data directory (as an operator copies them); each host issues its own certificates.
    secret = tmp_path / stamp_secret.SECRET_FILE
    stamp_secret.make(secret)
    tls.make_ca(tmp_path / "ca")
    for d in data_dirs.values():
        d.mkdir()
        shutil.copy2(secret, stamp_secret.path_in(d))
        shutil.copytree(tmp_path / "ca", tls.dir_in(d))
    try:
        ups = [subprocess.Popen([sys.executable, "-m", "tools.cli", "--data-dir", str(d), "up",
                                 "--config", str(config), "--only", host],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for host, d in data_dirs.items()]
        for up in ups:
            out, err = up.communicate(timeout=UP_TIMEOUT_S)
            assert up.returncode == 0, f"stamp up --only failed:\n{out}{err}"
        yield config, data_dirs
    finally:
        for d in data_dirs.values():
            if (d / "stamp.json").exists():
                LocalStamp.load(d).kill_all()


def _status(data_dir: Path) -> dict[str, dict[str, object]]:
    out = subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir", str(data_dir),
                          "status", "--json"], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    return {p["name"]: p for p in json.loads(out)["processes"]}


def test_a_stamp_on_three_hosts_survives_the_loss_of_one(
        three_hosts: tuple[Path, dict[str, Path]]) -> None:
    _, data_dirs = three_hosts
    first, second, _ = (LocalStamp.load(d) for d in data_dirs.values())
    # Each host started exactly its own processes, bound to its own address.
    for host, d in data_dirs.items():
        local = LocalStamp.load(d)
        started = {r.name for r in local.records.values() if r.pid}
        assert started == {n for n in local.records if local.config.host_of(n) == host}
        assert all(local.record(n).address.startswith(host + ":") for n in started)
    second.wait_healthy(timeout_s=UP_TIMEOUT_S)  # the whole stamp, seen from the 2nd host

    # Every process SERVING, seen through the health service (a Raft replica reports it once
    # its group has a leader it knows, which may come a moment after wait_healthy).
    every = {n: health.SERVING for n in second.records}
    deadline = time.monotonic() + UP_TIMEOUT_S
    while (seen := {n: p["health"] for n, p in _status(data_dirs[HOSTS[1]]).items()}) != every:
        assert time.monotonic() < deadline, seen
        time.sleep(0.2)

    with PartitionClient.from_stamp(str(data_dirs[HOSTS[1]])) as client:
        acknowledged = [client.append("acct", f"log-{i % 3}", [b"before %d" % i])
                        for i in range(30)]
        assert len(acknowledged) == 30

        # The first host goes: lock-1, sm-1, en-1..3, pm-1, ps-1 all SIGKILLed at once.
        for name, rec in first.records.items():
            if rec.pid:
                first.kill(name)
        status = _status(data_dirs[HOSTS[1]])
        dead = {n for n in first.records if first.config.host_of(n) == HOSTS[0]}
        assert {n for n, p in status.items() if p["health"] == health.UNREACHABLE} == dead

        deadline = time.monotonic() + FAILOVER_S
        while True:  # the stamp goes on once the PS and extents fail over
            try:
                client.append("acct", "log-0", [b"after"])
                break
            except StampError as exc:
                assert time.monotonic() < deadline, f"no append acknowledged since: {exc}"
                time.sleep(0.2)
        for log in ("log-0", "log-1", "log-2"):
            records = [data for _, data in client.read("acct", log, 0, 100)]
            assert records[:10] == [b"before %d" % i for i in range(30) if i % 3 == int(
                log[-1])]
