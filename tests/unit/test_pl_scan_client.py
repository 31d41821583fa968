"""The cross-partition scanner (partition_layer/scan_client.py) against fake partition
servers that answer with the real page logic (scan_stream.pages over in-memory runs):
key order across partitions, a stale map (a partition split under it), a stream that breaks
mid-partition, limits, how many partitions are read at once, and that no end of a scan
waits forever (a read-ahead page arriving as the limit ends the scan, a lost cancellation, a
segment ending without its end marker)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.config import PartitionLimits
from common.errors import Internal, NotOwner, Unavailable
from common.proto import partition_pb2 as pb
from partition_layer import keys
from partition_layer.partition_map import PartitionEntry, PartitionMap
from partition_layer.rows import LogMeta, Row, encode_row
from partition_layer.scan_client import key_after, scan
from partition_layer.scan_snapshot import Snapshot
from partition_layer.scan_stream import PageLimits, clamp, clamp_to_partition, pages

ACCOUNT = "acct"


def ekey(pname: str, row: bytes) -> bytes:
    return keys.encode_key(ACCOUNT, pname, keys.KIND_ENTITY, row)


class MemRun:
    def __init__(self, rows: list[tuple[bytes, bytes]]) -> None:
        self.rows = rows

    async def scan_blocks(self, start: bytes = b"", end: bytes | None = None
                          ) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        wanted = [(k, r) for k, r in self.rows if k >= start and (end is None or k < end)]
        for i in range(0, len(wanted), 16):
            yield wanted[i:i + 16]


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


def test_a_bug_in_a_stream_fails_the_scan_instead_of_hanging() -> None:
    router = FakeRouter(entity_rows(10, 20), make_map(1, BOUNDS))

    async def broken(address: str, request: pb.PartitionScanRequest
                     ) -> AsyncIterator[pb.PartitionScanPage]:
        raise RuntimeError("a bug")
        yield pb.PartitionScanPage()  # an async generator

    router.scan_stream = broken  # type: ignore[method-assign]

    async def go() -> None:
        async for _ in scan(router, ACCOUNT, b"", None):
            pass
    with pytest.raises(Internal, match="a bug"):
        asyncio.run(asyncio.wait_for(go(), 10))


class GatedRouter(FakeRouter):
    """Partition 2's stream holds its first page until `release` is set: a test decides the
    exact moment a read-ahead segment's page arrives."""

    def __init__(self, rows: dict[bytes, bytes], truth: PartitionMap) -> None:
        super().__init__(rows, truth)
        self.release = asyncio.Event()
        self.streams_held = 0

    async def scan_stream(self, address: str, request: pb.PartitionScanRequest
                          ) -> AsyncIterator[pb.PartitionScanPage]:
        if address != "2":
            async for page in super().scan_stream(address, request):
                yield page
            return
        # Read ahead of the release, so that the first page is ready the very moment the
        # release wakes this stream (the fake server's pause before each page would hide it).
        ready = [page async for page in super().scan_stream(address, request)]
        self.streams_held += 1
        try:
            await self.release.wait()
            for page in ready:
                yield page
        finally:
            self.streams_held -= 1


async def _finishes(coro: object, timeout_s: float = 10.0) -> object:
    """`coro`'s result; fails (instead of hanging) when it has not finished in time. The task
    is waited for, not cancelled by the timeout: a scan that swallowed the cancellation would
    otherwise 'finish' late and pass."""
    task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    assert task in done, f"the scan hung (no progress in {timeout_s:g}s)"
    return task.result()


def test_the_limit_reached_as_a_read_ahead_page_arrives_does_not_hang(
        caplog: pytest.LogCaptureFixture) -> None:
    # The first partition holds 45 rows: a limit of 45 ends the scan in it. Its last page is
    # the moment partition 2's page is let through, so that the read-ahead segment's page
    # and its cancellation arrive in the same loop turn (asyncio.wait_for in 3.11 then
    # returned the page and dropped the cancellation: the segment filled its queue and the
    # scan waited for it forever, with no timer pending).
    rows = entity_rows(10, 20)
    router = GatedRouter(rows, make_map(1, BOUNDS))

    async def go() -> list[tuple[str, bytes]]:
        got = []
        async for page in scan(router, ACCOUNT, b"", None, limit=45, page_rows=5,
                               in_flight=3):
            got += [(i.pname, i.row) for i in page.items]
            if len(got) == 45:
                router.release.set()
        return got

    async def main() -> object:
        return await _finishes(go())
    assert asyncio.run(main()) == expected(rows)[:45]
    assert router.streams_held == 0  # every stream closed
    assert "cancelled again" not in caplog.text  # the first cancellation was not lost


class SwallowingRouter(FakeRouter):
    """Partition 2's stream loses its first cancellation (as a library with the wait_for race
    does) and goes on yielding pages."""

    def __init__(self, rows: dict[bytes, bytes], truth: PartitionMap) -> None:
        super().__init__(rows, truth)
        self.swallowed = 0

    async def scan_stream(self, address: str, request: pb.PartitionScanRequest
                          ) -> AsyncIterator[pb.PartitionScanPage]:
        ready = [page async for page in super().scan_stream(address, request)]
        if address == "2":
            try:
                await asyncio.Event().wait()  # until cancelled
            except asyncio.CancelledError:
                self.swallowed += 1
        for page in ready:
            yield page


def test_a_lost_cancellation_of_a_segment_is_repeated() -> None:
    rows = entity_rows(10, 20)
    router = SwallowingRouter(rows, make_map(1, BOUNDS))

    async def go() -> list[tuple[str, bytes]]:
        got = []
        async for page in scan(router, ACCOUNT, b"", None, limit=45, page_rows=5):
            got += [(i.pname, i.row) for i in page.items]
        return got

    async def main() -> object:
        return await _finishes(go())
    assert asyncio.run(main()) == expected(rows)[:45]
    assert router.swallowed == 1


class Escape(BaseException):
    """Not an Exception: the segment's error handling does not see it."""


def test_a_segment_ending_without_its_end_marker_fails_the_scan() -> None:
    router = FakeRouter(entity_rows(10, 20), make_map(1, BOUNDS))

    async def escaping(address: str, request: pb.PartitionScanRequest
                       ) -> AsyncIterator[pb.PartitionScanPage]:
        raise Escape()
        yield pb.PartitionScanPage()  # an async generator

    router.scan_stream = escaping  # type: ignore[method-assign]

    async def go() -> None:
        async for _ in scan(router, ACCOUNT, b"", None):
            pass

    async def main() -> object:
        return await _finishes(go())
    with pytest.raises(Internal, match="without its end marker"):
        asyncio.run(main())


@settings(max_examples=60, deadline=None)
@given(limit=st.integers(0, 210), page_rows=st.integers(1, 50), in_flight=st.integers(1, 4))
def test_any_limit_ends_the_scan_and_closes_every_stream(limit: int, page_rows: int,
                                                         in_flight: int) -> None:
    # Limits and pages that end at a page's, a partition's or the data's end, or inside them.
    rows = entity_rows(10, 20)
    router = FakeRouter(rows, make_map(1, BOUNDS))

    async def go() -> list[tuple[str, bytes]]:
        got = []
        async for page in scan(router, ACCOUNT, b"", None, limit=limit, page_rows=page_rows,
                               in_flight=in_flight):
            got += [(i.pname, i.row) for i in page.items]
        return got

    async def main() -> object:
        return await _finishes(go())
    assert asyncio.run(main()) == expected(rows)[:limit or None]
    assert router.open_now == 0 and router.open_max <= in_flight
