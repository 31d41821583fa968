"""The k-way merge against a dict reference: newest wins, tombstones, log trims."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import Internal
from partition_layer import keys
from partition_layer.memtable import Memtable
from partition_layer.merge import aiter_sync, merge
from partition_layer.rows import LogMeta, Row, TokenEntry, decode_row, encode_row

Source = dict[bytes, bytes]


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


async def merged(sources: list[Source], drop_tombstones: bool) -> list[tuple[bytes, bytes]]:
    its: list[AsyncIterator[tuple[bytes, bytes]]] = [aiter_sync(sorted(s.items()))
                                                     for s in sources]
    return [item async for item in merge(its, drop_tombstones=drop_tombstones)]


def reference(sources: list[Source], drop_tombstones: bool) -> list[tuple[bytes, bytes]]:
    newest: dict[bytes, bytes] = {}
    for source in reversed(sources):  # oldest first, so newer ones overwrite
        newest.update(source)
    first_seq: dict[tuple[str, str], int] = {}
    for key, value in newest.items():
        account, pname, kind, _ = keys.decode_key(key)
        row = decode_row(value)
        if kind == keys.KIND_LOG_META and row.value is not None:
            first_seq[account, pname] = LogMeta.decode(row.value).first_seq
    out = []
    for key, value in sorted(newest.items()):
        account, pname, kind, row_key = keys.decode_key(key)
        row = decode_row(value)
        if drop_tombstones and row.tombstone:
            continue
        trim = first_seq.get((account, pname), 0)
        if kind == keys.KIND_ROW and len(row_key) == 8 and keys.row_seq(row_key) < trim:
            continue
        if (kind == keys.KIND_TOKEN and row.value is not None
                and TokenEntry.decode(row.value).first_seq < trim):
            continue
        out.append((key, value))
    return out


logs = st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["l1", "l2", "l\x00", ""]))


@st.composite
def table_rows(draw: st.DrawFn) -> tuple[bytes, bytes]:
    account, pname = draw(logs)
    version = draw(st.integers(0, 1000))
    kind = draw(st.sampled_from([keys.KIND_LOG_META, keys.KIND_TOKEN, keys.KIND_ROW]))
    tombstone = draw(st.integers(0, 5)) == 0
    if kind == keys.KIND_LOG_META:
        row_key = b""
        first = draw(st.integers(0, 12))
        value = LogMeta(first, first + draw(st.integers(0, 5)), draw(st.booleans())).encode()
    elif kind == keys.KIND_TOKEN:
        row_key = draw(st.binary(min_size=1, max_size=3))
        value = TokenEntry(draw(st.integers(0, 15)), draw(st.integers(1, 3))).encode()
    else:
        row_key = draw(st.sampled_from([keys.seq_row(i) for i in range(16)])
                       | st.binary(max_size=9))
        value = draw(st.binary(max_size=4))
    row = Row(version, tombstone=True) if tombstone else Row(version, value=value)
    return keys.encode_key(account, pname, kind, row_key), encode_row(row)


sources_st = st.lists(st.lists(table_rows(), max_size=25).map(dict), max_size=5)


@settings(max_examples=100, deadline=None)
@given(sources_st, st.booleans())
def test_merge_against_reference(sources: list[Source], drop_tombstones: bool) -> None:
    assert run(merged(sources, drop_tombstones)) == reference(sources, drop_tombstones)


def k(i: int) -> bytes:
    return keys.encode_key("acct", "table", keys.KIND_ROW, b"%03d" % i)


def v(version: int, tombstone: bool = False) -> bytes:
    return encode_row(Row(version, tombstone=True) if tombstone else Row(version, value=b"x"))


def test_newest_source_wins_and_tombstones_hide_older_rows() -> None:
    new = {k(1): v(10, tombstone=True), k(2): v(11)}
    old = {k(1): v(1), k(2): v(2), k(3): v(3)}
    assert run(merged([new, old], drop_tombstones=True)) == [(k(2), v(11)), (k(3), v(3))]
    assert run(merged([new, old], drop_tombstones=False)) == [
        (k(1), v(10, True)), (k(2), v(11)), (k(3), v(3))]
    assert run(merged([], drop_tombstones=True)) == []


def test_trim_drops_records_and_tokens_below_first_seq() -> None:
    meta = keys.encode_key("acct", "log", keys.KIND_LOG_META, b"")
    token_old = keys.encode_key("acct", "log", keys.KIND_TOKEN, b"t1")
    token_new = keys.encode_key("acct", "log", keys.KIND_TOKEN, b"t2")
    records = {keys.encode_key("acct", "log", keys.KIND_ROW, keys.seq_row(s)): v(s)
               for s in range(10)}
    other = keys.encode_key("acct", "log2", keys.KIND_ROW, keys.seq_row(0))
    old = {**records, token_old: encode_row(Row(1, value=TokenEntry(0, 2).encode())),
           token_new: encode_row(Row(2, value=TokenEntry(6, 1).encode())), other: v(0)}
    new = {meta: encode_row(Row(20, value=LogMeta(5, 10, False).encode()))}
    out = dict(run(merged([new, old], drop_tombstones=False)))
    assert meta in out and token_new in out and token_old not in out and other in out
    assert sorted(keys.row_seq(keys.decode_key(key)[3]) for key in out
                  if keys.decode_key(key)[1] == "log" and keys.decode_key(key)[2] == 2) == [
        5, 6, 7, 8, 9]


def test_memtable_source_and_unordered_sources() -> None:
    table = Memtable()
    table.put(k(2), v(2))
    table.put(k(1), v(1))

    async def body() -> list[tuple[bytes, bytes]]:
        return [item async for item in merge([aiter_sync(table.items(b"", None))],
                                             drop_tombstones=True)]

    assert run(body()) == [(k(1), v(1)), (k(2), v(2))]

    async def unordered() -> None:
        bad = aiter_sync([(k(2), v(2)), (k(1), v(1))])
        async for _ in merge([bad], drop_tombstones=True):
            pass

    with pytest.raises(Internal):
        run(unordered())
