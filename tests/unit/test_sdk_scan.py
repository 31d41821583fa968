"""The SDK's scan cursor, continuations and iterator (frontend/sdk_scan.py), against a dumb
reference front end: a sorted list of items served in pages whose token is the last key."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.checksums import crc32c
from common.config import PartitionLimits
from common.errors import ChecksumError, InvalidArgument
from common.proto import frontend_pb2 as fe_pb
from common.proto import partition_pb2 as pb
from frontend.sdk_scan import (
    AsyncScanIterator,
    Batches,
    Entity,
    Resume,
    ScanCursor,
    ScanRange,
    decode_continuation,
    encode_key,
    encode_token,
)

LIMITS = PartitionLimits()


def item(pname: str, row: bytes, value: bytes = b"v") -> pb.ScanItem:
    return pb.ScanItem(pname=pname, row=row, value=value, etag="e", crc=crc32c(value))


class ReferenceFrontEnd:
    """Serves `items` (sorted by (pname, row)) as a front end would: from the request's
    continuation (here: the last key sent) or start, up to its end, `page_rows` a page,
    `limit` in all; `break_after`: pages sent before a stream breaks (once each)."""

    def __init__(self, items: list[pb.ScanItem], page_rows: int = 3,
                 break_after: list[int] | None = None) -> None:
        self.items = sorted(items, key=lambda i: (i.pname, i.row))
        self.page_rows = page_rows
        self.break_after = list(break_after or [])
        self.requests: list[fe_pb.ScanRequest] = []

    def pages(self, request: fe_pb.ScanRequest) -> list[fe_pb.ScanPage]:
        self.requests.append(request)
        if request.continuation:
            pname, _, row = request.continuation.partition(b"\x00")
            rest = [i for i in self.items if (i.pname, i.row) > (pname.decode(), row)]
        else:
            start = (request.start_pname, request.start_row)
            rest = [i for i in self.items if (i.pname, i.row) >= start]
        if request.has_end:
            rest = [i for i in rest if (i.pname, i.row) < (request.end_pname, request.end_row)]
        if request.limit:
            rest = rest[:request.limit]
        size = request.page_rows or self.page_rows
        pages = []
        for at in range(0, len(rest), size):
            chunk = rest[at:at + size]
            last = chunk[-1]
            more = at + size < len(rest)
            pages.append(fe_pb.ScanPage(items=chunk, continuation=(
                last.pname.encode() + b"\x00" + last.row) if more else b""))
        return pages or [fe_pb.ScanPage()]

    def source(self, cursor: ScanCursor) -> Batches:
        """What aio.Client._scan_batches does, minus the network: a broken stream is
        reopened from the cursor's request."""
        async def batches() -> AsyncIterator:
            while not cursor.finished:
                pages = self.pages(cursor.request("acct"))
                broken = self.break_after.pop(0) if self.break_after else None
                for n, page in enumerate(pages):
                    if broken is not None and n == broken:
                        break
                    yield cursor.accept(page)
                else:
                    cursor.finished = True
        return batches()


def collect(it: AsyncScanIterator, n: int | None = None) -> list[Entity]:
    async def run() -> list[Entity]:
        out = []
        async for entity in it:
            out.append(entity)
            if n is not None and len(out) == n:
                break
        return out
    return asyncio.run(run())


def scan(fe: ReferenceFrontEnd, continuation: str | None = None, limit: int | None = None,
         start: object = None, end: object = None) -> AsyncScanIterator:
    cursor = ScanCursor(ScanRange.of(start, end, LIMITS), limit, None, continuation)
    return AsyncScanIterator(cursor, fe.source, continuation)


ITEMS = [item(p, r) for p in ("aaa", "bbb", "ccc") for r in (b"1", b"2", b"3", b"4")]
KEYS = [(i.pname, i.row) for i in ITEMS]


def keys(entities: list[Entity]) -> list[tuple[str, bytes]]:
    return [(e.pname, e.row) for e in entities]


def test_a_scan_yields_every_item_in_order_and_ends_with_no_continuation() -> None:
    it = scan(ReferenceFrontEnd(ITEMS))
    assert it.continuation is None
    assert keys(collect(it)) == KEYS
    assert it.continuation is None


def test_range_bounds_are_sent_as_asked() -> None:
    fe = ReferenceFrontEnd(ITEMS)
    got = collect(scan(fe, start=("bbb", b"2"), end="ccc"))
    assert keys(got) == [("bbb", b"2"), ("bbb", b"3"), ("bbb", b"4")]
    request = fe.requests[0]
    assert (request.start_pname, request.start_row, request.has_end, request.end_pname,
            request.end_row) == ("bbb", b"2", True, "ccc", b"")


@settings(max_examples=60, deadline=None)
@given(stop=st.integers(1, len(ITEMS)), page_rows=st.integers(1, 5),
       limit=st.none() | st.integers(1, 20))
def test_a_continuation_resumes_exactly_after_the_last_item_yielded(
        stop: int, page_rows: int, limit: int | None) -> None:
    expected = KEYS[:limit] if limit else KEYS
    stop = min(stop, len(expected))
    first = scan(ReferenceFrontEnd(ITEMS, page_rows), limit=limit)
    head = keys(collect(first, stop))
    assert head == expected[:stop]
    token = first.continuation
    if token is None:
        assert stop == len(KEYS)  # None only once the whole scan is done
        return
    rest = keys(collect(scan(ReferenceFrontEnd(ITEMS, page_rows), continuation=token)))
    assert head + rest == KEYS


def test_a_broken_stream_is_resumed_after_the_last_page_with_nothing_lost_or_repeated(
        ) -> None:
    fe = ReferenceFrontEnd(ITEMS, page_rows=2, break_after=[1, 0, 2])
    assert keys(collect(scan(fe))) == KEYS
    assert len(fe.requests) > 3


def test_a_limit_is_kept_across_broken_streams() -> None:
    fe = ReferenceFrontEnd(ITEMS, page_rows=2, break_after=[1, 1])
    it = scan(fe, limit=7)
    assert keys(collect(it)) == KEYS[:7]
    assert it.continuation == encode_key(*KEYS[6])
    assert fe.requests[1].limit == 5  # 2 received before the break


def test_pages_carry_their_continuation_and_start_with_the_rest_of_the_current_page(
        ) -> None:
    it = scan(ReferenceFrontEnd(ITEMS, page_rows=4))

    async def run() -> list:
        await it.__anext__()
        return [page async for page in it.pages()]
    pages = asyncio.run(run())
    assert [len(p.items) for p in pages] == [3, 4, 4]
    assert pages[-1].continuation is None
    resumed = collect(scan(ReferenceFrontEnd(ITEMS), continuation=pages[0].continuation))
    assert keys(resumed) == KEYS[4:]


def test_a_corrupted_value_fails_with_a_checksum_error() -> None:
    bad = item("aaa", b"9", b"value")
    bad.value = b"valuf"
    with pytest.raises(ChecksumError):
        collect(scan(ReferenceFrontEnd([*ITEMS, bad])))


def test_a_key_continuation_drops_its_own_key_and_asks_for_one_more() -> None:
    cursor = ScanCursor(ScanRange(), limit=3, continuation=encode_key("bbb", b"2"))
    request = cursor.request("acct")
    assert (request.start_pname, request.start_row, request.limit) == ("bbb", b"2", 4)
    batch, _ = cursor.accept(fe_pb.ScanPage(items=[item("bbb", b"2"), item("bbb", b"3")],
                                            continuation=b"t"))
    assert [e.row for e in batch] == [b"3"]


def test_log_names_scan_in_log_name_mode_under_the_prefix() -> None:
    request = ScanCursor(ScanRange.log_names("ord")).request("acct")
    assert (request.mode, request.prefix, request.account) == (pb.SCAN_LOG_NAMES, "ord",
                                                                "acct")
    with pytest.raises(InvalidArgument, match="prefix"):
        ScanRange.log_names("Bad/")


def test_continuations_round_trip_and_garbage_is_refused() -> None:
    assert decode_continuation(encode_token(b"\x00\xffabc")) == Resume(token=b"\x00\xffabc")
    assert decode_continuation(encode_key("aaa", b"\x00r")) == Resume(key=("aaa", b"\x00r"))
    for text in (encode_key("aaa", b"r"), encode_token(b"xyz")):
        assert text.replace("-", "").replace("_", "").replace("~", "").isalnum()
    for bad in ("", "~", "!!", "a=b", "~AAE", "x" * 20000, 5, b"abc", "~" + "_" * 7):
        with pytest.raises(InvalidArgument, match="continuation"):
            decode_continuation(bad)


@pytest.mark.parametrize("start, end, limit, page_rows, match", [
    ("Bad", None, None, None, "partition name"),
    (("aaa",), None, None, None, "start"),
    (("aaa", b""), None, None, None, "row key"),
    (None, ("aaa", 5), None, None, "row key"),
    (None, None, 0, None, "limit"),
    (None, None, -1, None, "limit"),
    (None, None, True, None, "limit"),
    (None, None, None, 0, "page_rows"),
    (None, None, None, 2**40, "page_rows"),
])
def test_bad_scan_arguments_name_the_rule(start: object, end: object, limit: object,
                                          page_rows: object, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        ScanCursor(ScanRange.of(start, end, LIMITS), limit, page_rows)


def test_a_key_continuation_before_the_range_starts_at_the_range() -> None:
    fe = ReferenceFrontEnd(ITEMS)
    got = collect(scan(fe, continuation=encode_key("aaa", b"2"), start="bbb"))
    assert keys(got) == KEYS[4:]
    got = collect(scan(fe, continuation=encode_key("bbb", b"2"), start="bbb"))
    assert keys(got) == KEYS[6:]


@settings(max_examples=200, deadline=None)
@given(pname=st.text(max_size=70), row=st.binary(max_size=1100),
       token=st.binary(min_size=1, max_size=200))
def test_any_key_or_token_survives_its_continuation(pname: str, row: bytes, token: bytes
                                                   ) -> None:
    assert decode_continuation(encode_key(pname, row)) == Resume(key=(pname, row))
    assert decode_continuation(encode_token(token)) == Resume(token=token)
