"""A reference front end for the SDK's scans: pages from a sorted list of items,
continuation tokens and all."""

from __future__ import annotations

from collections.abc import AsyncIterator

from stampsdk._proto import frontend_v1_pb2 as pb
from stampsdk.checksums import crc32c
from stampsdk.errors import InvalidArgument
from stampsdk.scan import Batches, ScanCursor

from frontend import scan as fe_scan
from partition_layer import keys as raw_keys


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
        self.requests: list[pb.ScanRequest] = []

    def pages(self, request: pb.ScanRequest) -> list[pb.ScanPage]:
        self.requests.append(request)
        start = (request.start_pname, request.start_row)
        rest = [i for i in self.items if (i.pname, i.row) >= start]
        if request.continuation:
            resume = fe_scan.decode_continuation(request.continuation)
            low, high = fe_scan.request_range(request, "")
            if not low <= resume <= high:  # as the front end
                raise InvalidArgument("the continuation does not belong to this scan's range")
            rest = [i for i in rest if raw_keys.encode_key(
                request.account, i.pname, raw_keys.KIND_ENTITY, i.row) >= resume]
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
            pages.append(pb.ScanPage(items=chunk, continuation=fe_scan.continuation_after(
                request.account, request.mode, last) if more else b""))
        return pages or [pb.ScanPage()]

    def source(self, cursor: ScanCursor) -> Batches:
        """What aio.Client._scan_batches does, minus the network: a broken stream is
        reopened from the cursor's request."""
        async def batches() -> AsyncIterator:
            while not cursor.finished:
                pages = self.pages(cursor.request())
                broken = self.break_after.pop(0) if self.break_after else None
                for n, page in enumerate(pages):
                    if broken is not None and n == broken:
                        break
                    yield cursor.accept(page)
                else:
                    cursor.finished = True
        return batches()


ITEMS = [item(p, r) for p in ("aaa", "bbb", "ccc") for r in (b"1", b"2", b"3", b"4")]
KEYS = [(i.pname, i.row) for i in ITEMS]
