"""The lock service's expiry pass sleeps until the next lease is due (lock_service/server.py
`expiry_wait`, issue 29), within bounds that keep expiries prompt."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.process import free_port
from common.raft import RaftTuning
from lock_service import commands as c
from lock_service import limits
from lock_service.replica import LockReplica
from lock_service.server import EXPIRY_CHECK_MAX_S, EXPIRY_CHECK_MIN_S, expiry_wait
from tests.support.waiting import wait_until


def test_sleeps_until_the_next_expiry() -> None:
    assert expiry_wait(100.0, 100.05) == pytest.approx(0.05)


def test_no_lease_or_a_far_one_waits_the_longest_wait() -> None:
    assert expiry_wait(100.0, None) == EXPIRY_CHECK_MAX_S
    assert expiry_wait(100.0, 160.0) == EXPIRY_CHECK_MAX_S


def test_a_due_or_overdue_lease_is_looked_at_again_soon_not_in_a_busy_loop() -> None:
    assert expiry_wait(100.0, 99.0) == EXPIRY_CHECK_MIN_S
    assert expiry_wait(100.0, 100.001) == EXPIRY_CHECK_MIN_S


def test_the_longest_wait_is_longer_than_a_lease_so_a_grant_must_wake_the_pass() -> None:
    # The longest wait may outlast the shortest lease: what keeps a lease granted during a
    # wait from expiring late is that its grant wakes the pass (the tests below).
    assert EXPIRY_CHECK_MAX_S > limits.TTL_MIN_S


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[LockReplica]:
    """A group of one: it leads at once."""
    address = f"127.0.0.1:{free_port()}"
    replica = LockReplica(address, [address], tmp_path / "raft", secret=b"s" * 32)
    try:
        wait_until(replica.is_leader, 30.0, "the replica leads")
        yield replica
    finally:
        replica.close()


def apply(replica: LockReplica, command: c.Command) -> c.Result:
    done = threading.Event()
    outcome: list[tuple[c.Result, int]] = []

    def settle(result: c.Result, error: int) -> None:
        outcome.append((result, error))
        done.set()

    replica.propose(command, settle)
    assert done.wait(30), f"{command} was not applied"
    result, error = outcome[0]
    assert error == 0, error
    return result


def test_a_grant_wakes_the_expiry_pass(replica: LockReplica) -> None:
    wakes: list[None] = []
    replica.on_lease_granted(lambda: wakes.append(None))
    term = replica.raftCurrentTerm
    apply(replica, c.Barrier(term))
    apply(replica, c.Get("k"))
    assert not wakes  # nothing granted: the pass sleeps on
    apply(replica, c.Acquire(0.0, "r1", "lock", "holder", limits.TTL_MIN_S, term))
    assert len(wakes) == 1
    apply(replica, c.OpenSession(0.0, "r2", "holder", limits.TTL_MIN_S, term))
    assert len(wakes) == 2


def test_a_role_change_wakes_the_expiry_pass(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    replica = LockReplica(address, [address], tmp_path / "raft", RaftTuning(tick_thread=False),
                          secret=b"s" * 32)
    roles: list[bool] = []
    replica.on_role_change(roles.append)
    try:
        deadline = time.monotonic() + 30
        while not replica.is_leader():
            assert time.monotonic() < deadline, "a group of one elects itself"
            replica.doTick(0.01)
    finally:
        replica.destroy()  # no tick thread to stop
    assert roles[-1] is True  # heard when it took office


