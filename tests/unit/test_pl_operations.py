"""Log and entity operations as pure decisions (partition_layer/operations.py), against
a dict of rows: results, mutations, refusals that write nothing, and the overlay."""

from __future__ import annotations

import pytest

from common.errors import (
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PreconditionFailed,
    Sealed,
)
from partition_layer import keys
from partition_layer.operations import (
    EntityWrite,
    LogSeal,
    LogTrim,
    Overlay,
    Write,
    meta_key,
    validate_writes,
)
from partition_layer.payload_crc import payload_crcs
from partition_layer.record_batch import decode_records, encode_records
from partition_layer.rows import BlobRef, LogMeta, etag_of
from stream_layer.framing import Location
from tests.support.partitions import Table, log_append, with_crcs


def test_appends_are_consecutive_and_tokens_answer_retries() -> None:
    t = Table()
    assert t.run(log_append("a", "log", (b"x", b"y"))) == 0
    assert t.run(log_append("a", "log", (b"z",), token="t1")) == 2
    lsn = t.lsn
    assert t.run(log_append("a", "log", (b"z",), token="t1")) == 2  # a retry
    assert t.lsn == lsn, "a retried append wrote something"
    with pytest.raises(InvalidArgument, match="token"):
        t.run(log_append("a", "log", (b"z", b"w"), token="t1"))
    assert t.meta("log") == LogMeta(0, 3, False)
    appends = sorted((keys.row_seq(keys.decode_key(k)[3]), row.value) for k, row in t.rows.items()
                     if keys.decode_key(k)[2] == keys.KIND_RECORD)
    # One row per append, keyed by its last record (record_batch.py).
    assert [decode_records(value, last) for last, value in appends] == [
        with_crcs(0, [b"x", b"y"]), with_crcs(2, [b"z"])]


def test_an_append_held_in_blob_data_is_one_pointer_row() -> None:
    t = Table()
    t.run(log_append("a", "log", (b"x",)))
    blob = BlobRef(Location(7, 4096, 10_000), 9_984)
    assert t.run(log_append("a", "log", (), token="big", blob=blob, count=100)) == 1
    assert t.run(log_append("a", "log", (), token="big", blob=blob, count=100)) == 1  # retry
    with pytest.raises(InvalidArgument, match="token"):
        t.run(log_append("a", "log", (b"y",), token="big"))
    assert t.meta("log") == LogMeta(0, 101, False)
    # The row is the pointer: the records are in blob data, written once.
    assert t.rows[keys.encode_key("a", "log", keys.KIND_RECORD, keys.seq_row(100))].blob == blob
    with pytest.raises(AssertionError):
        log_append("a", "log", (b"x",), blob=blob, count=1)  # records or a blob, not both


def test_trim_and_seal() -> None:
    t = Table()
    t.run(log_append("a", "log", tuple(b"%d" % i for i in range(5))))
    t.run(LogTrim("a", "log", upto_seq=3))
    assert t.meta("log") == LogMeta(3, 5, False)
    lsn = t.lsn
    t.run(LogTrim("a", "log", upto_seq=1))  # below: nothing to do
    assert t.lsn == lsn
    with pytest.raises(OutOfRange):
        t.run(LogTrim("a", "log", upto_seq=6))
    t.run(LogSeal("a", "log"))
    with pytest.raises(Sealed):
        t.run(log_append("a", "log", (b"late",)))
    assert t.meta("log") == LogMeta(3, 5, True)


def test_entity_conditions_and_etags() -> None:
    t = Table()
    [etag] = t.run(EntityWrite("a", "p", (Write("put", b"r", b"v1"),)))
    assert etag == etag_of(t.lsn)
    with pytest.raises(PreconditionFailed):
        t.run(EntityWrite("a", "p", (Write("put", b"r", b"v2", if_none_match=True),)))
    with pytest.raises(PreconditionFailed):
        t.run(EntityWrite("a", "p", (Write("put", b"r", b"v2", if_match="nope"),)))
    [etag2] = t.run(EntityWrite("a", "p", (Write("put", b"r", b"v2", if_match=etag),)))
    assert etag2 != etag
    with pytest.raises(NotFound):
        t.run(EntityWrite("a", "p", (Write("delete", b"missing"),)))
    assert t.run(EntityWrite("a", "p", (Write("delete", b"r", if_match=etag2),))) == [""]
    assert list(t.rows) == [meta_key("a", "p")]  # only the mark: "p" is an entity group


def test_a_retried_entity_write_is_answered_from_its_token_and_undoes_nothing() -> None:
    """Issue 15 hole 2: the client retries a put whose answer was lost; a later write landed
    meanwhile. The retry (same token) answers the first attempt's ETag and writes nothing."""
    t = Table()
    first = EntityWrite("a", "p", (Write("put", b"r", b"old"),), token="c-1",
                        written_at_ms=1)
    [etag] = t.run(first)
    [later] = t.run(EntityWrite("a", "p", (Write("put", b"r", b"new"),), token="c-2"))
    lsn = t.lsn
    assert t.run(first) == [etag]  # the retry
    assert t.lsn == lsn and t.rows[first.key(Write("put", b"r"))].value == b"new"
    assert etag_of(t.rows[first.key(Write("put", b"r"))].version) == later
    # A batch's retry gives every item's answer; a token reused for another write is refused.
    batch = EntityWrite("a", "p", (Write("delete", b"r"), Write("put", b"s", b"1")),
                        token="c-3")
    answer = t.run(batch)
    assert answer[0] == "" and t.run(batch) == answer
    with pytest.raises(InvalidArgument, match="token"):
        t.run(EntityWrite("a", "p", (Write("put", b"x", b"1"),), token="c-3"))


def test_batch_is_all_or_nothing_and_sees_its_own_writes() -> None:
    t = Table()
    before = dict(t.rows)
    with pytest.raises(PreconditionFailed):
        t.run(EntityWrite("a", "p", (Write("put", b"a", b"1"),
                                     Write("put", b"b", b"2", if_match="wrong"))))
    assert t.rows == before and t.lsn == 0
    # A later write in the batch sees the earlier one: put then conditional put on it.
    etags = t.run(EntityWrite("a", "p", (Write("put", b"a", b"1"),
                                         Write("delete", b"a"),
                                         Write("put", b"a", b"3", if_none_match=True))))
    assert etags[1] == "" and etags[0] == etags[2]
    assert t.rows[keys.encode_key("a", "p", keys.KIND_ENTITY, b"a")].value == b"3"


def test_overlay_refuses_undeclared_reads() -> None:
    with pytest.raises(AssertionError):
        Overlay({}).row(b"never declared")


def test_validate_writes() -> None:
    for bad in (Write("upsert", b"r"), Write("put", b"", b"v"),
                Write("put", b"r", b"v", if_match="e", if_none_match=True)):
        with pytest.raises(InvalidArgument):
            validate_writes([bad])


def test_record_batches_round_trip() -> None:
    records = [b"", b"a", b"bc" * 1000]
    encoded = encode_records(records, payload_crcs(records))
    assert decode_records(encoded, 41) == with_crcs(39, records)
    with pytest.raises(Internal):
        decode_records(encoded[:-1], 41)
