"""A partition name is a log or an entity group, never both (§5; issue 15 hole 1): through the
pure operations and the merge, no sequence of public operations on one name can make a row
unreadable, change a log's records or drop an entity."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import InvalidArgument, StampError
from partition_layer.merge import aiter_sync, merge
from partition_layer.operations import EntityWrite, LogTrim, Write, record_key
from partition_layer.record_batch import decode_records
from partition_layer.rows import decode_row, encode_row
from tests.support.partitions import Table, log_append, with_crcs


def test_an_entity_put_cannot_overwrite_a_log_append() -> None:
    """The review's reproduction: records 0-5 are one row keyed by seq 5; a put of the row
    (5).to_bytes(8, "big") on the same name replaced it, and reads failed from then on."""
    t = Table()
    records = tuple(b"r%d" % i for i in range(6))
    assert t.run(log_append("a", "orders", records)) == 0
    with pytest.raises(InvalidArgument, match="is a log"):
        t.run(EntityWrite("a", "orders", (Write("put", (5).to_bytes(8, "big"), b"oops"),)))
    row = t.rows[record_key("a", "orders", 5)]
    assert row.value is not None
    assert decode_records(row.value, 5) == with_crcs(0, records)


def test_a_log_operation_on_an_entity_group_is_refused() -> None:
    t = Table()
    t.run(EntityWrite("a", "users", (Write("put", b"alice", b"1"),)))
    lsn = t.lsn
    for op in (log_append("a", "users", (b"x",)), LogTrim("a", "users", upto_seq=0)):
        with pytest.raises(InvalidArgument, match="entity group"):
            t.run(op)
    assert t.lsn == lsn


ROWS = [(s).to_bytes(8, "big") for s in range(8)] + [b"k", b"\x00" * 9]
operations = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 4)),
    st.tuples(st.just("trim"), st.integers(0, 12)),
    st.tuples(st.just("put"), st.sampled_from(ROWS)),
    st.tuples(st.just("delete"), st.sampled_from(ROWS)),
), max_size=25)


def merged_rows(t: Table) -> dict[bytes, bytes]:
    async def collect() -> dict[bytes, bytes]:
        source = aiter_sync(sorted((k, encode_row(r)) for k, r in t.rows.items()))
        return {k: v async for k, v in merge([source], drop_tombstones=True)}
    return asyncio.run(collect())


@settings(max_examples=150, deadline=None)
@given(operations)
def test_no_sequence_of_operations_on_one_name_loses_a_row(ops: list[tuple[str, object]]
                                                           ) -> None:
    t = Table()
    appends: list[tuple[int, tuple[bytes, ...]]] = []  # acknowledged: (first seq, records)
    entities: dict[bytes, bytes] = {}  # acknowledged live entities: row -> value
    entity_writes = 0
    first_seq = 0
    for n, (kind, arg) in enumerate(ops):
        try:
            if kind == "append":
                records = tuple(b"%d-%d" % (n, i) for i in range(int(arg)))  # type: ignore[call-overload]
                appends.append((t.run(log_append("a", "n", records)), records))  # type: ignore[arg-type]
            elif kind == "trim":
                t.run(LogTrim("a", "n", upto_seq=int(arg)))  # type: ignore[call-overload]
                first_seq = max(first_seq, int(arg))  # type: ignore[call-overload]
            elif kind == "put":
                t.run(EntityWrite("a", "n", (Write("put", arg, b"v%d" % n),)))  # type: ignore[arg-type]
                entities[arg] = b"v%d" % n  # type: ignore[index]
                entity_writes += 1
            else:
                t.run(EntityWrite("a", "n", (Write("delete", arg),)))  # type: ignore[arg-type]
                del entities[arg]  # type: ignore[arg-type]
                entity_writes += 1
        except StampError:
            continue  # refused: it wrote nothing (the Table would have applied it)
    assert not (appends and entity_writes), "one name took both log and entity writes"
    after_merge = merged_rows(t)
    for first, records in appends:
        last = first + len(records) - 1
        if last < first_seq:
            continue  # trimmed: a merge may drop it
        for rows in ({k: encode_row(r) for k, r in t.rows.items()}, after_merge):
            value = decode_row(rows[record_key("a", "n", last)]).value
            assert value is not None
            assert decode_records(value, last) == with_crcs(first, records)
    probe = EntityWrite("a", "n", ())
    for row, value in entities.items():
        key = probe.key(Write("put", row, value))
        assert decode_row(after_merge[key]).value == value, "an entity was lost"
