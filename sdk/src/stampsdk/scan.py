"""The SDK's scans (issue 16, DESIGN §5): what a scan's arguments mean, its continuation
tokens, and the iterator the SDK hands out.

A scan walks one account's entities in key order, (partition name, row), from `start` up to,
not including, `end` (each a partition name alone, meaning that name's first row, or a
(pname, row) pair; None: the account's first key, or its end), across range partitions, in
pages the front end streams (stamp.frontend.v1 `Scan`).

Continuations: `ScanIterator.continuation` resumes a scan (the same range, passed back as
`scan(..., continuation=...)`) exactly after the last item the iterator yielded. It is an
opaque, URL-safe string. At a page boundary it is the front end's own
`ScanPage.continuation` in unpadded URL-safe base64 (it survives splits and merges of the
partitions; a front end refuses one outside the scan's range: InvalidArgument). After an
item inside a page (the caller stopped mid-page, or `limit` cut the scan) it is `~` and the
base64 of the front end's continuation before that page (none at a fresh scan's start) and
the last item's key: the resumed scan starts there and skips what sorts at or before that
key. So the SDK never makes a front end's token (whose form is the stamp's business), and
what it skips is at most one page. None before anything was yielded from a fresh scan, and
once the scan is complete.

Contract of `ScanCursor` (pure: tested in tests/unit/test_sdk_scan.py): `request` says where
the next Scan stream starts — after everything `accept`ed so far, so a stream that breaks
between pages is resumed from there with nothing lost or repeated — and `accept` checks each
item's CRC32C (ChecksumError, never wrong bytes), applies `limit`, and says the continuation
after the page.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from stampsdk import names
from stampsdk._proto import frontend_v1_pb2 as pb
from stampsdk.checksums import crc32c, crc32cs, verify_value
from stampsdk.errors import InvalidArgument
from stampsdk.limits import Limits
from stampsdk.requests import UINT32_MAX, row_bytes

CONTINUATION_CHARS_MAX = 16 * 1024


class Entity(NamedTuple):
    """One entity a scan yields: its partition name, its row key (bytes, also for a row
    written with a str key), its value (checked against its stored CRC32C) and its ETag."""

    pname: str
    row: bytes
    value: bytes
    etag: str


class Page(NamedTuple):
    """One page of a scan: its entities in key order (never empty from `pages()`), and the
    continuation that resumes the scan right after the last of them (None: the scan is
    done)."""

    items: list[Entity]
    continuation: str | None  # resumes after this page's last item; None: the scan is done


# ---- continuations --------------------------------------------------------------------------

def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


MID_MARK = "~"  # a continuation made after an item inside a page (module docstring)
_LENGTH = struct.Struct(">I")


class Resume(NamedTuple):
    """Where a continuation resumes: the front end's token (b"": the range's start), and the
    key at or before which items are skipped (None: none are)."""

    token: bytes
    after: tuple[str, bytes] | None = None


def encode_token(token: bytes) -> str:
    """The continuation at a page boundary: the front end's own token."""
    return _b64(token)


def encode_mid(token: bytes, pname: str, row: bytes) -> str:
    """The continuation after item (pname, row) of a page that the front end's `token`
    (b"": none) started."""
    name = pname.encode()
    return MID_MARK + _b64(_LENGTH.pack(len(token)) + token + bytes((len(name),)) + name + row)


def decode_continuation(text: Any) -> Resume:
    """Where a continuation resumes; InvalidArgument for anything that is not one this SDK
    made (the front end checks its own token)."""
    bad = InvalidArgument("continuation is not one a scan of this SDK returned")
    if not isinstance(text, str) or not text or len(text) > CONTINUATION_CHARS_MAX:
        raise bad
    mid = text.startswith(MID_MARK)
    body = text[1:] if mid else text
    if not body or not body.isascii() or not all(c.isalnum() or c in "-_" for c in body):
        raise bad
    try:
        data = _unb64(body)
    except (binascii.Error, ValueError):
        raise bad from None
    if not data:
        raise bad
    if not mid:
        return Resume(data)
    if len(data) < _LENGTH.size + 1:
        raise bad
    (token_bytes,) = _LENGTH.unpack_from(data)
    at = _LENGTH.size + token_bytes
    if at + 1 > len(data) or at + 1 + data[at] > len(data):
        raise bad
    try:
        pname = data[at + 1:at + 1 + data[at]].decode("ascii")
        names.check_partition(pname)
    except (UnicodeDecodeError, InvalidArgument):
        raise bad from None
    return Resume(data[_LENGTH.size:at], (pname, data[at + 1 + data[at]:]))


# ---- the range ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ScanRange:
    """The key range of a scan as a front end's ScanRequest carries it (module docstring):
    from (start_pname, start_row) up to, not including, (end_pname, end_row) when
    `has_end`; `mode` entities or log names (`prefix`: the log names' prefix)."""

    start_pname: str = ""
    start_row: bytes = b""
    has_end: bool = False
    end_pname: str = ""
    end_row: bytes = b""
    mode: int = pb.SCAN_ENTITIES
    prefix: str = ""

    @classmethod
    def of(cls, start: Any, end: Any, limits: Limits) -> ScanRange:
        """The range of `scan(start, end)` (module docstring); InvalidArgument if malformed."""
        start_pname, start_row = _bound("start", start, limits)
        if end is None:
            return cls(start_pname, start_row)
        end_pname, end_row = _bound("end", end, limits)
        return cls(start_pname, start_row, True, end_pname, end_row)

    @classmethod
    def log_names(cls, prefix: str) -> ScanRange:
        """The range of `list_logs(prefix)`: the account's log names starting with `prefix`
        (InvalidArgument if it starts no valid name)."""
        return cls(mode=pb.SCAN_LOG_NAMES, prefix=names.check_prefix(prefix))


def _bound(what: str, bound: Any, limits: Limits) -> tuple[str, bytes]:
    if bound is None:
        return "", b""
    if isinstance(bound, str):
        return names.check_partition(bound), b""
    if isinstance(bound, tuple) and len(bound) == 2:
        return names.check_partition(bound[0]), row_bytes(bound[1], limits)
    raise InvalidArgument(f"a scan's {what} is a partition name, a (partition name, row) "
                          f"pair or None, not {bound!r:.80}")


def _positive(what: str, value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= UINT32_MAX:
        raise InvalidArgument(f"a scan's {what} is a positive integer (at most 2**32 - 1) or "
                              f"None, not {value!r:.80}")
    return value


# ---- the cursor -----------------------------------------------------------------------------

class ScanCursor:
    """Where a scan stands (module contract)."""

    def __init__(self, account: str, scan_range: ScanRange, limit: Any = None,
                 page_rows: Any = None, continuation: str | None = None) -> None:
        self.account = account
        self.range = scan_range
        self.limit = _positive("limit", limit)
        self.page_rows = _positive("page_rows", page_rows) or 0
        resume = decode_continuation(continuation) if continuation is not None else Resume(b"")
        if resume.after is not None and not resume.token and not self._in_range(
                resume.after):
            raise InvalidArgument("the continuation does not belong to this scan's range")
        self._resume, self._after = resume
        self.received = 0
        self.finished = False
        self._final: str | None = None  # the continuation after the scan's last page

    def _key(self, pname: str, row: bytes) -> tuple[str, bytes]:
        """An item's place in the scan's order (a log-name scan lists each name once)."""
        return (pname, b"") if self.range.mode == pb.SCAN_LOG_NAMES else (pname, row)

    def _in_range(self, key: tuple[str, bytes]) -> bool:
        r = self.range
        if r.mode == pb.SCAN_LOG_NAMES and not key[0].startswith(r.prefix):
            return False
        return key >= (r.start_pname, r.start_row) and (
            not r.has_end or key < (r.end_pname, r.end_row))

    def request(self) -> pb.ScanRequest:
        """The Scan request that continues after everything accepted."""
        r = self.range
        request = pb.ScanRequest(
            account=self.account, start_pname=r.start_pname, start_row=r.start_row,
            has_end=r.has_end, end_pname=r.end_pname, end_row=r.end_row, mode=r.mode,
            prefix=r.prefix, page_rows=self.page_rows, continuation=self._resume)
        # While items are skipped the front end's count would include them: the limit is
        # applied here alone then.
        if self.limit is not None and self._after is None:
            request.limit = self.limit - self.received
        return request

    def continuation_after(self, before: str | None, pname: str, row: bytes) -> str:
        """The continuation that resumes this scan right after (pname, row), an item of the
        page that the continuation `before` (None: the scan's start) started."""
        token = decode_continuation(before).token if before is not None else b""
        return encode_mid(token, pname, row)

    def accept(self, page: pb.ScanPage) -> tuple[list[Entity], str | None]:
        """The page's items (without those a mid-page continuation skips) and the
        continuation after the page; ChecksumError if an item does not match its CRC32C.
        Per item this is on a scan's hot path: checked in bulk."""
        if self.finished:  # a page past the limit (none was sent while skipping)
            return [], self._final
        items: Sequence[pb.ScanItem] = page.items
        if self._after is not None:
            after = self._key(*self._after)
            items = [i for i in items if self._key(i.pname, i.row) > after]
            if items:
                self._after = None
        before = self._resume
        cut = self.limit is not None and self.received + len(items) >= self.limit
        if self.limit is not None:
            items = items[:self.limit - self.received]
        values = [i.value for i in items]
        if crc32cs(values) != [i.crc for i in items]:
            bad = next(i for i in items if crc32c(i.value) != i.crc)
            verify_value(bad.value, bad.crc, f"the value of row {bad.row!r:.80} of "
                                             f"{bad.pname!r}")
        entities = [Entity(i.pname, i.row, v, i.etag) for i, v in zip(items, values)]
        self.received += len(entities)
        if page.continuation and not cut:
            self._resume = page.continuation
            if self._after is not None:  # a page of skipped items only
                return entities, encode_mid(page.continuation, *self._after)
            return entities, encode_token(page.continuation)
        self.finished = True
        # The front end stopped at our limit, or we cut its page: more may follow.
        self._final = (encode_mid(before, entities[-1].pname, entities[-1].row)
                       if cut and entities else None)
        return entities, self._final


# ---- the iterator ---------------------------------------------------------------------------

Batches = AsyncIterator[tuple[list[Entity], Optional[str]]]


class AsyncScanIterator:
    """The asyncio scan iterator: `async for entity in it`, or `async for page in
    it.pages()` (one or the other; pages() starts with what is left of the current page);
    `it.continuation` resumes after the last item yielded (module docstring)."""

    def __init__(self, cursor: ScanCursor, source: Callable[[ScanCursor], Batches],
                 continuation: str | None) -> None:
        self._cursor = cursor
        self._batches = source(cursor)
        # The current page, how many of its items were yielded, the continuation after it,
        # and the one before it (after the previous page, or the scan's own).
        self._page: list[Entity] = []
        self._at = 0
        self._after_page: str | None = continuation
        self._before_page = continuation

    @property
    def continuation(self) -> str | None:
        """Resumes after the last item yielded (computed here, not per item)."""
        if self._at == len(self._page):
            return self._after_page
        if self._at == 0:
            return self._before_page
        last = self._page[self._at - 1]
        return self._cursor.continuation_after(self._before_page, last.pname, last.row)

    def __aiter__(self) -> AsyncScanIterator:
        return self

    async def __anext__(self) -> Entity:
        if not await self.fill():
            raise StopAsyncIteration
        return self.take()

    async def fill(self) -> bool:
        """Load pages until one has an item not yet yielded; False at the scan's end."""
        while self._at == len(self._page):
            try:
                self._load(*await self._batches.__anext__())
            except StopAsyncIteration:
                return False
        return True

    @property
    def loaded(self) -> bool:
        """Whether the loaded page has an item not yet yielded."""
        return self._at < len(self._page)

    def take(self) -> Entity:
        """The next item of the loaded page (after `fill` said there is one): the blocking
        iterator crosses to the event loop once a page, not once an item."""
        self._at += 1
        return self._page[self._at - 1]

    def _load(self, items: list[Entity], after_page: str | None) -> None:
        self._before_page = self._after_page  # the last page was all yielded
        self._page, self._at, self._after_page = items, 0, after_page

    async def pages(self) -> AsyncIterator[Page]:
        """The rest of the scan, page by page (pages with no items are skipped)."""
        if self._at < len(self._page):
            rest = self._page[self._at:]
            self._at = len(self._page)
            yield Page(rest, self._after_page)
        async for items, after_page in self._batches:
            self._load(items, after_page)
            self._at = len(items)
            if items:
                yield Page(items, after_page)

    async def aclose(self) -> None:
        """Stop the scan and release its stream to the front end; `continuation` stays as
        it was."""
        await self._batches.aclose()  # type: ignore[attr-defined]

    async def __aenter__(self) -> AsyncScanIterator:
        return self

    async def __aexit__(self, *_: object) -> None:
        """`async with client.scan(...) as scan:` closes the scan however the block ends."""
        await self.aclose()
