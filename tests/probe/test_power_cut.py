"""Power cuts of a whole stamp (issue 15): every process stops at once and every write that no
fsync/fdatasync made durable is thrown away, file bytes and directory entries both (the lossy
FUSE file system of tools/lossyfs under the stamp's data directory). Then the stamp restarts
and the checker proves that nothing acknowledged was lost, changed or applied twice.

`--cuts N` (default 8, for make test's time; its chaos run cuts power too) sets how many
cuts the long test makes; the seed is printed and STAMP_SEED replays a schedule."""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable

import pytest

from partition_layer.client import PartitionClient
from tests.conftest import stamp_config
from tools.chaos.check import check
from tools.chaos.history import AccountView
from tools.chaos.workload import ACCOUNT, MixedWorkload
from tools.local_stamp import LocalStamp
from tools.lossyfs.mount import LossyMount, available, power_cut

pytestmark = pytest.mark.slow
log = logging.getLogger(__name__)

WHY_NOT = available()
needs_fuse = pytest.mark.skipif(WHY_NOT is not None, reason=f"no FUSE here: {WHY_NOT}")
LOAD_S = (0.3, 2.5)  # how long the load runs before each cut (seeded)
# Every cut ends every process, and the restart waits out the leases the lock service kept
# from before it (the PM's, the PS's session and partition lease): 1 s instead of 2 s and
# 1.5 s, as tests/probe/test_pm_split_merge.py runs them. Timers, not what the cut checks.
QUICK_RESTART = {"partition_lease_ttl_ms": 1000, "server_session_ttl_ms": 1000,
                 "manager_lease_ttl_ms": 1000}


@pytest.fixture
def lossy_stamp(lossy_stamp_factory: Callable[..., tuple[LocalStamp, LossyMount]]
                ) -> tuple[LocalStamp, LossyMount]:
    """A stamp (3 lock, 3 SM, 4 EN, 1 PM, 1 PS) whose data directory is a lossy mount, with
    QUICK_RESTART's leases."""
    return lossy_stamp_factory(stamp_config(4, 3, lock_servers=3, partition_managers=1,
                                            partition_servers=1, partition=QUICK_RESTART),
                               partition=QUICK_RESTART)


def cut_and_restart(stamp: LocalStamp, mount: LossyMount) -> dict[str, object]:
    report = power_cut(stamp.pids(), mount)
    stamp.forget_dead()
    started = time.monotonic()
    stamp.up()
    report["restart_s"] = round(time.monotonic() - started, 2)
    return report


def client_of(stamp: LocalStamp) -> PartitionClient:
    return PartitionClient([r.address for r in stamp.partition_managers()],
                           stamp.config.partition)


@needs_fuse
def test_an_acknowledged_write_survives_a_power_cut_and_an_unsynced_one_is_gone(
        lossy_stamp: tuple[LocalStamp, LossyMount]) -> None:
    """The harness itself: what the stamp acknowledged is there after the cut; a file the
    stamp never synced is not (so the cut really drops unsynced writes)."""
    stamp, mount = lossy_stamp
    with client_of(stamp) as client:
        first = client.append("acct", "orders", [b"a", b"b", b"c"])
        client.put("acct", "customers", b"\x00\x01", b"alice")
    stray = mount.mountpoint / "ps-1" / "never-synced"
    stray.write_bytes(b"gone after the cut")
    report = cut_and_restart(stamp, mount)
    assert not stray.exists(), report
    with client_of(stamp) as client:
        assert client.read("acct", "orders", first, 10) == \
            [(first, b"a"), (first + 1, b"b"), (first + 2, b"c")]
        assert client.get("acct", "customers", b"\x00\x01")[0] == b"alice"


@needs_fuse
@pytest.mark.power_cuts
def test_power_cuts_at_random_moments_under_a_mixed_load_lose_nothing_acknowledged(
        lossy_stamp: tuple[LocalStamp, LossyMount], request: pytest.FixtureRequest) -> None:
    stamp, mount = lossy_stamp
    cuts = request.config.getoption("--cuts")
    seed = int(os.environ.get("STAMP_SEED", random.randrange(1 << 32)))
    print(f"STAMP_SEED={seed} cuts={cuts}")
    rng = random.Random(seed)
    workload = MixedWorkload(lambda: AccountView(client_of(stamp), ACCOUNT), writers=3,
                             seed=seed)
    reports = []
    for cut in range(cuts):
        workload.start()
        ops_before = workload.ops()
        # The moment of the cut: a seeded random time into the load (this wait is the fault
        # schedule, not a wait for a condition).
        time.sleep(rng.uniform(*LOAD_S))
        report = cut_and_restart(stamp, mount)
        workload.stop()  # writers in flight at the cut retry onto the restarted stamp
        report["ops"] = workload.ops() - ops_before
        reports.append(report)
        log.info("cut %d: %s", cut + 1, report)
        with client_of(stamp) as client:
            checked = check(AccountView(client, ACCOUNT), workload.histories)
        print(f"cut {cut + 1}/{cuts}: {report['ops']} ops, dropped "
              f"{report['bytes_dropped']} bytes and {report['entries_dropped']} entries, "
              f"restart {report['restart_s']}s; checked {checked}")
    assert workload.ops() > cuts, "the load made no progress between cuts"
    assert sum(int(r["bytes_dropped"]) + int(r["entries_dropped"]) for r in reports) > 0, \
        "no cut dropped anything: the harness is not cutting"
