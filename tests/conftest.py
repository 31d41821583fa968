"""Shared fixtures. Processes a test starts are killed by PID in the fixture's finalizer.

hypothesis is imported here, at collection: its pytest plugin otherwise imports it lazily in
the terminal summary, where CPython 3.11.7's parser fails with "AST constructor recursion
depth mismatch" (a CPython bug, fixed in 3.11.8) and the run ends in a traceback."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import random
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import hypothesis  # noqa: F401
import pytest

from common.config import (
    ExtentNodeSpec,
    ProcessSpec,
    RaftMemberSpec,
    StampConfig,
    StreamManagerSpec,
    default_config,
)
from common.process import PORT_RANGE_ENV_VAR
from common.process import port_range as process_port_range
from lock_service.client import LockClient
from lock_service.group import LocalLockGroup
from tests.support.locks import CALL_TIMEOUT_S
from tools.local_stamp import FAULTS_ENV_VAR, LocalStamp
from tools.lossyfs.mount import LossyMount

# Probe tests arm fault points through the Faults service, which a server serves only when
# started with it: every local stamp and lock group a test starts (also through the `stamp`
# CLI, which inherits this) serves it unless the test says otherwise.
os.environ.setdefault(FAULTS_ENV_VAR, "1")

# Spark drivers the tests start (a test's session, `stamp job` and `stamp demo`, the job
# scheduler's runs: all inherit this) run their JVM with the C1 compiler only, and so do
# their executors on a standalone cluster (tests/spark_cluster.py): it starts in 4-5 s
# instead of 6.5-9 s on this 2-core machine, and a test's jobs are too short for C2's
# faster code to pay that back. Nothing checks how the JVM compiles; pyspark passes these
# arguments to spark-submit ("pyspark-shell" is its default).
os.environ.setdefault("PYSPARK_SUBMIT_ARGS",
                      "--driver-java-options=-XX:TieredStopAtLevel=1 "
                      "--conf spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1 "
                      "pyspark-shell")


# Parallel runs (`make test`: pytest-xdist): each worker's stamps pick their Raft and metrics
# ports from a slice of common.process's range of their own, so two workers never pick the
# same port (the processes a test starts, CLI included, inherit the variable).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    _low, _high = process_port_range()
    _slice = (_high - _low) // max(1, int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    _first = _low + int(_WORKER[2:]) * _slice
    os.environ[PORT_RANGE_ENV_VAR] = f"{_first}-{_first + _slice}"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cuts", type=int, default=8,
                     help="power cuts the long power-cut test makes (default 8)")


CUT_TIMEOUT_S = 30  # the time bound of the power-cut test grows with its cuts


# Parallel runs (`make test`: pytest-xdist, --dist loadscope, with the scheduler below). Every
# module is a unit of its own (its tests, and its module-scoped stamps, on one worker), except
# the heavy ones: whole stamps under load, power cuts, chaos, Spark JVMs. On a 2-core machine
# two of those at once starve each other's processes past their start and answer deadlines,
# so they form one unit, run one after another on one worker while the others run the rest.
# They go first (the longest chain), then the next longest modules. Only where and in what
# order tests run depends on these lists, never what runs.
HEAVY_MODULES = (
    "tests/probe/test_power_cut.py",
    "tests/probe/test_split_merge.py",
    "tests/probe/test_chaos.py",
    "tests/probe/test_gc_release.py",
    "tests/probe/test_gc_disk.py",
    "tests/probe/test_spark_gc.py",
    "tests/probe/test_spark_ec.py",
    "tests/probe/test_spark_cluster.py",
    "tests/probe/test_spark_datasource.py",
    "tests/probe/test_spark_scrub.py",
    "tests/probe/test_job_scheduler.py",
)
LONG_MODULES_FIRST = (
    *HEAVY_MODULES,
    "tests/probe/test_cli_front_end.py",
    "tests/probe/test_cli.py",
    "tests/probe/test_pm_split_merge.py",
    "tests/probe/test_cli_progress.py",
    "tests/probe/test_sdk.py",
    "tests/probe/test_azure_blob.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("power_cuts"):
            item.add_marker(pytest.mark.timeout(120 + CUT_TIMEOUT_S * config.getoption("--cuts")))
    rank = {name: at for at, name in enumerate(LONG_MODULES_FIRST)}
    # A stable sort: each module's tests stay together and in their order.
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


if importlib.util.find_spec("xdist") is not None:
    from xdist.scheduler import LoadScopeScheduling

    class _ModuleScheduling(LoadScopeScheduling):
        """--dist loadscope with HEAVY_MODULES as one unit. (Not xdist_group marks and
        --dist loadgroup: xdist 3.8 renames items for it in a way pytest 9.2's node ids no
        longer show, so every test was a unit of its own.)"""

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "heavy" if module in HEAVY_MODULES else module

    def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
        if config.getvalue("dist") != "loadscope":
            return None
        return _ModuleScheduling(config, log)  # type: ignore[arg-type]


def stamp_config(extent_nodes: int, stream_managers: int = 0,
                 extent_node: dict[str, int] | None = None,
                 stream_manager: dict[str, int] | None = None,
                 lock_servers: int = 0, partition_managers: int = 0,
                 partition_servers: int = 0,
                 partition: dict[str, int] | None = None, front_ends: int = 0,
                 front_end: dict[str, float] | None = None,
                 partition_manager: dict[str, float] | None = None,
                 job_schedulers: int = 0) -> StampConfig:
    """`extent_nodes` ENs in 3 fault domains (round robin), `stream_managers` SMs,
    `lock_servers` lock replicas, PMs, PSs, front ends and job schedulers (none unless
    asked: a test's jobs run when it says), on free ports, with limits overridden. The PM's
    balancing pass is off unless `partition_manager` turns it on: a test that does not ask
    for splits and moves gets none; the SMs commit quickly (SM_QUICK_COMMITS). The processes
    read the same from `config_toml`."""
    base = default_config()
    return dataclasses.replace(
        base,
        partition_manager=dataclasses.replace(base.partition_manager,
                                              **pm_settings(partition_manager)),
        extent_node=dataclasses.replace(base.extent_node, **(extent_node or {})),
        stream_manager=dataclasses.replace(base.stream_manager,
                                           **sm_settings(stream_manager)),
        partition=dataclasses.replace(base.partition, **(partition or {})),
        front_end=dataclasses.replace(base.front_end, **(front_end or {})),
        front_ends=tuple(ProcessSpec(f"fe-{i}", 0) for i in range(1, front_ends + 1)),
        partition_managers=tuple(ProcessSpec(f"pm-{i}", 0)
                                 for i in range(1, partition_managers + 1)),
        partition_servers=tuple(ProcessSpec(f"ps-{i}", 0)
                                for i in range(1, partition_servers + 1)),
        extent_nodes=tuple(ExtentNodeSpec(f"en-{i}", f"fd-{(i - 1) % 3 + 1}", f"ud-{i}", 0)
                           for i in range(1, extent_nodes + 1)),
        stream_managers=tuple(StreamManagerSpec(f"sm-{i}", 0, 0)
                              for i in range(1, stream_managers + 1)),
        lock_servers=tuple(RaftMemberSpec(f"lock-{i}", 0, 0)
                           for i in range(1, lock_servers + 1)),
        job_schedulers=tuple(ProcessSpec(f"jobs-{i}", 0)
                             for i in range(1, job_schedulers + 1)))


BALANCING_OFF = {"balance_interval_s": 0}
# A one-replica stream manager group (most test stamps) commits a command only at its
# leader's next heartbeat: every stream creation, rollover and seal waited up to 250 ms (the
# default), and a partition's first load, a dozen of them, 2-3 s. Test stamps heartbeat every
# 50 ms (commits in ~50 ms; an idle 3-replica group costs ~2% of a core more): a stamp is up
# ~1.5 s sooner, splits and merges seal and commit sooner. Elections are as before (their
# timeouts are unchanged: 0.8-1.6 s, over three heartbeats either way). A test may set its own.
SM_QUICK_COMMITS = {"raft_heartbeat_interval_ms": 50}


def pm_settings(partition_manager: dict[str, float] | None) -> dict[str, float]:
    """The partition manager settings of a test stamp: balancing off unless asked for."""
    return {**BALANCING_OFF, **(partition_manager or {})}


def sm_settings(stream_manager: dict[str, int] | dict[str, float] | None
                ) -> dict[str, float]:
    """The stream manager settings of a test stamp: quick commits unless asked otherwise."""
    return {**SM_QUICK_COMMITS, **(stream_manager or {})}


def config_toml(partition_manager: dict[str, float] | None = None,
                **sections: dict[str, int] | dict[str, float] | None) -> str:
    """A test stamp's config file: the given sections, and always `[partition_manager]`
    (balancing off unless `partition_manager` says otherwise) and `[stream_manager]` (quick
    commits: SM_QUICK_COMMITS); no job schedulers (a `stamp up` on the test's stamp plans
    none either)."""
    sections = {**sections, "partition_manager": pm_settings(partition_manager),
                "stream_manager": sm_settings(sections.get("stream_manager"))}
    return "job_schedulers = []\n" + "".join(
        f"[{name}]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in values.items())
        for name, values in sections.items() if values)


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return f'"{value}"' if isinstance(value, str) else str(value)


# pysyncobj's cry when a follower deletes entries it has applied: committed entries out of
# its log (common/raft_append.py prevents it); whatever a test did, it must never be seen.
APPLIED_TRUNCATION = "truncating already-applied log entries"


def check_raft_logs(root: Path) -> None:
    """Fail if a Raft replica (lock service, stream manager) whose log lies under `root`
    deleted applied entries: read once its processes have stopped."""
    found = [f"{path.parent.name}: {line.strip()}"
             for pattern in ("*/server.log", "*/*/server.log", "*/*/*/server.log")
             for path in sorted(root.glob(pattern))
             for line in path.read_text(errors="replace").splitlines()
             if APPLIED_TRUNCATION in line]
    if found:
        pytest.fail("a Raft follower deleted applied entries:\n" + "\n".join(found[:5]))


@pytest.fixture(autouse=True)
def raft_logs_clean(tmp_path: Path) -> Iterator[None]:
    """Every test's processes (stamps, lock groups, stream managers under its tmp_path)
    are checked by `check_raft_logs` after the test's own fixtures stopped them."""
    yield
    check_raft_logs(tmp_path)


@contextlib.contextmanager
def module_stamp(factory: pytest.TempPathFactory, name: str,
                 partition: dict[str, int] | None = None, *,
                 front_end: dict[str, float] | None = None, faults: bool | None = None,
                 **shape: int) -> Iterator[LocalStamp]:
    """A started stamp for a module's tests (`shape`: stamp_config's counts), its partition
    and front-end limits also in its config file (which the processes and the CLI read);
    `faults`: as LocalStamp's. Killed by PID on exit, then its Raft logs are checked."""
    root: Path = factory.mktemp(name)
    config = stamp_config(partition=partition, front_end=front_end,
                          **shape)  # type: ignore[arg-type]
    (root / "stamp.toml").write_text(config_toml(partition=partition, front_end=front_end))
    local = LocalStamp(root / "stamp", config, str(root / "stamp.toml"), faults=faults)
    try:
        local.up()
        yield local
    finally:
        local.kill_all()
    check_raft_logs(local.data_dir)


@pytest.fixture
def stamp_factory(tmp_path: Path) -> Iterator[Callable[..., LocalStamp]]:
    """Start a local stamp: factory(extent_nodes=3, stream_managers=0, extent_node={limits},
    stream_manager={limits}, lock_servers=0, partition_managers=0, partition_servers=0,
    partition={limits}, front_ends=0, front_end={limits}, partition_manager={settings}:
    balancing is off unless given) -> LocalStamp, started and
    healthy (with front ends: the admin account made, its connection string in
    `stamp.admin_connection_string_file`)."""
    stamps: list[LocalStamp] = []

    def make(extent_nodes: int = 3, stream_managers: int = 0,
             extent_node: dict[str, int] | None = None,
             stream_manager: dict[str, int] | None = None, lock_servers: int = 0,
             partition_managers: int = 0, partition_servers: int = 0,
             partition: dict[str, int] | None = None, front_ends: int = 0,
             front_end: dict[str, float] | None = None,
             partition_manager: dict[str, float] | None = None) -> LocalStamp:
        config = stamp_config(extent_nodes, stream_managers, extent_node, stream_manager,
                              lock_servers, partition_managers, partition_servers, partition,
                              front_ends, front_end, partition_manager)
        config_path = tmp_path / f"stamp-{len(stamps)}.toml"
        config_path.write_text(config_toml(extent_node=extent_node,
                                           stream_manager=stream_manager,
                                           partition=partition, front_end=front_end,
                                           partition_manager=partition_manager))
        stamp = LocalStamp(tmp_path / f"stamp-{len(stamps)}", config, str(config_path))
        stamps.append(stamp)
        stamp.up()
        return stamp

    yield make
    for stamp in stamps:
        stamp.kill_all()


@pytest.fixture
def front_end_stamp(stamp_factory: Callable[..., LocalStamp]) -> LocalStamp:
    """A small whole stamp with two front ends (fe-1, fe-2): 3 ENs, 1 SM, 3 lock replicas,
    1 PM, 2 PSs. `stamp up` made the admin account: see `admin_connection_string`."""
    return stamp_factory(3, 1, lock_servers=3, partition_managers=1, partition_servers=2,
                         front_ends=2)


@pytest.fixture
def admin_connection_string(front_end_stamp: LocalStamp) -> str:
    """The admin account's connection string naming both front ends of `front_end_stamp`."""
    return front_end_stamp.admin_connection_string_file.read_text().strip()


@pytest.fixture
def lock_group(tmp_path: Path) -> Iterator[LocalLockGroup]:
    """A started three-replica lock group (lock_service.group) under tmp_path. On exit every
    replica it started is sent SIGCONT (a test may have frozen one with SIGSTOP) and then
    SIGKILLed and reaped by PID; the replicas' log tails are printed (shown on failure)."""
    group = LocalLockGroup(tmp_path / "lock")
    try:
        group.start_all()
        yield group
    finally:
        for replica in group.replicas.values():
            if replica.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(replica.pid, signal.SIGCONT)
        group.stop()
        print(group.log_tails())


@pytest.fixture
def make_client(lock_group: LocalLockGroup) -> Iterator[Callable[[str], LockClient]]:
    """make(holder) -> a LockClient of lock_group for that holder, closed at the end."""
    clients: list[LockClient] = []

    def make(holder: str) -> LockClient:
        clients.append(lock_group.client(holder, call_timeout_s=CALL_TIMEOUT_S))
        return clients[-1]

    yield make
    for client in clients:  # before the lock_group's finalizer kills the replicas
        client.close()


@pytest.fixture
def lossy_stamp_factory(tmp_path: Path
                        ) -> Iterator[Callable[..., tuple[LocalStamp, LossyMount]]]:
    """A stamp whose data directory is a lossy mount (tools/lossyfs), for power cuts:
    factory(config, extent_node={limits}, partition={limits}) -> (LocalStamp started,
    LossyMount); the limits go to the config file the servers read. Process logs survive
    cuts (a failed test can be read); the config file lies outside the mount."""
    made: list[tuple[LocalStamp, LossyMount]] = []

    def make(config: StampConfig, extent_node: dict[str, int] | None = None,
             partition: dict[str, int] | None = None) -> tuple[LocalStamp, LossyMount]:
        config_path = tmp_path / f"lossy-{len(made)}.toml"
        config_path.write_text(config_toml(extent_node=extent_node, partition=partition))
        mount = LossyMount(tmp_path / f"backing-{len(made)}", tmp_path / f"lossy-{len(made)}",
                           always_durable=("server.log",))
        mount.start()
        stamp = LocalStamp(mount.mountpoint, config, str(config_path))
        made.append((stamp, mount))
        stamp.up()
        return stamp, mount

    yield make
    for stamp, mount in made:
        stamp.kill_all()
        mount.close()


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    """Seeded randomness; the seed is printed so a failure can be replayed (STAMP_SEED=...)."""
    seed = int(os.environ.get("STAMP_SEED", random.randrange(1 << 32)))
    print(f"STAMP_SEED={seed} for {request.node.nodeid}")
    return random.Random(seed)
