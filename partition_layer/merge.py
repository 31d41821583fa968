"""Merging sorted sources into one: reads over memtables and runs, checkpoints, and the
background merge of runs (§4, LSM).

Contract: `sources` are ascending (key, encoded row) iterators, newest first. The merge
yields every key once, with the row of the newest source that has it, ascending. Tombstones
are dropped only when `drop_tombstones` (the output replaces every older version: the merge
includes the bottom-most run, or it is a read). Memory: one pending entry per source.

Log trim (§5 `trim`): a log's KIND_META row sorts before its tokens and records (keys.py). When
the merge yields a live LogMeta row it remembers that log's first_seq, and drops the log's
KIND_RECORD rows with seq < first_seq and its KIND_TOKEN rows whose TokenEntry.first_seq <
first_seq. Entities (KIND_ENTITY) are never dropped by a trim: their kind is not a record's.
Entity-write tokens (EntityToken) are dropped when written before `tokens_expire_before_ms`
(None: kept). A trimmed log's token rows of a version above `trimmed_tokens_kept_above` stay
(CURP: a witness may still hold their append's record, and a recovery would append it again
without them: witness_sweep.py; None: none stay). Dropping rows from a newer run without
dropping them from older ones is safe: records and tokens are written once and never changed
(so only one source holds each), and reads below first_seq fail as trimmed anyway. Only the
current log is remembered.
"""

from __future__ import annotations

import heapq
from collections.abc import AsyncIterator, Iterable

from common.errors import Internal, InvalidArgument
from partition_layer import keys
from partition_layer.rows import (
    EntityToken,
    LogMeta,
    TokenEntry,
    decode_row,
    is_entity_group,
    is_entity_token,
    is_tombstone,
)


async def aiter_sync(iterable: Iterable[tuple[bytes, bytes]]
                     ) -> AsyncIterator[tuple[bytes, bytes]]:
    """An async iterator over a sync one (a memtable's items)."""
    for item in iterable:
        yield item


class _Trim:
    """The trim point of the log whose rows the merge is passing."""

    __slots__ = ("first_seq", "prefix", "tokens_expire_before_ms", "trimmed_tokens_kept_above")

    def __init__(self, tokens_expire_before_ms: int | None,
                 trimmed_tokens_kept_above: int | None = None) -> None:
        self.prefix: bytes | None = None
        self.first_seq = 0
        self.tokens_expire_before_ms = tokens_expire_before_ms
        self.trimmed_tokens_kept_above = trimmed_tokens_kept_above

    def keep(self, key: bytes, row: bytes) -> bool:
        """Whether the merged row at `key` survives the trim; remembers meta rows."""
        try:
            at = keys.kind_offset(key)
        except InvalidArgument as exc:
            raise Internal(f"merge met a malformed key: {exc}") from exc
        kind = key[at]
        if kind == keys.KIND_META:
            self.prefix = None
            if not is_tombstone(row):
                value = decode_row(row).value
                if value is not None and not is_entity_group(value):
                    self.prefix, self.first_seq = key[:at], LogMeta.decode(value).first_seq
            return True
        if kind == keys.KIND_TOKEN and not is_tombstone(row):
            value = decode_row(row).value
            if value is not None and is_entity_token(value):
                expire = self.tokens_expire_before_ms
                return expire is None or EntityToken.decode(value).written_at_ms >= expire
        if self.prefix is None or self.first_seq == 0 or not key.startswith(self.prefix) \
                or len(self.prefix) != at:
            return True
        if kind == keys.KIND_RECORD:
            # A record's row is always 8 bytes; the length check only keeps a malformed key
            # from stopping the merge.
            return len(key) - at - 1 != keys.SEQ_BYTES or keys.row_seq(key[at + 1:]) >= \
                self.first_seq
        if kind == keys.KIND_TOKEN and not is_tombstone(row):
            decoded = decode_row(row)
            if decoded.value is None or TokenEntry.decode(decoded.value).first_seq >= \
                    self.first_seq:
                return True
            kept_above = self.trimmed_tokens_kept_above
            return kept_above is not None and decoded.version > kept_above
        return True


async def merge(sources: list[AsyncIterator[tuple[bytes, bytes]]], *,
                drop_tombstones: bool, tokens_expire_before_ms: int | None = None,
                trimmed_tokens_kept_above: int | None = None
                ) -> AsyncIterator[tuple[bytes, bytes]]:
    # Heap entries (key, source number, row): on equal keys the lowest number (newest) wins.
    heap: list[tuple[bytes, int, bytes]] = []
    last: list[bytes | None] = [None] * len(sources)

    async def advance(n: int) -> None:
        try:
            key, row = await anext(sources[n])
        except StopAsyncIteration:
            return
        previous = last[n]
        if previous is not None and key <= previous:
            raise Internal(f"merge source {n} is not ascending at key {key.hex()}")
        last[n] = key
        heapq.heappush(heap, (key, n, row))

    for n in range(len(sources)):
        await advance(n)
    trim = _Trim(tokens_expire_before_ms, trimmed_tokens_kept_above)
    while heap:
        key, n, row = heapq.heappop(heap)
        await advance(n)
        while heap and heap[0][0] == key:
            _, older, _ = heapq.heappop(heap)
            await advance(older)
        if trim.keep(key, row) and not (drop_tombstones and is_tombstone(row)):
            yield key, row
