"""Probe tests of the lock service (§3) against real replica processes: SIGKILL leaders,
holders and whole groups, then check what was acknowledged with checkers, not hope."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from random import Random

import pytest

from common import process
from common.errors import StampError
from common.rpc import arm_remote
from lock_service.client import LockClient
from lock_service.group import LocalLockGroup
from tests.support.locks import (
    CALL_TIMEOUT_S,
    PROGRESS_TIMEOUT_S,
    CasWorkload,
    Op,
    check_linearizable,
    converged,
)
from tests.support.waiting import wait_until


def restart_leader(lock_group: LocalLockGroup, probe: LockClient) -> str:
    leader = lock_group.leader(probe)
    lock_group.kill(leader)
    lock_group.start(leader)
    return leader


# --- mutual exclusion under leader failover ------------------------------------------------------


@pytest.mark.slow
def test_mutual_exclusion_holds_while_the_leader_is_killed_repeatedly(
        lock_group: LocalLockGroup, make_client: Callable[[str], LockClient], rng: Random) -> None:
    ttl_s = 1.0
    stop = threading.Event()
    claims: list[tuple[float, float, int]] = []  # (first act, last act, token)
    mutex = threading.Lock()

    def contender(index: int, seed: int) -> None:
        client, local = make_client(f"c{index}"), Random(seed)
        while not stop.is_set():
            try:
                lease = client.acquire("mx", ttl_s=ttl_s, wait_s=0.5)
            except StampError:
                continue  # no leader for a moment
            if lease is None:
                continue
            start = last = time.monotonic()
            hold_until = start + local.uniform(0.02, 0.4)
            while time.monotonic() < hold_until and lease.valid():
                last = time.monotonic()  # acting as the owner: it checked valid() just now
                time.sleep(0.005)
            with mutex:
                claims.append((start, last, lease.token))
            lease.release()

    threads = [threading.Thread(target=contender, args=(i, rng.random()), daemon=True)
               for i in range(3)]
    for thread in threads:
        thread.start()
    probe = make_client("probe")
    try:
        for _ in range(3):
            seen = len(claims)
            wait_until(lambda seen=seen: len(claims) >= seen + 3, PROGRESS_TIMEOUT_S,
                       "grants before a kill")
            restart_leader(lock_group, probe)
        seen = len(claims)
        wait_until(lambda: len(claims) >= seen + 3, PROGRESS_TIMEOUT_S,
                   "grants after the last kill")
    finally:
        stop.set()
        for thread in threads:
            thread.join(CALL_TIMEOUT_S * 2)
    ordered = sorted(claims)
    print(f"{len(ordered)} grants, tokens {ordered[0][2]}..{ordered[-1][2]}")
    for before, after in itertools.pairwise(ordered):
        assert before[1] < after[0], f"two owners at once: {before} and {after}"
        assert before[2] < after[2], f"fencing token went down: {before} then {after}"


# --- a SIGKILLed holder ---------------------------------------------------------------------------

HOLDER = textwrap.dedent("""
    import sys, threading
    from lock_service.client import LockClient
    client = LockClient(sys.argv[1].split(","), "victim")
    lease = client.acquire("victim-lock", ttl_s=float(sys.argv[2]))
    session = client.session(ttl_s=float(sys.argv[2]))
    client.put("members/victim", b"alive", lease=session)
    print(lease.token, flush=True)
    threading.Event().wait()
""")


@pytest.mark.slow
@pytest.mark.serial  # timing-sensitive: run alone (`make test`)
def test_killed_holder_loses_its_lock_after_the_ttl_and_the_next_token_is_larger(
        lock_group: LocalLockGroup, make_client: Callable[[str], LockClient]) -> None:
    ttl_s = 2.0
    victim = subprocess.Popen([sys.executable, "-c", HOLDER, ",".join(lock_group.addresses),
                               str(ttl_s)], stdout=subprocess.PIPE,
                              cwd=Path(__file__).parents[2])
    try:
        assert victim.stdout is not None
        victim_token = int(victim.stdout.readline())
        client = make_client("heir")
        assert client.acquire("victim-lock", ttl_s=ttl_s) is None, "held by the victim"
        killed_at = time.monotonic()
        process.kill(victim.pid)
    finally:
        if victim.poll() is None:
            process.kill(victim.pid)
        victim.wait()
    assert client.list("members/") == ["members/victim"]
    lease = client.acquire("victim-lock", ttl_s=ttl_s, wait_s=ttl_s + 5.0)
    waited_s = time.monotonic() - killed_at
    assert lease is not None and lease.token > victim_token
    # Its last renewal was about ttl/3 before the kill (give or take a loaded machine's
    # scheduling); the service counts ttl from there.
    assert waited_s >= ttl_s / 2, f"freed {waited_s:.2f}s after the kill"
    assert waited_s <= ttl_s + 2.0, f"freed only {waited_s:.2f}s after the kill"
    wait_until(lambda: client.list("members/") == [], 3.0, "the victim's session keys to vanish")


# --- linearizable compare-and-set ----------------------------------------------------------------


def test_the_checker_catches_what_it_should() -> None:
    ok = [Op("cas", 0, 1, 0, b"a", 1), Op("read", 2, 3, 1, b"a"), Op("cas", 2, 4, 1, b"b", 2),
          Op("cas", 1.5, 5, 1, b"c", None), Op("read", 4.5, 6, 2, b"b")]
    assert check_linearizable(ok) == 2
    bad = {
        "lost update": [Op("cas", 0, 1, 0, b"a", 1), Op("cas", 0, 1, 0, b"b", 2)],
        "stale read": [Op("cas", 0, 1, 0, b"a", 1), Op("read", 2, 3, 0, b"")],
        "refused while current": [Op("cas", 0, 1, 0, b"a", 1), Op("cas", 2, 3, 1, b"b", None)],
        "out of real-time order": [Op("cas", 5, 6, 0, b"a", 1), Op("cas", 0, 1, 1, b"b", 2)],
    }
    for name, history in bad.items():
        with pytest.raises(AssertionError):
            check_linearizable(history)
            pytest.fail(f"missed: {name}")


@pytest.mark.slow
def test_concurrent_cas_is_linearizable_across_a_leader_failover(
        lock_group: LocalLockGroup, make_client: Callable[[str], LockClient]) -> None:
    workload = CasWorkload(make_client)
    try:
        workload.wait_for_more(100, "operations before the failover")
        restart_leader(lock_group, make_client("probe"))
        workload.wait_for_more(100, "operations after the failover")
    finally:
        writes = workload.stop_and_check()
    assert writes >= 20


@pytest.mark.slow
def test_leader_torn_mid_journal_write_recovers_and_agrees(
        lock_group: LocalLockGroup, make_client: Callable[[str], LockClient]) -> None:
    probe = make_client("probe")
    workload = CasWorkload(make_client)
    try:
        workload.wait_for_more(50, "operations before the fault")
        leader = lock_group.replicas[lock_group.leader(probe)]
        # Its next journal sync writes half a batch, then the process SIGKILLs itself.
        arm_remote(leader.address, "raft_journal.sync=torn,after=5")
        assert leader.pid is not None
        wait_until(lambda: not process.is_alive(leader.pid or 0), PROGRESS_TIMEOUT_S,
                   "the torn write to crash it")
        lock_group.kill(leader.name)  # reap it
        workload.wait_for_more(50, "operations without it")
        lock_group.start(leader.name)
        workload.wait_for_more(50, "operations after its restart")
    finally:
        workload.stop_and_check()
    log_text = (leader.dir / process.LOG_FILE).read_text()
    assert "fault point raft_journal.sync: crashing" in log_text, "it died of something else"
    wait_until(lambda: converged(lock_group, probe), PROGRESS_TIMEOUT_S,
               "the three replicas to apply the same log")


# --- durability across a full restart -------------------------------------------------------------


@pytest.mark.slow
def test_restart_of_all_replicas_keeps_locks_and_keys(
        lock_group: LocalLockGroup, make_client: Callable[[str], LockClient]) -> None:
    owner, other = make_client("owner"), make_client("other")
    versions = {f"meta/{i}": owner.put(f"meta/{i}", f"v{i}".encode()) for i in range(10)}
    lease = owner.acquire("keep", ttl_s=10.0)
    session = owner.session(ttl_s=10.0)
    owner.put("members/owner", b"here", lease=session)
    assert lease is not None
    for name in lock_group.replicas:
        lock_group.kill(name)
    lock_group.start_all()
    assert {k: owner.get(k) for k in versions} == {
        k: (f"v{i}".encode(), versions[k]) for i, k in enumerate(versions)}
    assert other.acquire("keep", ttl_s=1.0) is None, "the lock survived the restart"
    assert owner.list("members/") == ["members/owner"]
    before = lease.remaining_s()
    wait_until(lambda: lease.remaining_s() > before, PROGRESS_TIMEOUT_S,
               "a renewal after the restart")
    assert lease.valid() and not lease.lost.is_set()
    lease.release()
    after = other.acquire("keep", ttl_s=1.0)
    assert after is not None and after.token > lease.token


# --- replicas agree after a failover storm --------------------------------------------------------


@pytest.mark.slow
def test_replica_states_are_equal_after_a_failover_storm(
        lock_group: LocalLockGroup, make_client: Callable[[str], LockClient], rng: Random) -> None:
    stop = threading.Event()
    done = [0]

    def workload(index: int, seed: int) -> None:
        client, local = make_client(f"load{index}"), Random(seed)
        session = None
        while not stop.is_set():
            key = f"k/{local.randrange(5)}"
            try:
                choice = local.random()
                if choice < 0.3:
                    client.put(key, local.randbytes(8))
                elif choice < 0.55:
                    seen = client.get(key)
                    client.cas(key, seen[1] if seen else 0, local.randbytes(8))
                elif choice < 0.65:
                    client.delete(key)
                elif choice < 0.85:
                    lease = client.acquire(f"lock/{local.randrange(3)}", ttl_s=0.5)
                    if lease is not None:
                        lease.release()
                else:
                    if session is None or not session.valid():
                        session = client.session(ttl_s=0.5)
                    client.put(f"members/{index}", b"x", lease=session)
                done[0] += 1
            except StampError:
                pass  # a write may fail while there is no leader; the state must agree anyway

    threads = [threading.Thread(target=workload, args=(i, rng.random()), daemon=True)
               for i in range(3)]
    for thread in threads:
        thread.start()
    probe = make_client("probe")
    try:
        for _ in range(8):
            seen = done[0]
            wait_until(lambda seen=seen: done[0] >= seen + 20, PROGRESS_TIMEOUT_S,
                       "progress between kills")
            victims = [lock_group.leader(probe) if rng.random() < 0.7
                       else rng.choice(lock_group.running())]
            if rng.random() < 0.25:  # and sometimes a second one: no quorum for a moment
                victims.append(rng.choice([n for n in lock_group.running() if n != victims[0]]))
            for victim in victims:
                lock_group.kill(victim)
            for victim in victims:
                lock_group.start(victim)
    finally:
        stop.set()
        for thread in threads:
            thread.join(CALL_TIMEOUT_S * 2)

    wait_until(lambda: converged(lock_group, probe), PROGRESS_TIMEOUT_S,
               "the three replicas to apply the same log")
