"""The PS Scan stream's pure parts (partition_layer/scan_stream.py): the snapshot over a
memtable copy, a frozen memtable and runs; paging, resume keys, limits; entity and log-name
modes, and that a log's records are skipped without being read."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import pytest

from common.checksums import crc32c
from common.config import PartitionLimits
from common.errors import InvalidArgument, NotOwner
from common.proto import partition_pb2 as pb
from partition_layer import keys
from partition_layer.memtable import Memtable
from partition_layer.rows import ENTITY_GROUP, LogMeta, Row, encode_row, etag_of
from partition_layer.scan_stream import (
    SKIP_BY_READING_ROWS_MAX,
    PageLimits,
    Snapshot,
    clamp,
    clamp_to_partition,
    pages,
)

ACCOUNT = "acct"
LOW = keys.account_prefix(ACCOUNT)
HIGH = keys.prefix_end(LOW)
assert HIGH is not None


class FakeRun:
    """A sorted run in memory that counts the rows it hands out."""

    def __init__(self, rows: dict[bytes, bytes]) -> None:
        self.rows = sorted(rows.items())
        self.read = 0

    async def scan(self, start: bytes = b"", end: bytes | None = None
                   ) -> AsyncIterator[tuple[bytes, bytes]]:
        for key, row in self.rows:
            if key >= start and (end is None or key < end):
                self.read += 1
                yield key, row


def entity(pname: str, row: str) -> bytes:
    return keys.encode_key(ACCOUNT, pname, keys.KIND_ENTITY, row.encode())


def meta(pname: str) -> bytes:
    return keys.encode_key(ACCOUNT, pname, keys.KIND_META, b"")


def value(v: bytes, version: int = 1) -> bytes:
    return encode_row(Row(version, value=v))


def log_rows(pname: str, records: int) -> dict[bytes, bytes]:
    rows = {meta(pname): value(LogMeta(0, records, False).encode())}
    for seq in range(records):
        rows[keys.encode_key(ACCOUNT, pname, keys.KIND_RECORD, keys.seq_row(seq))] = value(b"r")
    return rows


def collect(snapshot: Snapshot, mode: int, *, start: bytes = LOW, at_end: bytes = b"",
            page_rows: int = 0, limit: int = 0, check=lambda: None  # type: ignore[no-untyped-def]
            ) -> list[pb.PartitionScanPage]:
    bounds = PageLimits(pb.PartitionScanRequest(page_rows=page_rows, limit=limit),
                        PartitionLimits())

    async def blob(row: Row) -> bytes:
        raise AssertionError("no blob rows here")

    async def go() -> list[pb.PartitionScanPage]:
        return [p async for p in pages(snapshot, mode, start, at_end, bounds, blob, check)]
    return asyncio.run(go())


def items(result: list[pb.PartitionScanPage]) -> list[tuple[str, bytes, bytes]]:
    return [(i.pname, i.row, i.value) for p in result for i in p.items]


def test_snapshot_merges_newest_first_and_ignores_later_writes() -> None:
    old = FakeRun({entity("g", "a"): value(b"old-a"), entity("g", "b"): value(b"old-b"),
                   entity("g", "c"): value(b"old-c")})
    frozen = Memtable()
    frozen.put(entity("g", "b"), value(b"frozen-b", 2))
    frozen.freeze()
    live = Memtable()
    live.put(meta("g"), value(ENTITY_GROUP))
    live.put(entity("g", "c"), encode_row(Row(3, tombstone=True)))
    live.put(entity("g", "d"), value(b"live-d", 3))
    snapshot = Snapshot(list(live.items(LOW, HIGH)), frozen, [old], LOW, HIGH)
    live.put(entity("g", "e"), value(b"after", 4))  # after the snapshot: not seen
    live.put(entity("g", "a"), value(b"after", 4))
    result = collect(snapshot, pb.SCAN_ENTITIES)
    assert items(result) == [("g", b"a", b"old-a"), ("g", b"b", b"frozen-b"),
                             ("g", b"d", b"live-d")]
    last = result[-1]
    assert last.done and last.resume_key == b""
    item = result[0].items[0]
    assert item.crc == crc32c(b"old-a") and item.etag == etag_of(1)


def test_pages_resume_exactly_after_their_last_item() -> None:
    rows = {meta("g"): value(ENTITY_GROUP)}
    rows.update({entity("g", f"{i:03}"): value(b"v%d" % i) for i in range(10)})
    snapshot = Snapshot([], None, [FakeRun(rows)], LOW, HIGH)
    result = collect(snapshot, pb.SCAN_ENTITIES, page_rows=3, at_end=b"next-partition")
    assert [len(p.items) for p in result] == [3, 3, 3, 1]
    assert [p.done for p in result] == [False, False, False, True]
    assert result[-1].resume_key == b"next-partition"
    # Each resume key starts a scan at the next item, no sooner, no later.
    for page, following in itertools.pairwise(result):
        again = collect(snapshot, pb.SCAN_ENTITIES, start=page.resume_key)
        assert items(again)[0] == items([following])[0]


def test_limit_ends_the_stream_with_no_resume_key() -> None:
    rows = {entity("g", f"{i:03}"): value(b"v") for i in range(10)}
    result = collect(Snapshot([], None, [FakeRun(rows)], LOW, HIGH), pb.SCAN_ENTITIES,
                     page_rows=4, limit=6, at_end=b"beyond")
    assert [len(p.items) for p in result] == [4, 2]
    assert result[-1].done and result[-1].resume_key == b""


def test_entity_scan_skips_logs_tokens_and_a_logs_records_unread() -> None:
    rows = log_rows("a-log", 1000)
    rows[meta("b-group")] = value(ENTITY_GROUP)
    rows[keys.encode_key(ACCOUNT, "b-group", keys.KIND_TOKEN, b"t1")] = value(b"tok")
    rows[entity("b-group", "x")] = value(b"X")
    run = FakeRun(rows)
    result = collect(Snapshot([], None, [run], LOW, HIGH), pb.SCAN_ENTITIES)
    assert items(result) == [("b-group", b"x", b"X")]
    assert run.read < 3 * SKIP_BY_READING_ROWS_MAX + 10  # not the log's 1000 records


def test_log_names_one_item_per_log_reading_none_of_its_records() -> None:
    rows: dict[bytes, bytes] = {}
    for name in ("l1", "l2", "l3"):
        rows.update(log_rows(name, 500))
    rows.update(log_rows("tiny", 2))
    rows[meta("group")] = value(ENTITY_GROUP)
    rows.update({entity("group", f"{i}"): value(b"e") for i in range(100)})
    run = FakeRun(rows)
    snapshot = Snapshot([], None, [run], LOW, HIGH)
    result = collect(snapshot, pb.SCAN_LOG_NAMES)
    assert [i.pname for p in result for i in p.items] == ["l1", "l2", "l3", "tiny"]
    assert all(not i.row and not i.value for p in result for i in p.items)
    assert run.read < 6 * (SKIP_BY_READING_ROWS_MAX + 2)
    # A page's resume key is past the whole name: resuming there lists the next log.
    paged = collect(snapshot, pb.SCAN_LOG_NAMES, page_rows=1)
    assert [p.items[0].pname for p in paged if p.items] == ["l1", "l2", "l3", "tiny"]
    assert paged[0].resume_key == keys.prefix_end(keys.pname_prefix(ACCOUNT, "l1"))
    again = collect(snapshot, pb.SCAN_LOG_NAMES, start=paged[0].resume_key)
    assert [i.pname for p in again for i in p.items] == ["l2", "l3", "tiny"]


def test_a_stopped_partition_fails_the_next_page() -> None:
    rows = {entity("g", f"{i:03}"): value(b"v") for i in range(10)}
    served = [True]

    def check() -> None:
        if not served[0]:
            raise NotOwner("moved")

    async def go() -> list[pb.PartitionScanPage]:
        got = []
        bounds = PageLimits(pb.PartitionScanRequest(page_rows=2), PartitionLimits())
        snapshot = Snapshot([], None, [FakeRun(rows)], LOW, HIGH)
        async for page in pages(snapshot, pb.SCAN_ENTITIES, LOW, b"", bounds,
                                None, check):  # type: ignore[arg-type]
            got.append(page)
            served[0] = False
        return got
    with pytest.raises(NotOwner):
        asyncio.run(go())


def test_clamp_to_account_and_partition() -> None:
    assert clamp(ACCOUNT, b"", None) == (LOW, HIGH)
    assert clamp(ACCOUNT, b"\xff", b"\xff\xff") == (b"\xff", HIGH)  # empty: start >= end
    inside = entity("g", "m")
    assert clamp(ACCOUNT, inside, entity("g", "z")) == (inside, entity("g", "z"))
    with pytest.raises(InvalidArgument):
        clamp("", b"", None)
    assert clamp_to_partition(HIGH, keys.KeyRange(b"", inside)) == (inside, inside)
    assert clamp_to_partition(HIGH, keys.KeyRange(b"", None)) == (HIGH, b"")
    assert clamp_to_partition(inside, keys.KeyRange(b"", HIGH)) == (inside, b"")


def test_page_limits_are_capped_by_the_config() -> None:
    limits = PartitionLimits()
    bounds = PageLimits(pb.PartitionScanRequest(page_rows=10**9, page_bytes=2**31), limits)
    assert bounds.page_rows == limits.scan_rows_max
    assert bounds.page_bytes == limits.scan_page_bytes_max
    default = PageLimits(pb.PartitionScanRequest(), limits)
    assert default.page_rows == limits.scan_page_rows_default
