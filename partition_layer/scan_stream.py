"""One partition's part of a key-range scan: the PS `Scan` stream (partition.proto
`PartitionScanRequest` / `PartitionScanPage`; §5 "each partition's part is a consistent
snapshot").

Contracts:
- One stream is one snapshot (scan_snapshot.py), taken when it starts: the memtable's
  entries within the scanned range copied, the memtable being checkpointed and the run
  readers in force pinned. Later writes, checkpoints and merges do not change what the
  stream returns.
- Iteration is lazy, page by page (scan_snapshot.py): memory beyond the memtable copy is a
  data block per run, a batch of rows and one page (`page_rows`, about `page_bytes`).
- The range is clamped to the request's account and to the partition's range. A page that is
  not the last resumes after its last item (`resume_key`); the last page (`done`) carries the
  partition's high key when the scan's range goes beyond it, else nothing.
- NotOwner when the partition holding the (clamped) start is not served here, and before any
  page once it stops being served here: the caller refreshes its map and resumes.
- SCAN_ENTITIES returns entity rows with their value (blob values read from blob data) and
  its CRC32C. SCAN_LOG_NAMES returns one item per log (its KIND_META row holds LogMeta) and
  skips every other row of the name without reading it: past SKIP_BY_READING_ROWS_MAX rows
  the iteration restarts at the end of the name's key prefix (a restart costs a block read
  per run, so a name of a few rows is cheaper to read past). Entity scans skip a log's
  records the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from common import faults
from common.config import PartitionLimits
from common.errors import InvalidArgument
from common.proto import partition_pb2 as pb
from partition_layer import keys
from partition_layer.partition import RangePartition
from partition_layer.read_replies import stored_value
from partition_layer.rows import Row, decode_row, etag_of, is_entity_group
from partition_layer.scan_snapshot import Snapshot

SKIP_BY_READING_ROWS_MAX = 32
ITEM_OVERHEAD_BYTES = 16


def clamp(account: str, start_key: bytes, end_key: bytes | None
          ) -> tuple[bytes, bytes]:
    """[start, end) of a scan request within its account's keys (end None: the account's
    end)."""
    if not account:
        raise InvalidArgument("a scan names its account")
    low = keys.account_prefix(account)
    high = keys.prefix_end(low)
    assert high is not None  # an account prefix ends in its terminator 00 01
    start = max(start_key, low)
    end = high if end_key is None else max(low, min(end_key, high))
    return start, end


def clamp_to_partition(end: bytes, key_range: keys.KeyRange) -> tuple[bytes, bytes]:
    """(the end within the partition, the resume key of the last page): the partition's high
    key when the scan goes beyond it, else b"" (the scan's end is here)."""
    if key_range.high is not None and key_range.high < end:
        return key_range.high, key_range.high
    return end, b""


class PageLimits:
    """How much one page and the whole stream carry, from the request and the config."""

    __slots__ = ("page_bytes", "page_rows", "total")

    def __init__(self, request: pb.PartitionScanRequest, limits: PartitionLimits) -> None:
        self.page_rows = min(request.page_rows or limits.scan_page_rows_default,
                             limits.scan_rows_max)
        self.page_bytes = min(request.page_bytes or limits.scan_page_bytes_default,
                              limits.scan_page_bytes_max)
        self.total = request.limit  # 0: no limit


async def pages(snapshot: Snapshot, mode: int, start: bytes, at_end: bytes,
                bounds: PageLimits, value_of: Callable[[Row], Awaitable[bytes]],
                check: Callable[[], None]) -> AsyncIterator[pb.PartitionScanPage]:
    """The pages of `snapshot` from `start`; `value_of` reads a blob row's value, `check`
    raises when the partition stopped being served (called before every page)."""
    page = pb.PartitionScanPage()  # items are added in place: no copy per item
    size = total = 0
    position = start  # past everything returned so far
    skip_until: bytes | None = None  # rows below this are not wanted
    skipped = 0
    names = _Names()
    restart: bytes | None = start
    while restart is not None:
        batches, restart = snapshot.batches(restart), None
        try:
            async for batch in batches:
                for key, encoded in batch:
                    if skip_until is not None:
                        if key < skip_until:
                            skipped += 1
                            if skipped >= SKIP_BY_READING_ROWS_MAX:
                                restart, skip_until = skip_until, None
                                break
                            continue
                        skip_until = None
                    at = keys.kind_offset(key)
                    kind = key[at]
                    if mode == pb.SCAN_LOG_NAMES:
                        # Only a name's first row can be its meta row: skip the rest anyway.
                        skip_until, skipped = keys.prefix_end(key[:at]), 0
                        if kind != keys.KIND_META or _is_entity_group(encoded):
                            continue
                        pname = names.pname(key, at)
                        page.items.add(pname=pname)
                        size += len(pname) + ITEM_OVERHEAD_BYTES
                        position = skip_until or snapshot.high
                    elif kind != keys.KIND_ENTITY:
                        if kind == keys.KIND_META and not _is_entity_group(encoded):
                            skip_until, skipped = keys.prefix_end(key[:at]), 0  # a log
                        continue
                    else:
                        row = decode_row(encoded)
                        # The writer's CRC, stored with the value (§5), as every read sends.
                        value, crc = stored_value(row, row.value if row.value is not None
                                                  else await value_of(row))
                        pname, row_key = names.pname(key, at), key[at + 1:]
                        page.items.add(pname=pname, row=row_key, value=value,
                                       etag=etag_of(row.version), crc=crc)
                        size += len(value) + len(row_key) + len(pname) + ITEM_OVERHEAD_BYTES
                        position = key + b"\x00"
                    total += 1
                    if total == bounds.total:
                        check()
                        page.done = True
                        yield page
                        return
                    if len(page.items) >= bounds.page_rows or size >= bounds.page_bytes:
                        check()
                        page.resume_key = position
                        yield page
                        page, size = pb.PartitionScanPage(), 0
                if restart is not None:
                    break  # past the rest of a name: read on from its end
        finally:
            await batches.aclose()
    check()
    page.resume_key, page.done = at_end, True
    yield page


def _is_entity_group(encoded: bytes) -> bool:
    value = decode_row(encoded).value
    return value is None or is_entity_group(value)


class _Names:
    """The partition name of a key, decoded once per name (rows of a name come together)."""

    __slots__ = ("_name", "_prefix")

    def __init__(self) -> None:
        self._prefix = b""
        self._name = ""

    def pname(self, key: bytes, at: int) -> str:
        if key[:at] != self._prefix:
            self._prefix = key[:at]
            self._name = keys.decode_key(key)[1]
        return self._name


async def serve(request: pb.PartitionScanRequest, find: Callable[[bytes], RangePartition],
                limits: PartitionLimits) -> AsyncIterator[pb.PartitionScanPage]:
    """The PS `Scan` stream: the pages of `request`, one snapshot of the partition holding
    its start."""
    if request.mode not in (pb.SCAN_ENTITIES, pb.SCAN_LOG_NAMES):
        raise InvalidArgument(f"unknown scan mode {request.mode}")
    start, end = clamp(request.account, request.start_key,
                       request.end_key if request.has_end else None)
    bounds = PageLimits(request, limits)
    if start >= end:
        yield pb.PartitionScanPage(done=True)
        return
    partition = find(start)
    partition.check_serving()
    # No write answered early (CURP) and not yet durable may be missing from the snapshot,
    # nor in it: the snapshot is taken once they all are (partition_layer/curp.py step 5).
    await partition.committer.speculation.until_all_durable()
    partition.check_serving()
    end, at_end = clamp_to_partition(end, partition.range)
    snapshot = Snapshot.of(partition, start, end)
    async for page in pages(snapshot, request.mode, start, at_end, bounds,
                            partition.read_blob, partition.check_serving):
        await faults.apoint("ps.scan.page")  # a test slows a stream down to move it mid-way
        yield page
