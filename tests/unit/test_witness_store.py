"""The CURP witness store on real files (§11, issue 32): what it acknowledged survives a
restart (footprints and deadlines with it), fences hold across restarts, gc persists (a
deposed owner's does nothing), a torn tail loses only what was not acknowledged, deadlines
and the sweep's list go by the store's clock, compaction bounds the journal and survives a
crash at every step, and concurrent records share fsyncs."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from common import faults
from common.clock import ManualClock
from common.config import ExtentNodeLimits, WitnessLimits
from common.errors import FaultInjected, Internal, Unavailable
from stream_layer.extent_node.journal import encode_record
from stream_layer.extent_node.witness import (
    WitnessStore,
    decode,
    encode,
)
from stream_layer.extent_node.witness_table import (
    Cleared,
    Fenced,
    Held,
    PartitionDropped,
    Record,
    Released,
    Snapshot,
    Verdict,
)
from tests.support.waiting import wait_for

KiB = 1 << 10
MiB = 1 << 20
A, C, F, E = Verdict.ACCEPTED, Verdict.CONFLICT, Verdict.FENCED, Verdict.EXPIRED
T = TypeVar("T")


def witness_limits(**changes: int) -> WitnessLimits:
    """The extent node's default witness limits (common/config.py), with `changes`."""
    return dataclasses.replace(ExtentNodeLimits().witness, **changes)


# Small journal values so a test's churn rotates and compacts.
LIMITS = witness_limits(records_max=10_000, bytes_max=16 * MiB, journal_batch_bytes_max=MiB,
                        journal_queue_bytes_max=8 * MiB, journal_segment_bytes_max=64 * KiB,
                        compact_floor_bytes=64 * KiB)
# Compaction only when a test asks for it.
NO_AUTO_COMPACTION = witness_limits(journal_segment_bytes_max=4 * KiB,
                                    compact_floor_bytes=1 << 40)


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    faults.disarm()


def rec(token: str, *keys: str, shared: tuple[str, ...] = (), epoch: int = 1,
        payload: bytes = b"payload", deadline_ms: int = 0) -> Record:
    """A record holding `keys` exclusively and `shared` shared."""
    return Record(token.encode(), epoch, frozenset(k.encode() for k in keys),
                  frozenset(k.encode() for k in shared), payload, deadline_ms)


def run(directory: Path, body: Callable[[WitnessStore], Awaitable[T]],
        limits: WitnessLimits = LIMITS, clock: ManualClock | None = None) -> T:
    """Start a store on `directory` (on `clock` if given), run `body`, stop it (a process's
    life)."""
    async def scenario() -> T:
        store = await WitnessStore.open(directory, limits, clock)
        try:
            return await body(store)
        finally:
            await store.stop()
    return asyncio.run(scenario())


def reopened(directory: Path, limits: WitnessLimits = LIMITS) -> Snapshot:
    """The table a restart on `directory` rebuilds."""
    async def snapshot(store: WitnessStore) -> Snapshot:
        return store.table.snapshot()
    return run(directory, snapshot, limits)


def dir_bytes(directory: Path) -> int:
    """Bytes of the files in `directory`; a background compaction may drop one meanwhile."""
    total = 0
    for path in directory.iterdir():
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            continue
    return total


async def history(store: WitnessStore) -> Snapshot:
    """A bit of everything, durable; returns the table it leaves."""
    assert await store.record(1, [rec("a", "k1"), rec("b", "k2", epoch=2)]) == [A, A]
    assert await store.record(2, [rec("c", "k1", payload=b"x" * 300)]) == [A]
    assert await store.record(1, [rec("d", "k1")]) == [C]
    store.gc(1, [b"a"], epoch=1)
    assert await store.record(1, [rec("d", "k1", epoch=2)]) == [A]
    assert [r.token for r in await store.fence(1, 2)] == [b"b", b"d"]
    assert await store.record(1, [rec("e", "k5", epoch=1)]) == [F]
    assert await store.record(1, [rec("e", "k5", epoch=3)]) == [A]
    await store.clear(1, 3)
    assert await store.record(3, [rec("f", "k")]) == [A]
    await store.drop_partition(3)
    await store.fence(4, 9)
    await store.flush()
    return store.table.snapshot()


# ---- restarts -----------------------------------------------------------------------------

def test_accepted_records_survive_a_restart(tmp_path: Path) -> None:
    async def body(store: WitnessStore) -> Snapshot:
        verdicts = await store.record(7, [rec("a", "k1"), rec("b", "k2"), rec("c", "k1")])
        assert verdicts == [A, A, C]
        return store.table.snapshot()
    before = run(tmp_path, body)
    after = reopened(tmp_path)
    assert after == before
    assert [r.token for _, r in after.records] == [b"a", b"b"]


def test_a_whole_history_replays_to_the_same_table(tmp_path: Path) -> None:
    before = run(tmp_path, history)
    assert reopened(tmp_path) == before
    assert reopened(tmp_path) == before, "a second restart (over the first's segment) too"


def test_a_fence_survives_a_restart_and_still_refuses_older_epochs(tmp_path: Path) -> None:
    async def fence(store: WitnessStore) -> None:
        await store.record(1, [rec("old", "k", epoch=4)])
        held = await store.fence(1, 5)
        assert [r.token for r in held] == [b"old"]

    async def after(store: WitnessStore) -> None:
        assert store.table.fence_epoch(1) == 5
        assert await store.record(1, [rec("late", "j", epoch=4)]) == [F]
        assert await store.record(1, [rec("new", "j", epoch=5)]) == [A]
        assert [r.token for r in await store.fence(1, 5)] == [b"old", b"new"]
    run(tmp_path, fence)
    run(tmp_path, after)


def test_clear_and_a_dropped_partition_survive_a_restart(tmp_path: Path) -> None:
    async def before(store: WitnessStore) -> None:
        await store.record(1, [rec("a", "k", epoch=1), rec("b", "j", epoch=2)])
        await store.clear(1, 2)
        await store.record(2, [rec("c", "k")])
        await store.drop_partition(2)

    async def after(store: WitnessStore) -> None:
        assert [r.token for r in store.table.records(1)] == [b"b"]
        assert store.table.fence_epoch(1) == 2
        assert store.table.is_dropped(2) and store.table.held_records(2) == 0
        assert await store.record(2, [rec("d", "k", epoch=100)]) == [F]
    run(tmp_path, before)
    run(tmp_path, after)


def test_gc_is_gone_after_a_restart_once_persisted(tmp_path: Path) -> None:
    async def body(store: WitnessStore) -> None:
        await store.record(1, [rec("a", "k1"), rec("b", "k2")])
        store.gc(1, [b"a", b"unknown"], epoch=1)  # returns at once
        assert store.table.held_records() == 1
        await store.flush()
    run(tmp_path, body)
    snapshot = reopened(tmp_path)
    assert [r.token for _, r in snapshot.records] == [b"b"]


def test_a_durable_gc_returns_once_its_entry_is_synced(tmp_path: Path) -> None:
    """The owner's sweep counts a round only once its drops are durable (a drop a restart
    forgot would bring a record back after its token may have expired)."""
    async def body(store: WitnessStore) -> None:
        await store.record(1, [rec("a", "k1"), rec("b", "k2")])
        synced = store.journal.records
        assert await store.gc_durable(1, [b"a"], epoch=1) == 1
        assert store.journal.records == synced + 1
        store.gc(1, [b"b"], epoch=1)  # the owner's drop after a block: held back
        assert store.journal.records == synced + 1
        await store.flush()
    run(tmp_path, body)
    assert not reopened(tmp_path).records


def test_a_deposed_owners_drop_persists_nothing_and_keeps_the_new_owners_record(
        tmp_path: Path) -> None:
    async def body(store: WitnessStore) -> None:
        await store.record(1, [rec("T1", "k1", epoch=1)])
        await store.fence(1, 2)
        await store.record(1, [rec("T2", "k2", epoch=2)])
        records = store.journal.records
        assert store.gc(1, [b"T1", b"T2"], epoch=1) == 0
        assert store.list(1, 0, epoch=1) == []
        await store.flush()
        assert store.journal.records == records, "an ignored drop writes no entry"
        assert store.gc(1, [b"T1"], epoch=2) == 1
        await store.flush()
    run(tmp_path, body)
    assert [r.token for _, r in reopened(tmp_path).records] == [b"T2"]


def test_a_torn_tail_loses_only_the_unacknowledged_entry(tmp_path: Path) -> None:
    async def body(store: WitnessStore) -> None:
        for i in range(20):
            assert await store.record(1, [rec(f"t{i}", f"k{i}")]) == [A]
    run(tmp_path, body, NO_AUTO_COMPACTION)
    # The power cut tore the last write: half of its record reached the disk, so it was
    # never acknowledged.
    segment = max(tmp_path.iterdir())
    size = segment.stat().st_size
    last = encode_record(encode(Held(1, rec("t19", "k19"))))
    with open(segment, "r+b") as f:
        f.truncate(size - len(last) // 2)
    tokens = [r.token for _, r in reopened(tmp_path, NO_AUTO_COMPACTION).records]
    assert tokens == [b"t%d" % i for i in range(19)]


def test_a_retry_returns_only_once_the_first_copy_is_durable(tmp_path: Path) -> None:
    async def body(store: WitnessStore) -> None:
        first = asyncio.ensure_future(store.record(1, [rec("a", "k")]))
        await asyncio.sleep(0)  # the first copy is decided and submitted, not yet synced
        assert store.table.held_records() == 1
        assert await store.record(1, [rec("a", "k")]) == [A]
        assert store.journal.records >= 1, "the retry was acknowledged before the original"
        assert await first == [A]
    run(tmp_path, body)


def test_a_fence_returns_only_once_the_records_it_returns_are_durable(tmp_path: Path) -> None:
    async def body(store: WitnessStore) -> None:
        first = asyncio.ensure_future(store.record(1, [rec("a", "k", epoch=1)]))
        await asyncio.sleep(0)  # accepted and submitted, not yet synced
        assert [r.token for r in await store.fence(1, 2)] == [b"a"]
        assert store.journal.records == 2, "the fence answered before what it returned"
        assert await first == [A]
    run(tmp_path, body)


def test_a_refusal_persists_nothing(tmp_path: Path) -> None:
    async def body(store: WitnessStore) -> None:
        await store.record(1, [rec("a", "k", epoch=3)])
        await store.fence(1, 3)
        records = store.journal.records
        assert await store.record(1, [rec("b", "k", epoch=3), rec("c", "j", epoch=2)]) == [C, F]
        assert await store.record(1, [rec("a", "k", epoch=3)]) == [A]  # a retry
        await store.flush()
        assert store.journal.records == records
    run(tmp_path, body)


def test_refusals_and_operations_outside_a_running_store(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = WitnessStore(tmp_path, LIMITS)
        with pytest.raises(Unavailable):
            await store.record(1, [rec("a", "k")])
        await store.start()
        await store.stop()
        with pytest.raises(Unavailable):
            store.gc(1, [b"a"], epoch=1)
    asyncio.run(scenario())


# ---- footprints, deadlines and the clock ---------------------------------------------------

T0_S = 1_700_000_000.0  # the tests' wall clock starts here (seconds)
T0_MS = int(T0_S * 1000)


def test_a_restart_keeps_deadlines_and_both_key_sets(tmp_path: Path) -> None:
    records = [rec("a", "row1", shared=("group",), deadline_ms=T0_MS + 60_000),
               rec("b", "row2", shared=("group",)),
               rec("c", "log", deadline_ms=T0_MS + 1)]

    async def before(store: WitnessStore) -> None:
        assert await store.record(1, records) == [A, A, A]

    async def after(store: WitnessStore) -> None:
        assert store.table.records(1) == records
        assert store.table.shared_holders(1, b"group") == 2
        # The indexes are rebuilt: shared/shared still commutes, exclusive still conflicts.
        assert await store.record(1, [rec("d", "row3", shared=("group",)), rec("e", "group"),
                                      rec("f", "x", shared=("log",))]) == [A, C, C]
        # A retry after the restart is the same attempt as before it.
        assert await store.record(1, [records[0]]) == [A]
    run(tmp_path, before, clock=ManualClock(T0_S))
    run(tmp_path, after, clock=ManualClock(T0_S))


def test_expired_by_the_stores_clock_and_nothing_persisted(tmp_path: Path) -> None:
    clock = ManualClock(T0_S)

    async def body(store: WitnessStore) -> None:
        assert await store.record(1, [rec("a", "k", deadline_ms=T0_MS + 500)]) == [A]
        records = store.journal.records
        clock.advance(0.5)
        assert await store.record(1, [rec("b", "j", deadline_ms=T0_MS + 500),
                                      rec("c", "i", deadline_ms=T0_MS + 501)]) == [E, A]
        assert await store.record(1, [rec("d", "h", deadline_ms=T0_MS + 400)]) == [E]
        await store.flush()
        assert store.journal.records == records + 1, "only c was persisted"
    run(tmp_path, body, clock=clock)


def test_list_by_the_stores_clock_and_from_the_replay_after_a_restart(tmp_path: Path) -> None:
    clock = ManualClock(T0_S)

    async def before(store: WitnessStore) -> None:
        await store.record(1, [rec("old", "k1")])
        clock.advance(1.0)
        await store.record(1, [rec("new", "k2")])
        await store.record(2, [rec("other", "k1")])
        clock.advance(0.5)
        assert [r.token for r in store.list(1, 1000, epoch=1)] == [b"old"]
        assert [r.token for r in store.list(1, 0, epoch=1)] == [b"old", b"new"]
        assert store.list(3, 0, epoch=1) == []

    async def after(store: WitnessStore) -> None:
        # Acceptance times are not persisted: the replay restarts every record's count.
        assert store.list(1, 1, epoch=1) == []
        clock.advance(0.001)
        assert [r.token for r in store.list(1, 1, epoch=1)] == [b"old", b"new"]
    run(tmp_path, before, clock=clock)
    clock.advance(10.0)  # the restart
    run(tmp_path, after, clock=clock)


# ---- group commit -------------------------------------------------------------------------

def test_concurrent_records_share_fsyncs(tmp_path: Path) -> None:
    calls = 200

    async def body(store: WitnessStore) -> tuple[int, int]:
        syncs = store.journal.syncs
        verdicts = await asyncio.gather(*(store.record(i % 5, [rec(f"t{i}", f"k{i}")])
                                          for i in range(calls)))
        assert all(v == [A] for v in verdicts)
        return store.journal.syncs - syncs, store.journal.records
    syncs, records = run(tmp_path, body)
    assert records == calls
    assert syncs < calls // 2, f"{syncs} fsyncs for {calls} concurrent record calls"
    assert reopened(tmp_path).records and len(reopened(tmp_path).records) == calls


# ---- compaction ---------------------------------------------------------------------------

def test_compaction_bounds_the_journal_under_churn(tmp_path: Path) -> None:
    async def body(store: WitnessStore) -> tuple[Snapshot, int]:
        largest = 0
        for i in range(3000):
            # Each write stays held until the next-but-two is recorded: a few are live.
            assert await store.record(i % 3, [rec(f"t{i}", f"k{i}", payload=b"p" * 200)]) == [A]
            if i >= 3:
                store.gc((i - 3) % 3, [b"t%d" % (i - 3)], epoch=1)
            if i % 50 == 0:
                largest = max(largest, dir_bytes(tmp_path))
        await store.fence(1, 2)
        await store.flush()
        assert store.compactions >= 5, f"{store.compactions} compactions"
        return store.table.snapshot(), largest
    before, largest = run(tmp_path, body)
    # Without compaction the journal would hold every write and gc (~700 KiB).
    assert largest < 2 * LIMITS.compact_floor_bytes, f"the journal grew to {largest} bytes"
    assert dir_bytes(tmp_path) < 2 * LIMITS.compact_floor_bytes
    after = reopened(tmp_path)
    assert after == before
    assert [r.token for _, r in after.records] == [b"t2997", b"t2998", b"t2999"]


def test_an_explicit_compaction_keeps_the_table_and_drops_the_old_segments(
        tmp_path: Path) -> None:
    async def body(store: WitnessStore) -> Snapshot:
        before = await history(store)
        held = store.journal_bytes
        await store.compact()
        assert store.table.snapshot() == before
        assert len(store.journal.segments()) == 1
        assert store.journal_bytes == dir_bytes(tmp_path) < held
        return before
    before = run(tmp_path, body, NO_AUTO_COMPACTION)
    assert reopened(tmp_path, NO_AUTO_COMPACTION) == before


def test_a_journal_grown_across_restarts_is_compacted_at_start(tmp_path: Path) -> None:
    async def grow(store: WitnessStore) -> Snapshot:
        for i in range(600):
            await store.record(1, [rec(f"t{i}", "k", payload=b"p" * 200)])
            store.gc(1, [b"t%d" % i], epoch=1)
        await store.record(2, [rec("kept", "k")])
        return store.table.snapshot()
    before = run(tmp_path, grow, NO_AUTO_COMPACTION)
    assert dir_bytes(tmp_path) > 2 * LIMITS.compact_floor_bytes

    async def restart(store: WitnessStore) -> Snapshot:
        await wait_for(lambda: _compacted(store), 10, "a compaction at start")
        return store.table.snapshot()
    assert run(tmp_path, restart) == before
    assert dir_bytes(tmp_path) < LIMITS.compact_floor_bytes


async def _compacted(store: WitnessStore) -> bool:
    return store.compactions > 0


ARM = {
    "after_rotate": lambda: faults.arm("witness.compact.after_rotate", "fail", times=1),
    "after_snapshot": lambda: faults.arm("witness.compact.after_snapshot", "fail", times=1),
}


def crashed_compaction(directory: Path, step: str) -> Snapshot:
    """A history over several segments, then a compaction that stops dead at `step` (the
    process dies there: nothing after it reaches the disk). Returns the table before."""
    async def body(store: WitnessStore) -> Snapshot:
        before = await history(store)
        for i in range(40):  # more segments, where each key is held, released, held again
            await store.record(5, [rec(f"x{i}", f"r{i % 2}", payload=b"y" * 200)])
            if i < 38:
                store.gc(5, [b"x%d" % i], epoch=1)
        await store.flush()
        before = store.table.snapshot()
        assert len(store.journal.segments()) >= 3
        ARM[step]()
        with pytest.raises(FaultInjected):
            await store.compact()
        return before
    return run(directory, body, NO_AUTO_COMPACTION)


@pytest.mark.parametrize("step", sorted(ARM))
def test_a_crash_between_compaction_steps_replays_to_the_same_table(
        tmp_path: Path, step: str) -> None:
    before = crashed_compaction(tmp_path, step)
    assert reopened(tmp_path, NO_AUTO_COMPACTION) == before

    # And the store goes on: a compaction after the restart, then another restart.
    async def compact(store: WitnessStore) -> None:
        await store.compact()
    run(tmp_path, compact, NO_AUTO_COMPACTION)
    assert len(list(tmp_path.iterdir())) == 1, "only the snapshot's segment is left"
    assert reopened(tmp_path, NO_AUTO_COMPACTION) == before


def test_a_crash_mid_drop_replays_from_the_snapshot(tmp_path: Path) -> None:
    """Unlinks are not durable in order: any subset of the old segments may survive. What is
    left of them may not even be a possible history (a key released in a lost segment, held
    again in a later one): replay must start at the snapshot."""
    crashed = tmp_path / "crashed"
    before = crashed_compaction(crashed, "after_snapshot")
    segments = sorted(p.name for p in crashed.iterdir())
    for lost in [[name] for name in segments[:-1]] + [segments[:-2], segments[1:-1]]:
        survivor = tmp_path / "-".join(lost)
        shutil.copytree(crashed, survivor)
        for name in lost:
            (survivor / name).unlink()
        assert reopened(survivor, NO_AUTO_COMPACTION) == before, f"{lost} lost"


def test_a_torn_snapshot_replays_from_the_old_segments(tmp_path: Path) -> None:
    before = crashed_compaction(tmp_path, "after_snapshot")
    segment = max(tmp_path.iterdir())  # the snapshot is its only record
    segment.write_bytes(segment.read_bytes()[:segment.stat().st_size // 2])
    assert reopened(tmp_path, NO_AUTO_COMPACTION) == before


# ---- the format ---------------------------------------------------------------------------

def test_every_entry_round_trips() -> None:
    record = Record(b"tok", 2**63, frozenset({b"", b"k", b"\x00" * 300}),
                    frozenset({b"g", b"h" * 40}), b"\xff" * 70_000, 2**64 - 1)
    entries = [Held(3, record), Released(4, (b"a", b"bb")), Released(4, ()), Fenced(5, 6),
               Cleared(7, 8), PartitionDropped(2**64 - 1),
               Snapshot(((1, 0), (2, 9)), (3, 4), ((1, record), (2, rec("x")))),
               Snapshot((), (), ())]
    for entry in entries:
        assert decode(encode(entry)) == entry
    assert encode(Held(1, rec("t", "a", "b"))) == encode(Held(1, rec("t", "b", "a")))
    assert decode(encode(Held(1, rec("t", "a", shared=("b",))))) != \
        decode(encode(Held(1, rec("t", "b", shared=("a",))))), "each key keeps its mode"


# A version-1 entry (no deadlines, no shared keys; never deployed) is refused, not guessed at.
V1_FENCED = b"\x01\x03" + bytes(16)
TWICE_THE_SAME_KEY = encode(Held(1, rec("t", "a", "b"))).replace(b"\x01\x00\x00\x00b",
                                                                 b"\x01\x00\x00\x00a")


@pytest.mark.parametrize("body", [b"", b"\x02", b"\x03\x03" + bytes(16), b"\x02\x09" + bytes(8),
                                  V1_FENCED, encode(Fenced(1, 2))[:-1], TWICE_THE_SAME_KEY,
                                  encode(Fenced(1, 2)) + b"\x00"])
def test_a_whole_record_that_does_not_decode_is_a_bug(body: bytes) -> None:
    with pytest.raises(Internal):
        decode(body)


def test_replay_refuses_an_unknown_entry_rather_than_guess(tmp_path: Path) -> None:
    run(tmp_path, history)
    segment = max(tmp_path.iterdir())
    with open(segment, "ab") as f:
        f.write(encode_record(b"\x02\x63unknown kind"))
    with pytest.raises(Internal, match="unknown kind"):
        reopened(tmp_path)


def test_a_gc_costs_no_sync_of_its_own_and_replays_in_order(tmp_path: Path) -> None:
    """An owner drops records with every block it syncs: each drop's entry waits for the
    next record's group commit (or GC_FLUSH_S), and still lands before it in the journal —
    a record of the key the drop freed replays after the drop, not into a clash."""
    async def body(store: WitnessStore) -> None:
        await store.record(1, [rec("a", "k1")])
        syncs, held = store.journal.syncs, store.journal.held_bytes()
        store.gc(1, [b"a"], epoch=1)
        for _ in range(20):  # turns in which a submitted entry's sync would have begun
            await asyncio.sleep(0)
        assert store.journal.syncs == syncs and store.journal.held_bytes() == held, \
            "a drop was written with a sync of its own"
        assert await store.record(1, [rec("b", "k1")]) == [Verdict.ACCEPTED]
        assert store.journal.syncs == syncs + 1  # the drop went with it
        store.gc(1, [b"b"], epoch=1)
        async def synced() -> bool:
            return store.journal.syncs == syncs + 2
        await wait_for(synced, 5.0, "a drop alone made durable after GC_FLUSH_S")
    run(tmp_path, body)
    assert not reopened(tmp_path).records
