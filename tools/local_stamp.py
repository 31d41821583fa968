"""A stamp's processes on this machine (§9): start, stop, kill and restart them by name, and
record them in `<data dir>/stamp.json` (endpoints, names, pids) for clients and tools.

Used by `stamp up/down/status/kill/start`, by benchmarks, and by the probe tests, so all three
run exactly the same processes. Every process is handled by PID, never by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from common import durable_fs, faults, process, stamp_secret
from common.config import RaftMemberSpec, StampConfig, load_config
from common.errors import InvalidArgument, NotFound, Unavailable
from common.stamp_file import STAMP_FILE, read_stamp
from tools import dashboard, local_front_ends, local_tls, local_watch
from tools.process_record import ProcessRecord
from tools.progress import SILENT, Progress

KIND_EXTENT_NODE = "extent-node"
KIND_STREAM_MANAGER = "stream-manager"
KIND_LOCK = "lock"
KIND_PARTITION_MANAGER = "partition-manager"
KIND_PARTITION_SERVER = "partition-server"
KIND_FRONT_END = local_front_ends.KIND_FRONT_END
KIND_JOB_SCHEDULER = "job-scheduler"
ADMIN_ACCOUNT = "admin"
# `stamp up` writes the admin account's connection string here (mode 0600): the CLI uses it
# when no other is given.
ADMIN_CONNECTION_STRING_FILE = "admin-connection-string"
FAULTS_ENV_VAR = faults.RPC_ENV_VAR


class LocalStamp:
    def __init__(self, data_dir: str | Path, config: StampConfig,
                 config_path: str | None = None, faults: bool | None = None) -> None:
        """`faults`: its servers serve the Faults service and arm STAMP_FAULTS /
        STAMP_ISOLATE from their environment (tests, `stamp chaos`); None: as
        $STAMP_FAULTS_RPC says ("1": on), off otherwise. Decided when a process is planned:
        its command line keeps it across restarts."""
        self.data_dir = Path(data_dir).resolve()
        self.config = config
        self.config_path = config_path
        self.faults = faults if faults is not None else os.environ.get(FAULTS_ENV_VAR) == "1"
        self.tls = config.tls_enabled()  # a recorded stamp: as it was started (`load`)
        self.records: dict[str, ProcessRecord] = {}
        self._popens: dict[int, subprocess.Popen[bytes]] = {}

    # ---- the record -----------------------------------------------------------------------

    @property
    def stamp_file(self) -> Path:
        return self.data_dir / STAMP_FILE

    @classmethod
    def load(cls, data_dir: str | Path) -> LocalStamp:
        """The stamp recorded in `data_dir`, with the config it was started with."""
        raw = read_stamp(data_dir)
        stamp = cls(data_dir, load_config(raw.get("config")), raw.get("config"))
        stamp.tls = raw.get("tls") is not None
        stamp.records = {name: ProcessRecord(**rec) for name, rec in raw["processes"].items()}
        return stamp

    def save(self) -> None:
        durable_fs.make_dirs(self.data_dir)
        # Durable: after a power cut `stamp start` needs the ports the processes picked.
        durable_fs.replace_file(self.stamp_file, json.dumps({
            "data_dir": str(self.data_dir), "config": self.config_path,
            **local_tls.record(self),
            "processes": {name: asdict(rec) for name, rec in self.records.items()},
        }, indent=2).encode())

    def plan(self) -> None:
        """Decide every process's directory, ports and command line (once per data dir), each
        on its own host (`[hosts]`)."""
        self._plan_raft_group(KIND_LOCK, "lock", self.config.lock_servers,
                              lambda me, all_: ",".join(r for r, _ in all_ if r != me))
        self._plan_raft_group(KIND_STREAM_MANAGER, "stream-manager",
                              self.config.stream_managers,
                              lambda me, all_: ",".join(f"{r}={g}" for r, g in all_))
        sm_addresses = ",".join(r.address for r in self.stream_managers())
        for spec in self.config.extent_nodes:
            if spec.name in self.records:
                continue
            proc_dir = self.data_dir / spec.name
            host = self.config.host_of(spec.name)
            port = spec.port  # 0: bound by the node itself, then pinned (`_start_many`)
            argv = process.stamp_command(
                "serve", "extent-node", "--name", spec.name, "--dir", str(proc_dir),
                "--host", host, "--port", str(port), "--fault-domain", spec.fault_domain,
                "--upgrade-domain", spec.upgrade_domain)
            if spec.journal_dir:
                argv += ["--journal-dir", spec.journal_dir]
            if spec.witness_dir:
                argv += ["--witness-dir", spec.witness_dir]
            if sm_addresses:
                argv += ["--sm", sm_addresses]
            argv += self.server_flags()
            if self.config_path:
                argv += ["--config", self.config_path]
            self.records[spec.name] = ProcessRecord(
                spec.name, KIND_EXTENT_NODE, str(proc_dir), argv, address=f"{host}:{port}",
                fault_domain=spec.fault_domain, upgrade_domain=spec.upgrade_domain)

        self._plan_partition_layer(sm_addresses)
        self._plan_job_schedulers(sm_addresses)
        local_watch.plan(self)

    def _plan_partition_layer(self, sm_addresses: str) -> None:
        lock_addresses = ",".join(r.address for r in self.lock_servers())
        groups = ((KIND_PARTITION_MANAGER, self.config.partition_managers, ("--sm", sm_addresses)),
                  (KIND_PARTITION_SERVER, self.config.partition_servers, ("--sm", sm_addresses)))
        for kind, specs, extra in groups:
            for spec in specs:
                if spec.name in self.records:
                    continue
                if not lock_addresses or (kind == KIND_PARTITION_SERVER and not sm_addresses):
                    raise InvalidArgument(f"{spec.name} needs the lock service and the stream "
                                          f"managers in the same stamp")
                proc_dir = self.data_dir / spec.name
                host = self.config.host_of(spec.name)
                # Port 0: the process binds a free port itself (no window in which another
                # process can take it) and `_start_many` pins it for restarts.
                port = spec.port
                argv = process.stamp_command(
                    "serve", kind, "--name", spec.name, "--dir", str(proc_dir), "--host", host,
                    "--port", str(port), "--lock", lock_addresses, *extra,
                    *self.server_flags())
                if self.config_path:
                    argv += ["--config", self.config_path]
                self.records[spec.name] = ProcessRecord(spec.name, kind, str(proc_dir), argv,
                                                        address=f"{host}:{port}")

    def _plan_job_schedulers(self, sm_addresses: str) -> None:
        """The job schedulers (spark/scheduler.py), on a stamp with a lock service (their
        lease) and stream managers (the jobs' items); they find the rest in stamp.json."""
        lock_addresses = ",".join(r.address for r in self.lock_servers())
        if not (lock_addresses and sm_addresses):
            return
        for spec in self.config.job_schedulers:
            if spec.name in self.records:
                continue
            proc_dir = self.data_dir / spec.name
            host = self.config.host_of(spec.name)
            argv = process.stamp_command(
                "serve", KIND_JOB_SCHEDULER, "--name", spec.name, "--dir", str(proc_dir),
                "--host", host, "--port", str(spec.port), "--lock", lock_addresses,
                "--sm", sm_addresses, "--data-dir", str(self.data_dir), *self.server_flags())
            if self.config_path:
                argv += ["--config", self.config_path]
            self.records[spec.name] = ProcessRecord(spec.name, KIND_JOB_SCHEDULER,
                                                    str(proc_dir), argv,
                                                    address=f"{host}:{spec.port}")

    def plan_front_ends(self) -> None:
        """Front ends, once the partition managers have their addresses (they may pick their
        ports at first start). A stamp without a partition layer has no front ends."""
        local_front_ends.plan(self)
        local_watch.plan(self)

    def _plan_raft_group(self, kind: str, serve: str, specs: Sequence[RaftMemberSpec],
                         peers_arg: Callable[[str, list[tuple[str, str]]], str]) -> None:
        """Plan a Raft group's replicas: ports fixed once (the peers must know them), and
        `--peers` as `peers_arg(my raft address, [(raft, grpc) of every member])` says."""
        new = [spec for spec in specs if spec.name not in self.records]
        if not new:
            return
        if len(new) != len(specs):
            raise InvalidArgument(f"a Raft group's membership is fixed: cannot add {kind} "
                                  f"replicas to an existing stamp")
        host_of = self.config.host_of
        ports = {spec.name: (spec.port or process.free_port(host_of(spec.name)),
                             spec.raft_port or process.free_port(host_of(spec.name)))
                 for spec in new}
        members = [(f"{host_of(name)}:{raft}", f"{host_of(name)}:{port}")
                   for name, (port, raft) in ports.items()]
        for spec in new:
            host = host_of(spec.name)
            port, raft_port = ports[spec.name]
            proc_dir = self.data_dir / spec.name
            raft_address = f"{host}:{raft_port}"
            argv = process.stamp_command(
                "serve", serve, "--name", spec.name, "--dir", str(proc_dir), "--host", host,
                "--port", str(port), "--raft-port", str(raft_port),
                "--peers", peers_arg(raft_address, members), *self.server_flags())
            if self.config_path and kind == KIND_STREAM_MANAGER:
                argv += ["--config", self.config_path]
            self.records[spec.name] = ProcessRecord(
                spec.name, kind, str(proc_dir), argv, address=f"{host}:{port}",
                extra={"raft_address": raft_address})

    def server_flags(self) -> list[str]:
        """What every server of this stamp is started with besides its own options."""
        return ["--faults-rpc"] * self.faults + local_tls.server_flags(self)

    def wait_healthy(self, timeout_s: float = 30.0, progress: Progress = SILENT) -> None:
        """Wait until the lock service has a leader, the stream managers have a leader that
        knows every live extent node, and (with a partition layer) every partition is
        served; each wait is a phase of `progress`."""
        if self.lock_servers():
            progress.phase("waiting for the lock service to elect a leader")
        self._wait_lock_leader(timeout_s)
        if not self.stream_managers():
            return
        progress.phase("waiting for the stream managers to see every extent node")
        self._wait_stream_managers(timeout_s)
        if self.partition_managers() and self.partition_servers():
            progress.phase("waiting until every partition is served")
            self.wait_partitions_served(timeout_s)
        if self.front_ends():
            progress.phase("waiting for the front ends to answer")
            self.wait_front_ends(timeout_s)

    def wait_front_ends(self, timeout_s: float = 30.0) -> None:
        """Wait until every live front end answers Status."""
        local_front_ends.wait_answering(self, timeout_s)

    def wait_partitions_served(self, timeout_s: float = 30.0) -> None:
        """Wait until every partition of the map is served by a live partition server."""
        from partition_layer.client import PartitionClient

        with PartitionClient([r.address for r in self.partition_managers()],
                             self.config.partition) as client:
            client.wait_served(timeout_s)

    def _wait_stream_managers(self, timeout_s: float) -> None:
        import asyncio

        from stream_layer.sm_client import AsyncStreamManagerClient

        async def check() -> None:
            client = AsyncStreamManagerClient([r.address for r in self.stream_managers()],
                                              self.config.stream_manager)
            deadline = time.monotonic() + timeout_s
            wanted = {r.name for r in self.extent_nodes() if self.alive(r.name)}
            try:
                while True:
                    try:
                        nodes = await client.list_nodes()
                        if wanted <= {n.name for n in nodes if n.state == "alive"}:
                            return
                    except Unavailable:
                        pass
                    if time.monotonic() > deadline:
                        raise Unavailable(f"the stream manager did not see every extent node "
                                          f"within {timeout_s:g}s")
                    await asyncio.sleep(0.05)
            finally:
                await client.close()
        asyncio.run(check())

    def _wait_lock_leader(self, timeout_s: float) -> None:
        members = self.lock_servers()
        if not members:
            return
        from lock_service.client import LockClient

        client = LockClient([r.address for r in members], holder="stamp-up")
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                for rec in members:
                    try:
                        if client.status(rec.address, timeout_s=0.5).role == "leader":
                            return
                    except Unavailable:
                        continue
                if time.monotonic() > deadline:
                    raise Unavailable(f"the lock service elected no leader within "
                                      f"{timeout_s:g}s")
                time.sleep(0.05)
        finally:
            client.close()

    # ---- processes ------------------------------------------------------------------------

    def up(self, only: str | None = None, progress: Progress = SILENT) -> list[str]:
        """Start every process that is not running (front ends after the partition layer,
        whose addresses they are given); with front ends, make sure the admin account exists
        and its connection string is in the data directory; write the Prometheus scrape
        configuration (`local_watch`). Return the names started.

        `only`: start just the processes of that host (`[hosts]`), each until it serves, and
        wait for nothing else: the rest of the stamp may not be up yet (the other hosts run
        `stamp up --only` themselves). A later `up()` waits for the whole stamp.
        `progress` is told each step, and each process as it is ready."""
        if only is not None and only not in self.hosts():
            raise InvalidArgument(f"no process of the stamp runs on host {only!r}; its hosts "
                                  f"are {', '.join(self.hosts())}")
        self.plan()

        def here(names: list[str]) -> list[str]:
            return [n for n in names if only is None or self.config.host_of(n) == only]
        started = here(self._not_running())
        # New front ends are planned only once the partition managers run; counted from the
        # config meanwhile (local_front_ends.plan's rule), the bar's total is right at once.
        new_front_ends = [spec.name for spec in self.config.front_ends
                          if spec.name not in self.records] \
            if self.lock_servers() and self.partition_managers() else []
        total = len(started) + len(here(new_front_ends))
        if total:
            progress.phase(f"starting {total} processes", total=total)
        self._start_many(started, progress=progress)
        self.plan_front_ends()
        front_ends = [name for name in here(self._not_running()) if name not in started]
        self._start_many(front_ends, progress=progress)
        if only is None:
            self.wait_healthy(progress=progress)
            if self.front_ends() and self.lock_servers():
                progress.phase("making sure the admin account exists")
                self.ensure_admin_account()
        local_watch.write_scrape_config(self)
        dashboard.write_dashboard(self.data_dir)  # Grafana's view of those metrics
        return started + front_ends

    def hosts(self) -> list[str]:
        """The hosts the stamp's processes run on, in order of first appearance."""
        return list(dict.fromkeys(self.config.host_of(name)
                                  for name in self.config.fixed_ports()))

    def _not_running(self) -> list[str]:
        return [name for name, rec in self.records.items()
                if not (rec.pid and process.is_alive(rec.pid))]

    @property
    def admin_connection_string_file(self) -> Path:
        return self.data_dir / ADMIN_CONNECTION_STRING_FILE

    def ensure_admin_account(self) -> str:
        """Create the admin account unless it exists (then keep its keys) and write its
        connection string, naming every front end, to `admin_connection_string_file`
        (mode 0600, durably); return it."""
        return local_front_ends.ensure_admin_account(self, ADMIN_ACCOUNT,
                                                     self.admin_connection_string_file)

    def start(self, name: str, env: dict[str, str] | None = None,
              progress: Progress = SILENT) -> None:
        rec = self.record(name)
        if rec.pid and process.is_alive(rec.pid):
            raise InvalidArgument(f"{name} is already running (pid {rec.pid})")
        progress.phase(f"starting {name}, waiting until it is ready")
        self._start_many([name], env, progress)

    def secret_file(self) -> Path:
        """The stamp secret's file (common/stamp_secret.py), which the Raft replicas are
        given: made if missing on a stamp of one machine (a stamp recorded before it had one
        gets one too); a stamp across hosts (`[hosts]`) needs the same copy on every host."""
        return stamp_secret.ensure(self.data_dir, may_make=not self.config.hosts)

    def _start_many(self, names: Sequence[str], env: dict[str, str] | None = None,
                    progress: Progress = SILENT) -> None:
        raft = [name for name in names
                if self.records[name].kind in (KIND_LOCK, KIND_STREAM_MANAGER)]
        secret = self.secret_file() if raft else None
        for name in raft:
            rec = self.records[name]
            rec.argv = stamp_secret.with_arg(rec.argv, str(secret))
        local_tls.ensure_certificates(self, names)
        for name in names:
            rec = self.records[name]
            popen = process.spawn(rec.argv, rec.dir, env)
            self._popens[popen.pid] = popen
            rec.pid = popen.pid
        self.save()
        timeout_s = self.config.extent_node.start_timeout_ms / 1000.0
        for name in names:
            rec = self.records[name]
            ready = process.wait_ready(rec.dir, rec.pid, timeout_s, self._popens.get(rec.pid))
            rec.address = ready.address
            if "--port" in rec.argv:  # a port the process picked itself: keep it from now on
                at = rec.argv.index("--port") + 1
                if rec.argv[at] == "0":
                    rec.argv[at] = ready.address.rpartition(":")[2]
            if rec.kind == KIND_FRONT_END:
                local_front_ends.record_http(rec)
            progress.advance(text=f"{name} ready on {rec.address}")
        self.save()
        local_tls.trust(self)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send `sig` (SIGKILL by default) to the process and wait until it is gone."""
        rec = self.record(name)
        if rec.pid:
            process.kill(rec.pid, sig)
            popen = self._popens.pop(rec.pid, None)
            if popen is not None:
                popen.wait(timeout=10)

    def down(self, grace_s: float = 10.0, progress: Progress = SILENT) -> list[str]:
        """Stop every process: SIGTERM, then SIGKILL whatever is still there after grace_s;
        `progress` counts them as they go."""
        running = [rec for rec in self.records.values() if rec.pid and process.is_alive(rec.pid)]
        if running:
            progress.phase(f"stopping {len(running)} processes (SIGTERM)", total=len(running))
        for rec in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(rec.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for rec in running:
            while process.is_alive(rec.pid) and time.monotonic() < deadline:
                self._reap(rec.pid)
                time.sleep(0.02)
            killed = process.is_alive(rec.pid)
            if killed:
                process.kill(rec.pid)
            self._reap(rec.pid)
            progress.advance(text=f"{rec.name} {'killed (SIGKILL)' if killed else 'stopped'}")
        for rec in self.records.values():
            rec.pid = 0
        if self.records:
            self.save()
        return [rec.name for rec in running]

    def pids(self) -> list[int]:
        """The pids of every process started and not known to be gone."""
        return [rec.pid for rec in self.records.values() if rec.pid]

    def forget_dead(self) -> list[str]:
        """Reap every process that died (killed from outside, a power cut) and mark it
        stopped, so that `up()` starts it again; return their names."""
        dead = []
        for rec in self.records.values():
            if rec.pid and not process.is_alive(rec.pid):
                self._reap(rec.pid)
                rec.pid = 0
                dead.append(rec.name)
        return dead

    def kill_all(self) -> None:
        """SIGKILL every process (test teardown: nothing must outlive the test)."""
        for name, rec in self.records.items():
            if rec.pid:
                with contextlib.suppress(Unavailable):
                    self.kill(name)

    def _reap(self, pid: int) -> None:
        popen = self._popens.get(pid)
        if popen is not None and popen.poll() is not None:
            del self._popens[pid]

    # ---- queries --------------------------------------------------------------------------

    def record(self, name: str) -> ProcessRecord:
        rec = self.records.get(name)
        if rec is None:
            raise NotFound(f"no process named {name!r}; the stamp has "
                           f"{', '.join(sorted(self.records, key=_name_key))}")
        return rec

    def address(self, name: str) -> str:
        return self.record(name).address

    def alive(self, name: str) -> bool:
        rec = self.record(name)
        return bool(rec.pid) and process.is_alive(rec.pid)

    def extent_nodes(self) -> list[ProcessRecord]:
        return self._of_kind(KIND_EXTENT_NODE)

    def stream_managers(self) -> list[ProcessRecord]:
        return self._of_kind(KIND_STREAM_MANAGER)

    def lock_servers(self) -> list[ProcessRecord]:
        return self._of_kind(KIND_LOCK)

    def partition_managers(self) -> list[ProcessRecord]:
        return self._of_kind(KIND_PARTITION_MANAGER)

    def partition_servers(self) -> list[ProcessRecord]:
        return self._of_kind(KIND_PARTITION_SERVER)

    def front_ends(self) -> list[ProcessRecord]:
        return self._of_kind(KIND_FRONT_END)

    def job_schedulers(self) -> list[ProcessRecord]:
        return self._of_kind(KIND_JOB_SCHEDULER)

    def _of_kind(self, kind: str) -> list[ProcessRecord]:
        return sorted((r for r in self.records.values() if r.kind == kind),
                      key=lambda r: _name_key(r.name))

    def name_of(self, address: str) -> str:
        for rec in self.records.values():
            if rec.address == address:
                return rec.name
        raise NotFound(f"no process at {address}")


def _name_key(name: str) -> tuple[str, int]:
    prefix, _, number = name.rpartition("-")
    return (prefix, int(number)) if number.isdigit() else (name, 0)
