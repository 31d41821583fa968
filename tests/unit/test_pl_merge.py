"""The k-way merge against a dict reference: newest wins, tombstones, log trims (which never
drop an entity), entity tokens that expire."""

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
from partition_layer.rows import (
    ENTITY_GROUP,
    EntityToken,
    LogMeta,
    Row,
    TokenEntry,
    decode_row,
    encode_row,
    is_entity_group,
    is_entity_token,
)

Source = dict[bytes, bytes]


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


async def merged(sources: list[Source], drop_tombstones: bool,
                 expire_before_ms: int | None = None) -> list[tuple[bytes, bytes]]:
    its: list[AsyncIterator[tuple[bytes, bytes]]] = [aiter_sync(sorted(s.items()))
                                                     for s in sources]
    return [item async for item in merge(its, drop_tombstones=drop_tombstones,
                                         tokens_expire_before_ms=expire_before_ms)]


def reference(sources: list[Source], drop_tombstones: bool,
              expire_before_ms: int | None = None) -> list[tuple[bytes, bytes]]:
    newest: dict[bytes, bytes] = {}
    for source in reversed(sources):  # oldest first, so newer ones overwrite
        newest.update(source)
    first_seq: dict[tuple[str, str], int] = {}
    for key, value in newest.items():
        account, pname, kind, _ = keys.decode_key(key)
        row = decode_row(value)
        if kind == keys.KIND_META and row.value is not None and not is_entity_group(row.value):
            first_seq[account, pname] = LogMeta.decode(row.value).first_seq
    out = []
    for key, value in sorted(newest.items()):
        account, pname, kind, row_key = keys.decode_key(key)
        row = decode_row(value)
        if drop_tombstones and row.tombstone:
            continue
        trim = first_seq.get((account, pname), 0)
        if kind == keys.KIND_RECORD and len(row_key) == 8 and keys.row_seq(row_key) < trim:
            continue
        if kind == keys.KIND_TOKEN and row.value is not None and is_entity_token(row.value):
            if (expire_before_ms is not None
                    and EntityToken.decode(row.value).written_at_ms < expire_before_ms):
                continue
        elif (kind == keys.KIND_TOKEN and row.value is not None
                and TokenEntry.decode(row.value).first_seq < trim):
            continue
        out.append((key, value))
    return out


logs = st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["l1", "l2", "l\x00", ""]))


@st.composite
def table_rows(draw: st.DrawFn) -> tuple[bytes, bytes]:
    account, pname = draw(logs)
    version = draw(st.integers(0, 1000))
    kind = draw(st.sampled_from([keys.KIND_META, keys.KIND_TOKEN, keys.KIND_RECORD,
                                 keys.KIND_ENTITY]))
    tombstone = draw(st.integers(0, 5)) == 0
    if kind == keys.KIND_META:
        row_key = b""
        first = draw(st.integers(0, 12))
        value = draw(st.just(ENTITY_GROUP) | st.just(LogMeta(
            first, first + draw(st.integers(0, 5)), draw(st.booleans())).encode()))
    elif kind == keys.KIND_TOKEN:
        row_key = draw(st.binary(min_size=1, max_size=3))
        value = draw(st.just(TokenEntry(draw(st.integers(0, 15)),
                                        draw(st.integers(1, 3))).encode())
                     | st.just(EntityToken(version, draw(st.integers(0, 20)),
                                           (True, False)).encode()))
    elif kind == keys.KIND_RECORD:
        row_key = keys.seq_row(draw(st.integers(0, 15)))
        value = draw(st.binary(max_size=4))
    else:
        row_key = draw(st.sampled_from([keys.seq_row(i) for i in range(16)])
                       | st.binary(max_size=9))
        value = draw(st.binary(max_size=4))
    row = Row(version, tombstone=True) if tombstone else Row(version, value=value)
    return keys.encode_key(account, pname, kind, row_key), encode_row(row)


sources_st = st.lists(st.lists(table_rows(), max_size=25).map(dict), max_size=5)


@settings(max_examples=150, deadline=None)
@given(sources_st, st.booleans(), st.none() | st.integers(0, 21))
def test_merge_against_reference(sources: list[Source], drop_tombstones: bool,
                                 expire_before_ms: int | None) -> None:
    assert run(merged(sources, drop_tombstones, expire_before_ms)) == reference(
        sources, drop_tombstones, expire_before_ms)


def test_a_trim_never_drops_an_entity_and_expired_entity_tokens_go() -> None:
    """Entities of 8-byte rows sort like records but are another kind: no trim reaches them
    (hole 1 of issue 15: the merge dropped 8-byte rows below a trim point)."""
    entity = keys.encode_key("acct", "log", keys.KIND_ENTITY, keys.seq_row(1))
    meta = keys.encode_key("acct", "log", keys.KIND_META, b"")
    old_token = keys.encode_key("acct", "group", keys.KIND_TOKEN, b"old")
    new_token = keys.encode_key("acct", "group", keys.KIND_TOKEN, b"new")
    rows = {meta: encode_row(Row(3, value=LogMeta(5, 10, False).encode())), entity: v(1),
            old_token: encode_row(Row(4, value=EntityToken(4, 1_000, (True,)).encode())),
            new_token: encode_row(Row(5, value=EntityToken(5, 9_000, (True,)).encode()))}
    assert dict(run(merged([rows], drop_tombstones=True))) == rows  # no expiry: all kept
    out = dict(run(merged([rows], drop_tombstones=True, expire_before_ms=5_000)))
    assert entity in out and new_token in out and old_token not in out


def k(i: int) -> bytes:
    return keys.encode_key("acct", "table", keys.KIND_ENTITY, b"%03d" % i)


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
    meta = keys.encode_key("acct", "log", keys.KIND_META, b"")
    token_old = keys.encode_key("acct", "log", keys.KIND_TOKEN, b"t1")
    token_new = keys.encode_key("acct", "log", keys.KIND_TOKEN, b"t2")
    records = {keys.encode_key("acct", "log", keys.KIND_RECORD, keys.seq_row(s)): v(s)
               for s in range(10)}
    other = keys.encode_key("acct", "log2", keys.KIND_RECORD, keys.seq_row(0))
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
