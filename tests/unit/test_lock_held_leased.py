"""An Acquire of a held lock is answered Held from the leader's state under its read lease,
without a Raft write (issue 29: a standby partition manager asked every 2 s, each ask a
write on three disks), exactly when the log would have answered Held (LockReplica.held_leased)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.process import free_port
from lock_service import commands as c
from lock_service import limits
from lock_service.replica import LockReplica

TTL_S = 10.0


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[LockReplica]:
    """A group of one: it leads at once, and a majority (itself) is always in contact."""
    address = f"127.0.0.1:{free_port()}"
    replica = LockReplica(address, [address], tmp_path / "raft", secret=b"s" * 32)
    try:
        deadline = time.monotonic() + 30
        while not replica.is_leader():
            assert time.monotonic() < deadline, "a group of one elects itself"
            time.sleep(0.01)
        yield replica
    finally:
        replica.close()


def apply(replica: LockReplica, command: c.Command) -> c.Result:
    done = threading.Event()
    outcome: list[c.Result] = []

    def settle(result: c.Result, error: int) -> None:
        assert error == 0, error
        outcome.append(result)
        done.set()

    replica.propose(command, settle)
    assert done.wait(30), f"{command} was not applied"
    return outcome[0]


def granted_lock(replica: LockReplica) -> tuple[int, int, float]:
    """(term, token, leader time) after a promoted leader granted `lock` to A."""
    term = replica.raftCurrentTerm
    now = apply(replica, c.Barrier(term)).now  # type: ignore[union-attr]
    replica.promote(term, limits.PROMOTE_EXTEND_S)
    granted = apply(replica, c.Acquire(now, "first", "lock", "A", TTL_S, term))
    assert isinstance(granted, c.Granted)
    return term, granted.token, now


def test_a_held_lock_is_answered_from_the_state(replica: LockReplica) -> None:
    term, token, now = granted_lock(replica)
    assert replica.held_leased(term, "lock", "another", now) == ("A", token)


def test_a_free_lock_goes_through_the_log(replica: LockReplica) -> None:
    term, _token, now = granted_lock(replica)
    assert replica.held_leased(term, "other-lock", "another", now) is None


def test_a_request_seen_before_gets_the_logs_answer(replica: LockReplica) -> None:
    term, _token, now = granted_lock(replica)
    assert replica.held_leased(term, "lock", "first", now) is None  # its Granted stands


def test_a_lease_whose_time_is_up_goes_through_the_log(replica: LockReplica) -> None:
    term, _token, now = granted_lock(replica)
    later = now + TTL_S + limits.PROMOTE_EXTEND_S + 1
    assert replica.held_leased(term, "lock", "another", later) is None  # Expire, then grant


def test_a_lessor_of_another_term_goes_through_the_log(replica: LockReplica) -> None:
    term, _token, now = granted_lock(replica)
    assert replica.held_leased(term + 1, "lock", "another", now) is None
    replica.demote()
    assert replica.held_leased(term, "lock", "another", now) is None
