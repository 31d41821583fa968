"""Commit-log batches and metadata records: round trips, replay filtering, damage."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import ChecksumError, Internal
from partition_layer.commit_log import (
    CommitBatch,
    CommitOp,
    Replayer,
    decode_batch,
    encode_batch,
    ops_after,
)
from partition_layer.keys import KeyRange
from partition_layer.partition_meta import PartitionMeta, decode_meta, encode_meta
from partition_layer.runs import RunInfo
from stream_layer.framing import Location

mutations = st.lists(st.tuples(st.binary(max_size=12), st.binary(max_size=30)), max_size=4)


@st.composite
def batches(draw: st.DrawFn) -> CommitBatch:
    lsns = sorted(draw(st.sets(st.integers(0, 2**64 - 1), min_size=0, max_size=8)))
    return CommitBatch([CommitOp(lsn, draw(mutations)) for lsn in lsns])


@given(batches(), st.integers(0, 2**64 - 1))
def test_batch_round_trip_and_replay_filter(batch: CommitBatch, applied: int) -> None:
    decoded = decode_batch(encode_batch(batch))
    assert decoded == batch
    fresh = ops_after(decoded, applied)
    assert fresh == [op for op in batch.ops if op.lsn > applied]
    assert ops_after(decoded, -1) == batch.ops


def test_lsns_must_increase() -> None:
    with pytest.raises(Internal):
        encode_batch(CommitBatch([CommitOp(5, []), CommitOp(5, [])]))
    good = encode_batch(CommitBatch([CommitOp(5, [(b"k", b"v")]), CommitOp(7, [])]))
    assert decode_batch(good).first_lsn == 5 and decode_batch(good).last_lsn == 7


@given(batches().filter(lambda b: bool(b.ops)), st.data())
def test_damaged_batches_never_decode(batch: CommitBatch, data: st.DataObject) -> None:
    buf = bytearray(encode_batch(batch))
    where = data.draw(st.integers(0, len(buf) - 1))
    buf[where] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises((ChecksumError, Internal)):
        decode_batch(bytes(buf))
    with pytest.raises((ChecksumError, Internal)):
        decode_batch(bytes(buf[:data.draw(st.integers(0, len(buf) - 1))]))


def test_structurally_bad_batch_with_a_valid_crc() -> None:
    from common.checksums import crc32c

    def sealed(body: bytes) -> bytes:
        return body + crc32c(body).to_bytes(4, "little")

    head = b"CL\x01" + (1).to_bytes(4, "little")
    for body in [b"XX\x01" + (0).to_bytes(4, "little"),
                 head,
                 head + (1).to_bytes(8, "little") + (1).to_bytes(4, "little")
                 + (50).to_bytes(4, "little") + (0).to_bytes(4, "little") + b"k",
                 b"CL\x01" + (0).to_bytes(4, "little") + b"stray"]:
        with pytest.raises(Internal):
            decode_batch(sealed(body))


def run_info(run_id: int) -> RunInfo:
    return RunInfo(run_id=run_id, index_blocks=(Location(1, 0, 100),),
                   bloom_blocks=(Location(1, 100, 50), Location(2, 0, 9)), key_count=3,
                   data_blocks=1, data_bytes=1000, first_key=b"\x00a", last_key=b"\xffz",
                   min_version=1, max_version=9)


def test_partition_meta_round_trip() -> None:
    metas = [
        PartitionMeta(partition_id=1, key_range=KeyRange(b"", None)),
        PartitionMeta(partition_id=7, key_range=KeyRange(b"a\x00", b"q"),
                      runs=[run_info(4), run_info(2)], replay_from=Location(3, 4096, 77),
                      applied_lsn=12345, next_run_id=5,
                      intents=[{"kind": "split", "at": "6d"}]),
    ]
    for meta in metas:
        assert decode_meta(encode_meta(meta)) == meta


def test_partition_meta_refuses_damage_and_nonsense() -> None:
    raw = encode_meta(PartitionMeta(partition_id=1, key_range=KeyRange(b"", None)))
    with pytest.raises(ChecksumError):
        decode_meta(raw[:-2] + b"}}")
    with pytest.raises(Internal):
        decode_meta(b"XX" + raw[2:])
    with pytest.raises(Internal):
        decode_meta(raw[:3])
    with pytest.raises(AssertionError):
        PartitionMeta(partition_id=1, key_range=KeyRange(b"", None),
                      runs=[run_info(3), run_info(3)], next_run_id=9)
    with pytest.raises(AssertionError):
        PartitionMeta(partition_id=1, key_range=KeyRange(b"", None), runs=[run_info(3)],
                      next_run_id=3)


def _batch(epoch: int, *lsns: int) -> CommitBatch:
    return CommitBatch([CommitOp(lsn, [(b"k%d" % lsn, b"v")]) for lsn in lsns], epoch)


def test_replayer_skips_duplicates_and_reorders() -> None:
    r = Replayer(applied_lsn=3)
    assert [op.lsn for op in r.feed(_batch(1, 2, 3, 4))] == [4]  # 2, 3: in the runs
    assert r.feed(_batch(1, 6)) == []                              # waits for 5
    assert [op.lsn for op in r.feed(_batch(1, 5))] == [5, 6]
    assert r.feed(_batch(1, 5, 6)) == []                           # a re-sent block
    assert r.finish() == 0 and r.applied_lsn == 6


def test_replayer_drops_an_old_owners_junk_when_a_new_owner_writes() -> None:
    r = Replayer(applied_lsn=0)
    assert [op.lsn for op in r.feed(_batch(1, 1, 2))] == [1, 2]
    assert r.feed(_batch(1, 4)) == []  # 3 failed: 4 was never acknowledged
    # The next owner loaded up to 2 and writes 3, 4 itself: the old 4 must not be applied.
    assert [op.lsn for op in r.feed(_batch(2, 3))] == [3]
    new_four = _batch(2, 4)
    assert r.feed(new_four) == new_four.ops
    assert r.feed(_batch(1, 5)) == []  # an older epoch after a newer one: ignored
    assert r.finish() == 2


def test_epoch_round_trips() -> None:
    assert decode_batch(encode_batch(_batch(77, 1, 2))).epoch == 77


def test_an_op_applied_from_another_stamp_keeps_its_mark() -> None:
    """commit_log.REPLICATED (issue 30): round-trips, survives `within`, and a block
    written before the mark existed decodes unmarked (the top bit of its counts is clear)."""
    from partition_layer.commit_log import CommitBatch, CommitOp, decode_batch, encode_batch
    from partition_layer.commit_log import within as within_range
    from partition_layer.keys import KeyRange

    ops = [CommitOp(1, [(b"a", b"1")]), CommitOp(2, [(b"b", b"2"), (b"z", b"3")], True)]
    decoded = decode_batch(encode_batch(CommitBatch(ops, 4)))
    assert decoded.ops == ops and [op.replicated for op in decoded.ops] == [False, True]
    assert within_range(decoded.ops[1], KeyRange(b"", b"c")) == CommitOp(2, [(b"b", b"2")],
                                                                         True)
