"""The SDK's scan cursor, continuations and iterator (stampsdk/scan.py), against a dumb
reference front end: a sorted list of items served in pages whose continuations are the
front end's own (frontend/scan.py); after an item mid-page the SDK makes its own, which
resumes from the page's start and skips what was yielded."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stampsdk._proto import frontend_v1_pb2 as pb
from stampsdk.errors import ChecksumError, InvalidArgument
from stampsdk.limits import Limits
from stampsdk.scan import (
    AsyncScanIterator,
    Entity,
    Resume,
    ScanCursor,
    ScanRange,
    decode_continuation,
    encode_mid,
    encode_token,
)

from tests.support.scan_reference import ITEMS, KEYS, ReferenceFrontEnd, item

LIMITS = Limits()


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
    cursor = ScanCursor("acct", ScanRange.of(start, end, LIMITS), limit, None, continuation)
    return AsyncScanIterator(cursor, fe.source, continuation)


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
    assert fe.requests[1].limit == 5  # 2 received before the break
    assert keys(collect(scan(ReferenceFrontEnd(ITEMS), continuation=it.continuation))) == \
        KEYS[7:]


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


@settings(max_examples=30, deadline=None)
@given(stop=st.integers(1, len(ITEMS) - 1), page_rows=st.integers(2, 6))
def test_a_mid_page_continuation_starts_at_the_page_and_skips_what_was_yielded(
        stop: int, page_rows: int) -> None:
    """Stopping after item `stop` inside a page gives the front end's token of that page's
    start and the item's key (never a token of the front end's form made by the SDK)."""
    it = scan(ReferenceFrontEnd(ITEMS, page_rows))
    collect(it, stop)
    pages = ReferenceFrontEnd(ITEMS, page_rows).pages(ScanCursor("acct", ScanRange()).request())
    page = (stop - 1) // page_rows
    token = pages[page - 1].continuation if page else b""
    if stop % page_rows == 0:  # the page's last item: the front end's own token
        assert it.continuation == encode_token(pages[page].continuation)
    else:
        assert decode_continuation(it.continuation) == Resume(token, KEYS[stop - 1])


def test_a_limit_cut_resumes_with_the_rest_of_the_limit_not_one_more() -> None:
    cursor = ScanCursor("acct", ScanRange(), limit=3)
    batch, after = cursor.accept(pb.ScanPage(items=ITEMS[:4], continuation=b"t"))
    assert keys(batch) == KEYS[:3] and cursor.finished
    assert decode_continuation(after) == Resume(b"", ("aaa", b"3"))
    resumed = scan(ReferenceFrontEnd(ITEMS), continuation=after, limit=2)
    assert keys(collect(resumed)) == KEYS[3:5]
    assert keys(collect(scan(ReferenceFrontEnd(ITEMS), continuation=resumed.continuation))) \
        == KEYS[5:]


def test_log_names_scan_in_log_name_mode_under_the_prefix() -> None:
    request = ScanCursor("acct", ScanRange.log_names("ord")).request()
    assert (request.mode, request.prefix, request.account) == (pb.SCAN_LOG_NAMES, "ord",
                                                                "acct")
    with pytest.raises(InvalidArgument, match="prefix"):
        ScanRange.log_names("Bad/")


def test_continuations_round_trip_and_garbage_is_refused() -> None:
    assert decode_continuation(encode_token(b"\x00\xffabc")) == Resume(b"\x00\xffabc")
    assert decode_continuation(encode_mid(b"\x01t", "abc", b"\x00r")) == Resume(
        b"\x01t", ("abc", b"\x00r"))
    assert decode_continuation(encode_mid(b"", "abc", b"")) == Resume(b"", ("abc", b""))
    assert encode_token(b"\xfb\xffxyz").replace("-", "").replace("_", "").isalnum()
    for bad in ("", "~", "!!", "a=b", "~AAE", "x" * 20000, 5, b"abc", "~" + "_" * 7,
                encode_mid(b"", "abc", b"")[:-2], encode_mid(b"t", "a", b"")):
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
        ScanCursor("acct", ScanRange.of(start, end, LIMITS), limit, page_rows)


def test_a_continuation_of_another_range_is_refused() -> None:
    head = scan(ReferenceFrontEnd(ITEMS), start="aaa")
    collect(head, 2)
    with pytest.raises(InvalidArgument, match="range"):
        collect(scan(ReferenceFrontEnd(ITEMS), continuation=head.continuation, start="bbb"))
    got = collect(scan(ReferenceFrontEnd(ITEMS), continuation=head.continuation, start="aaa"))
    assert keys(got) == KEYS[2:]


@settings(max_examples=200, deadline=None)
@given(token=st.binary(min_size=1, max_size=200))
def test_any_token_survives_its_continuation(token: bytes) -> None:
    assert decode_continuation(encode_token(token)) == Resume(token)
    assert decode_continuation(encode_mid(token, "abc", token)) == Resume(token, ("abc", token))
