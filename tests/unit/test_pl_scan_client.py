"""The cross-partition scanner (partition_layer/scan_client.py) against fake partition
servers that answer with the real page logic (scan_stream.pages over in-memory runs):
key order across partitions, a stale map (a partition split under it), a stream that breaks
mid-partition, limits, and how many partitions are read at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from common.config import PartitionLimits
from common.errors import NotOwner, Unavailable
from common.proto import partition_pb2 as pb
from partition_layer import keys
from partition_layer.partition_map import PartitionEntry, PartitionMap
from partition_layer.rows import LogMeta, Row, encode_row
from partition_layer.scan_client import key_after, scan
from partition_layer.scan_stream import PageLimits, Snapshot, clamp, clamp_to_partition, pages

ACCOUNT = "acct"


def ekey(pname: str, row: bytes) -> bytes:
    return keys.encode_key(ACCOUNT, pname, keys.KIND_ENTITY, row)


class MemRun:
    def __init__(self, rows: list[tuple[bytes, bytes]]) -> None:
        self.rows = rows

    async def scan(self, start: bytes = b"", end: bytes | None = None
                   ) -> AsyncIterator[tuple[bytes, bytes]]:
        for key, row in self.rows:
            if key >= start and (end is None or key < end):
                yield key, row


def make_map(version: int, bounds: list[bytes]) -> PartitionMap:
    lows = [b"", *bounds]
    highs: list[bytes | None] = [*bounds, None]
    return PartitionMap(version, tuple(PartitionEntry(i + 1, lo, hi, f"ps-{i + 1}")
                                       for i, (lo, hi) in enumerate(zip(lows, highs,
                                                                        strict=True))))


class FakeRouter:
    """Servers named by partition id; `truth` is the map the servers act on, `map` the
    client's cached one (refreshed to the truth on demand)."""

    def __init__(self, rows: dict[bytes, bytes], truth: PartitionMap,
                 cached: PartitionMap | None = None) -> None:
        self.rows = sorted(rows.items())
        self.truth = truth
        self.map: PartitionMap | None = cached or truth
        self.limits = PartitionLimits(client_timeout_ms=5000)
        self.break_after_first_page: set[int] = set()  # partition ids, once each
        self.open_now = 0
        self.open_max = 0
        self.opened = 0

    async def refresh_map(self) -> None:
        self.map = self.truth

    async def address_for(self, key: bytes) -> str:
        assert self.map is not None
        return str(self.map.lookup(key).id)

    async def scan_stream(self, address: str, request: pb.PartitionScanRequest
                          ) -> AsyncIterator[pb.PartitionScanPage]:
        start, end = clamp(request.account, request.start_key,
                           request.end_key if request.has_end else None)
        if start >= end:
            yield pb.PartitionScanPage(done=True)
            return
        entry = self.truth.lookup(start)
        if str(entry.id) != address:
            raise NotOwner(f"{address} does not hold that key")
        end, at_end = clamp_to_partition(end, keys.KeyRange(entry.low, entry.high))
        snapshot = Snapshot([], None, [MemRun(self.rows)], start, end)
        self.open_now += 1
        self.opened += 1
        self.open_max = max(self.open_max, self.open_now)
        try:
            n = 0
            async for page in pages(snapshot, request.mode, start, at_end,
                                    PageLimits(request, self.limits), _no_blob, _served):
                if n == 1 and entry.id in self.break_after_first_page:
                    self.break_after_first_page.discard(entry.id)
                    raise Unavailable("the server died")
                n += 1
                await asyncio.sleep(0)
                yield page
        finally:
            self.open_now -= 1


async def _no_blob(row: Row) -> bytes:
    raise AssertionError("no blobs here")


def _served() -> None:
    pass


def entity_rows(groups: int, per_group: int) -> dict[bytes, bytes]:
    rows = {}
    for g in range(groups):
        for r in range(per_group):
            rows[ekey(f"g{g:02}", b"r%03d" % r)] = encode_row(Row(1, value=b"v%d.%d" % (g, r)))
    return rows


def collect(router: FakeRouter, **kwargs: object) -> list[tuple[str, bytes]]:
    async def go() -> list[tuple[str, bytes]]:
        got = []
        async for page in scan(router, ACCOUNT, b"", None, **kwargs):  # type: ignore[arg-type]
            got += [(i.pname, i.row) for i in page.items]
            assert page.resume_key == key_after(ACCOUNT, kwargs.get("mode", pb.SCAN_ENTITIES),
                                                page.items[-1])
        return got
    return asyncio.run(go())


def expected(rows: dict[bytes, bytes]) -> list[tuple[str, bytes]]:
    return [(keys.decode_key(k)[1], keys.decode_key(k)[3]) for k in sorted(rows)]


BOUNDS = [ekey("g02", b"r005"), ekey("g05", b""), ekey("g07", b"r019")]


def test_every_row_once_in_key_order_across_partitions() -> None:
    rows = entity_rows(10, 20)
    router = FakeRouter(rows, make_map(1, BOUNDS))
    assert collect(router, page_rows=7, in_flight=2) == expected(rows)
    assert router.open_max <= 2 and router.opened == 4


def test_a_partition_split_under_a_stale_map_is_followed() -> None:
    rows = entity_rows(10, 20)
    router = FakeRouter(rows, make_map(2, BOUNDS), cached=make_map(1, []))
    assert collect(router, page_rows=9) == expected(rows)


def test_a_broken_stream_resumes_after_its_last_item() -> None:
    rows = entity_rows(10, 20)
    router = FakeRouter(rows, make_map(1, BOUNDS))
    router.break_after_first_page = {1, 3, 4}
    assert collect(router, page_rows=6, in_flight=3) == expected(rows)
    assert not router.break_after_first_page  # each broke once


@pytest.mark.parametrize("limit", [1, 5, 44, 45, 46, 200, 500])
def test_limit(limit: int) -> None:
    rows = entity_rows(10, 20)
    router = FakeRouter(rows, make_map(1, BOUNDS))
    assert collect(router, page_rows=10, limit=limit) == expected(rows)[:limit]


def test_log_names_across_partitions() -> None:
    rows = {}
    for n in range(12):
        rows[keys.encode_key(ACCOUNT, f"log{n:02}", keys.KIND_META, b"")] = encode_row(
            Row(1, value=LogMeta(0, 3, False).encode()))
        for seq in range(3):
            rows[keys.encode_key(ACCOUNT, f"log{n:02}", keys.KIND_RECORD,
                                 keys.seq_row(seq))] = encode_row(Row(1, value=b"r"))
    bounds = [keys.encode_key(ACCOUNT, "log03", keys.KIND_RECORD, keys.seq_row(1)),
              keys.encode_key(ACCOUNT, "log08", keys.KIND_META, b"")]
    router = FakeRouter(rows, make_map(1, bounds))
    got = collect(router, mode=pb.SCAN_LOG_NAMES, page_rows=2)
    assert [name for name, _ in got] == [f"log{n:02}" for n in range(12)]
