"""What a range partition still needs of its streams (issue 18, gc; partition_layer/
extent_needs.py), on tables: the commit log below the replay point, runs no record names,
blob values of trimmed, deleted or overwritten rows are not needed; the last and open
extents, and every extent from the earliest write in flight on, always are."""

from __future__ import annotations

import asyncio

import pytest

from partition_layer import extent_needs as n
from partition_layer.extent_needs import Listed
from partition_layer.merge import aiter_sync
from partition_layer.operations import entity_key, meta_key, record_key
from partition_layer.rows import BlobRef, LogMeta, Row, encode_row
from partition_layer.runs import RunInfo
from stream_layer.framing import Location


def listing(*ids: int, open_last: bool = True) -> list[Listed]:
    return [Listed(e, not (open_last and i == len(ids) - 1), 100 * e)
            for i, e in enumerate(ids)]


@pytest.mark.parametrize("ids, replay_extent, expected", [
    ((1, 2, 3, 4), 3, [1, 2]),        # the replay point's extent and later: replayed
    ((1, 2, 3, 4), 1, []),
    ((1, 2, 3, 4), 4, [1, 2, 3]),
    ((7, 2, 9), 2, [7]),              # stream order, not id order
    ((1, 2, 3), 99, []),              # a replay point the stream does not hold: keep all
])
def test_the_commit_log_below_the_replay_point_is_not_needed(
        ids: tuple[int, ...], replay_extent: int, expected: list[int]) -> None:
    assert n.log_unneeded(listing(*ids), Location(replay_extent, 10, 20)) == expected


def test_a_log_never_checkpointed_is_needed_whole() -> None:
    assert n.log_unneeded(listing(1, 2, 3), None) == []


def test_the_last_and_open_extents_are_always_needed() -> None:
    sealed_last = listing(1, 2, 3, open_last=False)
    assert n.data_unneeded(sealed_last, referenced=set()) == [1, 2]
    odd = [Listed(1, True), Listed(2, False), Listed(3, True), Listed(4, True)]
    assert n.data_unneeded(odd, referenced=set()) == [1, 3]


def test_data_extents_no_reference_needs_are_not_needed() -> None:
    assert n.data_unneeded(listing(1, 2, 3, 4, 5), referenced={2, 4}) == [1, 3]


@pytest.mark.parametrize("pinned, expected", [
    (set(), [1, 3, 4, 5]),
    ({4}, [1, 3]),       # a write in flight began when 4 was the last: 4 on are kept
    ({5, 3}, [1]),       # the earliest pin rules
    ({0}, []),           # the stream was empty when it began: keep everything
    ({42}, []),          # a pin the listing does not hold: keep everything
])
def test_writes_in_flight_keep_every_extent_from_where_they_began(
        pinned: set[int], expected: list[int]) -> None:
    assert n.data_unneeded(listing(1, 2, 3, 4, 5, 6), referenced={2}, pinned=pinned) \
        == expected


def test_a_run_needs_its_data_index_and_bloom_extents() -> None:
    info = RunInfo(1, (Location(7, 0, 10), Location(8, 0, 10)), (Location(8, 10, 5),),
                   3, 2, 100, b"a", b"c")
    assert n.run_extents(info, [Location(5, 0, 1), Location(6, 0, 1)]) == {5, 6, 7, 8}


def test_write_pins_record_writes_in_flight_and_those_begun_while_watched() -> None:
    pins = n.WritePins()
    with pins.pinned(3):
        with pins.watch() as seen:
            assert seen == {3}
            with pins.pinned(5):
                pass  # began and ended while watched: still recorded
        assert seen == {3, 5}
    assert pins.active == 0
    with pins.watch() as later:
        pass
    assert later == set()


def blob(extent_id: int) -> BlobRef:
    return BlobRef(Location(extent_id, 0, 10), 10)


def test_live_blobs_are_the_newest_untrimmed_undeleted_rows() -> None:
    log_meta = meta_key("acct", "log")
    older = {  # a run: every record of the log, and two entities
        log_meta: Row(1, value=LogMeta(0, 40, False).encode()),
        record_key("acct", "log", 9): Row(1, blob=blob(1)),
        record_key("acct", "log", 19): Row(2, blob=blob(2)),
        record_key("acct", "log", 29): Row(3, blob=blob(3)),
        record_key("acct", "log", 39): Row(4, blob=blob(4)),
        entity_key("acct", "grp", b"a"): Row(5, blob=blob(5)),
        entity_key("acct", "grp", b"b"): Row(6, blob=blob(6)),
    }
    newer = {  # the memtable: the log trimmed below 20, entity a deleted, b overwritten
        log_meta: Row(7, value=LogMeta(20, 40, False).encode()),
        entity_key("acct", "grp", b"a"): Row(8, tombstone=True),
        entity_key("acct", "grp", b"b"): Row(9, blob=blob(7)),
    }

    def source(rows: dict[bytes, Row]):  # type: ignore[no-untyped-def]
        return aiter_sync(sorted((k, encode_row(v)) for k, v in rows.items()))
    live = asyncio.run(n.live_blob_extents([source(newer), source(older)]))
    # Appends are rows keyed by their last record: those ending at 9 and 19 are wholly
    # trimmed; 20..39 are live; entity a is deleted; b's newest value only.
    assert live == {3, 4, 7}
