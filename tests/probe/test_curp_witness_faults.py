"""CURP with a witness at fault (issue 32, partition_layer/curp.py steps 3 and 7): a stamp with
the fast path on, SDK writers appending to many logs and putting distinct rows, a reader of
what they write; then one of the partition's three witnesses is frozen (SIGSTOP) or killed
(SIGKILL) — an extent node, so a commit-log replica goes with it.

Writes go on being acknowledged: the front end's records to that witness fail or time out,
so writes fall back to a sync (then skip the witnesses while the front end holds it suspect),
and the commit log seals the replica away as it does without CURP. The partition's owner is
then SIGKILLed; the next owner fences the set the metadata names (one witness answering is
enough) and executes what they hold. Afterwards every acknowledged write is there — each
append at its sequence number, each row with its value and the ETag its writer was given —
and so is everything any read saw (§8 invariant 7).

Two more: writes answered early with the owner's commit log stalled (held by the witnesses
alone) survive its SIGKILL with a witness frozen or killed — the recovery executes them from
the two live ones; and a witness frozen or cut off while the owner serves is replaced
(witness_repick.py) under the load, fast writes come back at the new set, and writes answered
early there survive the owner's SIGKILL.

The witnesses are those the partition's newest metadata record names (tests/support/
curp_load.py `witnesses_of`): the set the next owner fences, whatever a front end learned.
Four extent nodes in three fault domains: with one node down, new extents still find three
live nodes (placement settles for distinct nodes when a domain is missing).

The victim among the three witnesses is chosen by a seed, printed; set CURP_PROBE_SEED to
replay one."""

from __future__ import annotations

import os
import random
import re
import signal
import time
from collections.abc import Callable, Iterator

import pytest

from common import rpc
from common.process import LOG_FILE
from partition_layer.client import PartitionClient
from partition_layer.witness_set import WitnessSet
from tests.support.curp_load import (
    CurpLoad,
    curp_answers,
    log_tail_replicas,
    wait_fast,
    witnesses_of,
)
from tests.support.waiting import wait_until
from tools import cmd_isolate
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

StampFactory = Callable[..., LocalStamp]
ACCOUNT = "admin"  # the account of the stamp's admin connection string
PARTITION = 1  # a new stamp's only partition
WRITERS = 8
LOGS = 64  # each writer appends to 8 in turn: a log is written again only 8 rounds on
PHASE_WRITES = 60  # acknowledged writes each phase waits for
PHASE_TIMEOUT_S = 20.0  # a phase across an owner's failover takes a few seconds
CALL_TIMEOUT_S = 20.0  # the SDK's, retries included
# The front end's wait for the witnesses' verdicts: 50 ms by default, which a test machine
# busy with other stamps' fsyncs often misses, and a write that misses it takes the sync
# path — with the commit log stalled, a write that can never be acknowledged. These probes
# are about faults, not latency: a frozen witness is still past it (a write then waits
# this long and syncs).
WITNESS_WAIT_MS = 250
UNSYNCED_FAST = 2  # writes acknowledged early with the owner's commit log stalled
# Once the log stalls only the blocks the commit pipeline holds are decided, their hinted
# writes answered early: 16, not the default 4, so a loaded machine still gets a few.
# What a partition server logs once it executed a loaded partition's witnessed writes
# (partition_layer/witness_replay.py).
# The owner's sweep every 200 ms, a witness silent 600 ms lost (4 s by default): replaced as
# soon as the stream manager counts it suspect (witness_repick.py).
QUICK_REPICK = {"curp_sweep_interval_ms": 200, "curp_witness_lost_ms": 600}
EXECUTED = re.compile(rf"partition {PARTITION}: (\d+) writes executed from its witnesses")


@pytest.fixture
def stamp(stamp_factory: StampFactory, request: pytest.FixtureRequest) -> LocalStamp:
    """The stamp; a test may give partition limits of its own (indirect parametrization)."""
    partition = {"curp": True, "commit_pipeline_depth": 16, **getattr(request, "param", {})}
    return stamp_factory(4, 3, lock_servers=3, partition_managers=1, partition_servers=2,
                         front_ends=1, partition=partition,
                         front_end={"curp": True, "curp_witness_timeout_ms": WITNESS_WAIT_MS})


@pytest.fixture
def seed() -> int:
    chosen = int(os.environ.get("CURP_PROBE_SEED", time.time_ns() % 1_000_000))
    print(f"CURP_PROBE_SEED={chosen}")  # shown with a failure: set it to replay the run
    return chosen


@pytest.fixture
def load(stamp: LocalStamp) -> Iterator[CurpLoad]:
    """The writers and the reader, running on the fast path (some write acknowledged fast)."""
    running = CurpLoad(stamp.admin_connection_string_file.read_text().strip(), WRITERS, LOGS,
                       CALL_TIMEOUT_S)
    running.start()
    try:
        running.wait_acked(PHASE_WRITES, PHASE_TIMEOUT_S, "before the fault")
        wait_fast(stamp, 1, PHASE_TIMEOUT_S, "a write acknowledged on the fast path")
        yield running
    finally:
        running.stop()


def owner_of(stamp: LocalStamp) -> str:
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        current, _ = pc.partition_map()
        return current.get(PARTITION).server


def victim_witness(stamp: LocalStamp, seed: int) -> tuple[str, int]:
    """One of the partition's named witnesses that is also a replica of its commit log's last
    extent (the fault then hits both, as the issue means), by the seed: (name, pid)."""
    named = witnesses_of(stamp, PARTITION)
    assert named is not None and len(named.addresses) == 3, f"witnesses named: {named}"
    tail = log_tail_replicas(stamp, PARTITION)
    both = sorted(a for a in named.addresses if a in tail)  # two at least: 3 of 4 nodes each
    name = stamp.name_of(random.Random(seed).choice(both))
    print(f"witnesses {[stamp.name_of(a) for a in named.addresses]} (epoch {named.epoch}), "
          f"commit log on {[stamp.name_of(a) for a in tail]}: the victim {name}")
    return name, stamp.record(name).pid


def sealed_away(stamp: LocalStamp, name: str) -> None:
    """The commit log went on without `name`: its last extent is on other nodes."""
    tail = log_tail_replicas(stamp, PARTITION)
    assert stamp.address(name) not in tail, f"the commit log's last extent is still on {name}"


def kill_owner_and_go_on(stamp: LocalStamp, load: CurpLoad, what: str) -> None:
    """SIGKILL the partition's owner; writes are acknowledged again (the survivor loaded it,
    so its recovery ran)."""
    owner = owner_of(stamp)
    stamp.kill(owner)
    load.wait_acked(PHASE_WRITES, PHASE_TIMEOUT_S, f"after the owner's SIGKILL, {what}")
    moved = owner_of(stamp)
    assert moved != owner, f"partition {PARTITION} still mapped to {owner}, killed"


def executed_from_witnesses(stamp: LocalStamp) -> int:
    """How many witnessed writes the partition's loads executed, by the servers' logs."""
    return sum(int(found.group(1))
               for record in stamp.partition_servers()
               for found in EXECUTED.finditer(
                   (stamp.data_dir / record.name / LOG_FILE).read_text(errors="replace")))


def check_everything_there(stamp: LocalStamp, load: CurpLoad) -> None:
    print(f"acknowledged: {len(load.outcome.appended)} appends, {len(load.outcome.put)} puts;"
          f" seen by reads: {len(load.outcome.seen_records)} records, "
          f"{len(load.outcome.seen_rows)} rows; errors {dict(load.outcome.errors)}; "
          f"fe-1 answers {curp_answers(stamp)}")
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        load.check(pc, ACCOUNT)


def test_a_frozen_witness_loses_nothing_acknowledged_across_the_owners_sigkill(
        stamp: LocalStamp, load: CurpLoad, seed: int) -> None:
    """Frozen: writes go on (sync path), the commit log leaves the node; the owner killed
    with it still frozen, the next one fences the two others; thawed, fast writes again."""
    name, pid = victim_witness(stamp, seed)
    os.kill(pid, signal.SIGSTOP)
    try:
        load.wait_acked(PHASE_WRITES, PHASE_TIMEOUT_S, f"with the witness {name} frozen")
        sealed_away(stamp, name)
        kill_owner_and_go_on(stamp, load, f"the witness {name} frozen")
    finally:
        os.kill(pid, signal.SIGCONT)
    load.wait_acked(PHASE_WRITES, PHASE_TIMEOUT_S, f"after the witness {name} thawed")
    # The new owner named a set at load if three answered its fence; else it tries again
    # every sweep (witness_repick.pick_later) and, the node thawed, names one. The front end
    # learns it from an answer, and records at the victim again once it holds it suspect no
    # more (witness_suspect_ms after its last failed call).
    started = time.monotonic()
    wait_fast(stamp, 1, PHASE_TIMEOUT_S, f"a fast write after the witness {name} thawed")
    print(f"fast again {time.monotonic() - started:.1f} s after the thaw's writes; witnesses "
          f"now {witnesses_of(stamp, PARTITION)}")
    load.stop()
    check_everything_there(stamp, load)


def test_a_killed_witness_loses_nothing_acknowledged_across_the_owners_sigkill(
        stamp: LocalStamp, load: CurpLoad, seed: int) -> None:
    """Killed: writes go on (sync path), the commit log leaves the node; restarted, it holds
    its journal's records again; the owner killed after, the next one fences all three and
    names a set, and fast writes come back."""
    name, _ = victim_witness(stamp, seed)
    stamp.kill(name)
    load.wait_acked(PHASE_WRITES, PHASE_TIMEOUT_S, f"with the witness {name} dead")
    sealed_away(stamp, name)
    stamp.start(name)  # on its port and data: the same witness, its journal replayed
    load.wait_acked(PHASE_WRITES, PHASE_TIMEOUT_S, f"after the witness {name} restarted")
    kill_owner_and_go_on(stamp, load, f"the witness {name} back")
    # The new owner names a set of live nodes (the victim among them or not), the front end
    # learns it from an answer and, the victim no longer suspect, records at it again.
    wait_fast(stamp, 1, PHASE_TIMEOUT_S,
              "a fast write again, every node back and the partition loaded anew")
    print(f"witnesses now {witnesses_of(stamp, PARTITION)}")
    load.stop()
    check_everything_there(stamp, load)


@pytest.mark.parametrize("fault", ["frozen", "killed"])
def test_fast_writes_unsynced_at_the_owners_death_are_recovered_from_the_live_witnesses(
        stamp: LocalStamp, load: CurpLoad, seed: int, fault: str) -> None:
    """The owner's commit log stalls, so writes acknowledged early from then on are held by
    the three witnesses alone; one of them is frozen or killed and the owner SIGKILLed: the
    next owner fences the two live ones (the third times out or refuses the connection) and
    executes their records."""
    name, pid = victim_witness(stamp, seed)
    owner = owner_of(stamp)
    # The stall must find writes on the fast path, not in a while the front end holds a
    # witness suspect (a Record call failed: witness_calls.py), when every write takes the
    # sync path and waits for the stalled log.
    wait_fast(stamp, WRITERS, PHASE_TIMEOUT_S, "the fast path in use just before the stall")
    rpc.arm_remote(stamp.address(owner), "ps.commit.before_append=delay:60000")
    # Only the writes of the blocks the committer starts before its pipeline is full are
    # answered early (partition.commit_pipeline_depth, 16 here): a few.
    wait_fast(stamp, UNSYNCED_FAST, PHASE_TIMEOUT_S,
              "writes acknowledged early with the owner's commit log stalled")
    if fault == "frozen":
        os.kill(pid, signal.SIGSTOP)
        try:
            kill_owner_and_go_on(stamp, load, f"the witness {name} frozen")
        finally:
            os.kill(pid, signal.SIGCONT)
    else:
        stamp.kill(name)
        kill_owner_and_go_on(stamp, load, f"the witness {name} dead")
        stamp.start(name)
    load.wait_acked(PHASE_WRITES, PHASE_TIMEOUT_S, f"with the witness {name} back")
    load.stop()
    # The records of the stalled blocks' writes were never dropped (never durable): the new
    # owner found them at the live witnesses. (A count, not which: check_everything_there
    # tells whether each acknowledged write is there.)
    executed = executed_from_witnesses(stamp)
    assert executed > 0, "the new owner executed no write from its witnesses"
    check_everything_there(stamp, load)


@pytest.mark.parametrize("stamp", [QUICK_REPICK], indirect=True)
@pytest.mark.parametrize("fault", ["frozen", "cut off"])
def test_a_witness_lost_while_the_owner_serves_is_replaced_under_load(
        stamp: LocalStamp, load: CurpLoad, fault: str) -> None:
    """The owner replaces a frozen or cut-off witness while the writers run (witness_repick:
    every early answer durable first, then the new set named); fast writes come back at the
    new set with the node still lost; then, its commit log stalled, writes answered early at
    the new set alone survive the owner's SIGKILL (the recovery fences the set the metadata
    names now)."""
    first = witnesses_of(stamp, PARTITION)
    assert first is not None
    name = replaceable(stamp, first.addresses)
    print(f"witnesses {[stamp.name_of(a) for a in first.addresses]}: the victim {name}")
    pid = stamp.record(name).pid
    if fault == "frozen":
        os.kill(pid, signal.SIGSTOP)
    else:
        cmd_isolate.isolate(stamp, name)
    try:
        replaced = wait_until(lambda: moved_on(stamp, stamp.address(name)), PHASE_TIMEOUT_S,
                              f"partition {PARTITION} to name a set without {name}")
        print(f"replaced by {[stamp.name_of(a) for a in replaced.addresses]}")
        wait_fast(stamp, WRITERS, PHASE_TIMEOUT_S, f"fast writes at the set without {name}")
        rpc.arm_remote(stamp.address(owner_of(stamp)), "ps.commit.before_append=delay:60000")
        wait_fast(stamp, UNSYNCED_FAST, PHASE_TIMEOUT_S,
                  "writes acknowledged early at the new set, the commit log stalled")
        kill_owner_and_go_on(stamp, load, f"the witness {name} {fault}")
    finally:
        if fault == "frozen":
            os.kill(pid, signal.SIGCONT)
        else:
            cmd_isolate.heal(stamp, name)
    load.wait_acked(PHASE_WRITES, PHASE_TIMEOUT_S, f"with the witness {name} back")
    load.stop()
    check_everything_there(stamp, load)


def replaceable(stamp: LocalStamp, witnesses: tuple[str, ...]) -> str:
    """The member of `witnesses` whose fault domain has another extent node (fd-1: en-1 and
    en-4), which can take its place: the name."""
    domains = {spec.name: spec.fault_domain for spec in stamp.config.extent_nodes}
    names = [stamp.name_of(address) for address in witnesses]
    return next(name for name in names
                if sum(domain == domains[name] for domain in domains.values()) > 1)


def moved_on(stamp: LocalStamp, lost: str) -> WitnessSet | None:
    """The set the partition's metadata names, once it is one without `lost`."""
    named = witnesses_of(stamp, PARTITION)
    return named if named is not None and lost not in named.addresses else None
