"""The Raft groups' idle timing (issue 29): heartbeats as far apart as the election timeouts
and the lock service's leases allow, and no further."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from common.raft import RaftTuning, durable_conf
from lock_service import limits
from lock_service.main import lock_tuning


def validated(tuning: RaftTuning, tmp_path: Path) -> Any:
    """pysyncobj's own checks of the conf a replica would run with."""
    replica: Any = SimpleNamespace(_write_snapshot_file=None, _read_snapshot_file=None,
                                   _role_changed=None)
    conf = durable_conf(tmp_path, tuning, replica, "127.0.0.1:1", None)
    conf.validate()
    return conf


def test_the_default_tuning_is_one_pysyncobj_accepts(tmp_path: Path) -> None:
    conf = validated(RaftTuning(), tmp_path)
    assert conf.appendEntriesPeriod > 0.075  # fewer idle heartbeats than before issue 29


@pytest.mark.parametrize("election_s", [
    (limits.ELECTION_TIMEOUT_MIN_S, limits.ELECTION_TIMEOUT_MAX_S), (0.2, 0.3), (0.05, 0.06)])
def test_lock_tuning_is_one_pysyncobj_accepts(election_s: tuple[float, float],
                                              tmp_path: Path) -> None:
    validated(lock_tuning(*election_s), tmp_path)


def test_a_heartbeat_too_slow_for_the_election_timeout_is_refused() -> None:
    with pytest.raises(AssertionError):
        RaftTuning(election_timeout_min_s=0.3, heartbeat_interval_s=0.15)


def test_the_lock_read_lease_outlasts_an_idle_heartbeat_interval() -> None:
    tuning = lock_tuning(limits.ELECTION_TIMEOUT_MIN_S, limits.ELECTION_TIMEOUT_MAX_S)
    read_lease_s = limits.READ_LEASE_FRACTION * tuning.election_timeout_min_s
    assert read_lease_s >= tuning.heartbeat_interval_s + limits.READ_LEASE_SLACK_S
    assert 3 * tuning.heartbeat_interval_s < limits.LEADER_LEASE_S
