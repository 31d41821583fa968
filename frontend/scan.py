"""What the front end's `Scan` RPC does once the request is authenticated (§5 scans, §6):
the request's key range, cut to what its credentials may see, read across range partitions
(partition_layer/scan_client.py) and sent back in pages with continuations.

Contracts:
- The range: SCAN_ENTITIES from (start_pname, start_row) — a start pname alone: that name's
  first row; nothing: the account's first — up to, not including, (end_pname, end_row) — an
  end pname alone: that name's first row — or the account's end. SCAN_LOG_NAMES lists the
  logs whose name starts with `prefix`, within the same range. Either is cut to the public
  names (frontend/names.py): no scan, with any credential, reads the stamp's own ("$...").
- A shared access token's name prefix (`name_prefix`, "" for a key) cuts the range to the
  names under it; a range with nothing under it is PermissionDenied.
- `continuation` is opaque to clients: a format byte, the raw key to resume from and a
  CRC32C of both. A malformed one, or one whose key lies outside this scan's (cut) range, is
  InvalidArgument. A page's continuation resumes exactly after its last item; the last page
  has none (and a scan that finds nothing still sends that one, empty, page) — unless
  `limit` ended the scan: then rows may follow, and it has one as well.
- Each partition's part is one consistent snapshot (two when a partition server failed or
  the partition moved during the scan: scan_client.py).
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from common.checksums import crc32c
from common.config import FrontEndLimits
from common.errors import InvalidArgument, PermissionDenied
from common.proto import frontend_pb2 as fe_pb
from common.proto import partition_pb2 as pb
from frontend import names
from partition_layer import keys, scan_client
from partition_layer.keys import name_range

if TYPE_CHECKING:  # the SDK imports this module for its continuations, not the client
    from partition_layer.client import AsyncPartitionClient

CONTINUATION_FORMAT = 1
_CRC = struct.Struct(">I")


def encode_continuation(key: bytes) -> bytes:
    head = bytes((CONTINUATION_FORMAT,)) + key
    return head + _CRC.pack(crc32c(head))


def decode_continuation(token: bytes) -> bytes:
    """The resume key a continuation carries (InvalidArgument when it is not one of ours)."""
    if len(token) < 1 + _CRC.size or token[0] != CONTINUATION_FORMAT:
        raise InvalidArgument("malformed scan continuation")
    head, (crc,) = token[:-_CRC.size], _CRC.unpack(token[-_CRC.size:])
    if crc32c(head) != crc:
        raise InvalidArgument("malformed scan continuation (checksum)")
    return head[1:]


def continuation_after(account: str, mode: int, item: pb.ScanItem) -> bytes:
    """The continuation that resumes a scan right after `item`, as a page ending there would
    carry. The SDK makes the same for a caller that stopped in the middle of a page
    (stampsdk/scan.py `continuation_after`, which cannot import this), so a scan has one form
    of continuation (tests/unit/test_sdk_scan.py pages with this one)."""
    return encode_continuation(scan_client.key_after(account, mode, item))


def request_range(request: fe_pb.ScanRequest, name_prefix: str) -> tuple[bytes, bytes]:
    """The raw [start, end) a scan request covers, cut to `name_prefix` (module contract)."""
    account = request.account
    if not account:
        raise InvalidArgument("a scan names its account")
    if request.mode not in (pb.SCAN_ENTITIES, pb.SCAN_LOG_NAMES):
        raise InvalidArgument(f"unknown scan mode {request.mode}")
    low, high = name_range(account, "")
    start = low
    if request.start_row:
        start = keys.encode_key(account, request.start_pname, keys.KIND_ENTITY,
                                request.start_row)
    elif request.start_pname:
        start = keys.pname_prefix(account, request.start_pname)
    end = high
    if request.has_end:
        end = (keys.encode_key(account, request.end_pname, keys.KIND_ENTITY, request.end_row)
               if request.end_row else keys.pname_prefix(account, request.end_pname))
    # Public names only, for every credential: the stamp's own names (the blob endpoint's
    # groups, "$...") sort below them (frontend/names.py).
    start, end = _cut(start, end, (keys.pname_prefix(account, names.PUBLIC_NAMES_LOW),
                                   keys.pname_prefix(account, names.PUBLIC_NAMES_HIGH)))
    if request.mode == pb.SCAN_LOG_NAMES and request.prefix:
        start, end = _cut(start, end, name_range(account, request.prefix))
    if name_prefix:
        allowed = name_range(account, name_prefix)
        if end <= allowed[0] or start >= allowed[1]:
            raise PermissionDenied(f"the token grants names under {name_prefix!r} only; "
                                   f"this scan's range has none")
        start, end = _cut(start, end, allowed)
    return start, end


def _cut(start: bytes, end: bytes, within: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
    return max(start, within[0]), min(end, within[1])


async def scan_pages(client: AsyncPartitionClient, request: fe_pb.ScanRequest,
                     name_prefix: str, limits: FrontEndLimits
                     ) -> AsyncIterator[fe_pb.ScanPage]:
    """The pages of an authenticated scan request (module contract)."""
    start, end = request_range(request, name_prefix)
    if request.continuation:
        resume = decode_continuation(request.continuation)
        if not start <= resume <= end:
            raise InvalidArgument("the continuation does not belong to this scan's range")
        start = resume
    page_rows = min(request.page_rows or limits.scan_page_rows_max, limits.scan_page_rows_max)
    held: fe_pb.ScanPage | None = None  # sent once the next page shows it is not the last
    returned = 0
    if start < end:
        pages = scan_client.scan(client, request.account, start, end, request.mode,
                                 limit=request.limit, page_rows=page_rows,
                                 page_bytes=limits.scan_page_bytes_max,
                                 in_flight=limits.scan_partitions_in_flight_max)
        try:
            async for page in pages:
                if held is not None:
                    yield held
                held = fe_pb.ScanPage(items=page.items,
                                      continuation=encode_continuation(page.resume_key))
                returned += len(page.items)
        finally:
            await pages.aclose()
    if held is None:
        held = fe_pb.ScanPage()
    if not (request.limit and returned == request.limit):
        held.continuation = b""  # the range's end: nothing more
    yield held
