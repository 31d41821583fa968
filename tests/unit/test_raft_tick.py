"""The tick thread's poll timeout (common/raft.py `tick_wait`, issue 29): a replica waits for
its next timer instead of waking every 50 ms, and never spins on a timer it cannot act on."""

from __future__ import annotations

import pytest

from common.raft import tick_wait

HEARTBEAT_S = 0.075
MAX_S = 0.5


def wait(*, now: float, leader: bool, heartbeat_at: float = 0.0,
         election_at: float = 0.0) -> float:
    return tick_wait(now=now, leader=leader, next_heartbeat_at=heartbeat_at,
                     election_deadline=election_at, heartbeat_interval_s=HEARTBEAT_S,
                     max_s=MAX_S)


def test_a_leader_waits_until_its_next_heartbeat() -> None:
    assert wait(now=10.0, leader=True, heartbeat_at=10.06, election_at=99.0) \
        == pytest.approx(0.06)


def test_a_follower_waits_until_its_election_deadline() -> None:
    assert wait(now=10.0, leader=False, heartbeat_at=0.0, election_at=10.3) \
        == pytest.approx(0.3)


def test_never_longer_than_the_cap() -> None:
    assert wait(now=10.0, leader=False, election_at=1000.0) == MAX_S
    assert wait(now=10.0, leader=True, heartbeat_at=1000.0) == MAX_S


def test_a_due_timer_it_could_not_act_on_is_retried_after_a_heartbeat_not_spun_on() -> None:
    # A follower with no peer connected keeps an election deadline in the past.
    assert wait(now=10.0, leader=False, election_at=9.0) == HEARTBEAT_S
    assert wait(now=10.0, leader=True, heartbeat_at=10.0) == HEARTBEAT_S
