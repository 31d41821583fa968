"""The partition manager's history (bounded, encoded, read back as the wire shows it) and
its pending-operation resolution rules (pending_resolution.resolve), on tables."""

from __future__ import annotations

from dataclasses import replace

import pytest

from partition_layer import pending_resolution as pr
from partition_layer.history import (
    HISTORY_KEPT,
    RESULT_CHARS_MAX,
    HistoryEntry,
    appended,
    changed_at,
    decode,
    encode,
    moved_at,
)
from partition_layer.partition_map import PendingOp


def entry(i: int, op: str = "split") -> HistoryEntry:
    return HistoryEntry(op, "operator", (i,), (i + 1000, i + 2000), started_at=1000.0 + i,
                        seconds=0.5, unavailable_s=0.01, map_version=i, key=b"\x01k",
                        server="ps-1")


def test_history_keeps_only_the_newest() -> None:
    entries: list[HistoryEntry] = []
    for i in range(HISTORY_KEPT + 25):
        entries = appended(entries, entry(i))
        assert len(entries) == min(i + 1, HISTORY_KEPT)
    assert entries[0] == entry(25) and entries[-1] == entry(HISTORY_KEPT + 24)
    assert appended([entry(1), entry(2)], entry(3), kept=2) == [entry(2), entry(3)]


def test_history_fits_in_one_lock_service_value() -> None:
    long = HistoryEntry("split", "load", (1,), (), 1.0, result="failed: " + "x" * 5000)
    kept = appended([], long)
    assert len(kept[0].result) == RESULT_CHARS_MAX and kept[0].result.endswith("...")
    entries: list[HistoryEntry] = []
    for i in range(HISTORY_KEPT):
        entries = appended(entries, replace(long, started_at=float(i)), bytes_max=20_000)
        assert len(encode(entries)) <= 20_000
    assert entries[-1].started_at == HISTORY_KEPT - 1  # the newest always stays
    assert len(encode(appended([], long, bytes_max=10))) > 10  # even alone


def test_history_round_trips_through_json_and_protobuf() -> None:
    kept = [entry(1), HistoryEntry("reassign", "dead server", (4,), (4,), 5.0, server="ps-2"),
            HistoryEntry("merge", "count", (2, 3), (), 6.0, result="failed: not adjacent")]
    assert decode(encode(kept)) == kept
    for e in kept:
        assert HistoryEntry.from_pb(e.to_pb()) == e


def test_changed_at_is_when_an_operation_last_touched_a_partition() -> None:
    found = changed_at([entry(1), HistoryEntry("merge", "count", (1001, 2001), (7,), 2000.0,
                                               seconds=1.0)])
    assert found[1] == 1001.5 and found[1001] == 2001.0 and found[7] == 2001.0


def test_moved_at_is_when_a_move_last_took_a_partition_elsewhere() -> None:
    moves = [HistoryEntry("move", "load", (7,), (7,), 3000.0, seconds=0.5),
             HistoryEntry("move", "load", (8,), (), 3100.0, seconds=0.5)]  # failed
    assert moved_at([entry(1), *moves]) == {7: 3000.5}


SPLIT = PendingOp("split", "ps-1", 5, 6, parent=1, key=b"\x01k")
LIVE = {"ps-1", "ps-2"}


@pytest.mark.parametrize(("op", "committed", "live", "spare", "action", "server"), [
    # committed: publish where it is, or on the spare if its server died; never retry it
    (SPLIT, True, LIVE, "ps-2", pr.PUBLISH, "ps-1"),
    (SPLIT, True, {"ps-2"}, "ps-2", pr.PUBLISH, "ps-2"),
    (SPLIT, True, set(), None, pr.WAIT, ""),
    # the stream manager did not say: never guess
    (SPLIT, None, LIVE, "ps-2", pr.WAIT, ""),
    # not committed: call again, on a new server if its own died, roll back after the bound
    (SPLIT, False, LIVE, "ps-2", pr.RETRY, "ps-1"),
    (SPLIT, False, {"ps-2"}, "ps-2", pr.REASSIGN, "ps-2"),
    (SPLIT, False, set(), None, pr.WAIT, ""),
    (PendingOp("split", "ps-1", 5, 6, parent=1, key=b"\x01k", attempts=3), False, LIVE, "ps-2",
     pr.ROLL_BACK, ""),
    (PendingOp("merge", "ps-1", 2, 3, merged=7, attempts=3), False, set(), None,
     pr.ROLL_BACK, ""),
    # a committed op is published however many attempts failed before
    (PendingOp("merge", "ps-1", 2, 3, merged=7, attempts=9), True, LIVE, "ps-2",
     pr.PUBLISH, "ps-1"),
])
def test_pending_resolution(op: PendingOp, committed: bool | None, live: set[str],
                            spare: str | None, action: str, server: str) -> None:
    decision = pr.resolve(op, committed, live, spare, attempts_max=3)
    assert (decision.action, decision.server) == (action, server)
    assert decision.why
