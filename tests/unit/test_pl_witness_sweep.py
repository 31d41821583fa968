"""The pure parts of the owner's sweep of its CURP witnesses (partition_layer/witness_sweep.py)
and the committer's side of it (Speculation.condemn): which token row a witness's record
stands for, how long a swept token stays condemned, and when entity tokens may expire."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from common.config import PartitionLimits
from common.proto import partition_pb2 as pb
from common.proto import witness_pb2 as wpb
from partition_layer.checkpoint import Checkpointer
from partition_layer.client_requests import put_request
from partition_layer.curp import footprint_of
from partition_layer.operations import ENTITY_TOKEN_TTL_MS, EntityWrite, LogAppend, Write, meta_key
from partition_layer.operations import token_key as token_row_key
from partition_layer.payload_crc import payload_crcs
from partition_layer.rows import EntityToken, LogMeta, Row, TokenEntry, encode_row
from partition_layer.speculation import Speculation
from partition_layer.witness_set import set_epoch
from partition_layer.witness_sweep import (
    CLOCK_SKEW_S,
    SafeVersions,
    condemned_until_s,
    token_cutoffs,
    token_key_of,
    tokens_expire_before_ms,
)
from tests.support.checkpoint_site import MemorySite


def record_of(request: pb.Request, token: str, deadline_ms: int = 0) -> wpb.WitnessRecord:
    footprint = footprint_of(request)
    assert footprint is not None
    return wpb.WitnessRecord(token=token.encode(), epoch=3, exclusive=sorted(footprint.exclusive),
                             shared=sorted(footprint.shared), deadline_ms=deadline_ms)


def test_a_record_names_the_token_row_its_write_leaves() -> None:
    append = pb.Request(account="acct", pname="log/é", append=pb.AppendOp(
        records=[b"x"], crcs=payload_crcs([b"x"]), token="tok-a"))
    put = put_request("acct", "group", "row", b"v", None, None, "tok-p")
    batch = pb.Request(account="acct", pname="g2", token="tok-b", batch=pb.BatchOp(items=[
        pb.BatchItem(kind="put", row=b"a", value=b"1"),
        pb.BatchItem(kind="put", row=b"b", value=b"2")]))
    assert token_key_of(record_of(append, "tok-a")) == token_row_key("acct", "log/é", "tok-a")
    assert token_key_of(record_of(put, "tok-p")) == token_row_key("acct", "group", "tok-p")
    assert token_key_of(record_of(batch, "tok-b")) == token_row_key("acct", "g2", "tok-b")


def test_a_record_of_no_fast_writes_shape_names_none() -> None:
    assert token_key_of(wpb.WitnessRecord(token=b"t")) is None
    assert token_key_of(wpb.WitnessRecord(token=b"t", exclusive=[b"a", b"b"])) is None
    assert token_key_of(wpb.WitnessRecord(token=b"t", exclusive=[b"not a key"])) is None


def test_a_swept_token_is_condemned_past_its_deadline_by_the_clock_skew() -> None:
    put = put_request("acct", "group", "row", b"v", None, None, "t")
    assert condemned_until_s(record_of(put, "t", deadline_ms=50_000), now_s=40.0) == \
        50.0 + CLOCK_SKEW_S
    assert condemned_until_s(record_of(put, "t"), now_s=40.0) == \
        40.0 + ENTITY_TOKEN_TTL_MS / 1000


def test_entity_tokens_expire_no_later_than_the_last_full_sweep_allows() -> None:
    ttl = ENTITY_TOKEN_TTL_MS
    assert tokens_expire_before_ms(1000.0, None) == 1_000_000 - ttl
    assert tokens_expire_before_ms(1000.0, 1001.0) == 1_000_000 - ttl
    # A witness unanswering since 400 s: tokens written after 400 s - TTL stay.
    assert tokens_expire_before_ms(1000.0, 400.0) == 400_000 - ttl


def test_a_condemned_token_is_never_answered_early_until_forgotten() -> None:
    speculation = Speculation()
    assert not speculation.may_answer_early(LogAppend("acct", "log", records=(b"x",), token="t",
                                                      crcs=(0,))), "no set of witnesses"
    speculation.epoch = set_epoch(3)
    append = LogAppend("acct", "log", records=(b"x",), token="t1", crcs=(0,))
    put = EntityWrite("acct", "group", writes=(Write("put", b"r", b"v"),), token="t2")
    untokened = LogAppend("acct", "log", records=(b"x",), crcs=(0,))
    assert speculation.may_answer_early(append) and speculation.may_answer_early(put)
    speculation.condemn(append.token_key, until_s=100.0)
    speculation.condemn(put.token_key, until_s=50.0)
    assert not speculation.may_answer_early(append)
    assert not speculation.may_answer_early(put)
    assert speculation.may_answer_early(untokened)
    other = LogAppend("acct", "log", records=(b"x",), token="t3", crcs=(0,))
    assert speculation.may_answer_early(other)
    speculation.forget_condemned(now_s=60.0)
    assert speculation.may_answer_early(put) and not speculation.may_answer_early(append)
    speculation.condemn(append.token_key, until_s=10.0)  # an earlier expiry never shortens
    speculation.forget_condemned(now_s=99.0)
    assert not speculation.may_answer_early(append)


def test_a_checkpoint_keeps_entity_tokens_a_witness_out_of_reach_may_still_need() -> None:
    """Two entity tokens past their TTL; the witnesses' last full sweep was before the
    second was written plus the TTL: the first expires at the checkpoint, the second stays
    (a record of it may still be held where the sweep could not reach). Without witnesses
    both expire."""
    now_s = time.time()
    ttl_s = ENTITY_TOKEN_TTL_MS / 1000
    old_ms, newer_ms = int((now_s - ttl_s - 60) * 1000), int((now_s - ttl_s - 10) * 1000)

    def tokens_after_a_checkpoint(witnesses: object) -> list[bytes]:
        site = MemorySite(PartitionLimits())
        site.witnesses = witnesses  # type: ignore[assignment]
        for token, written_ms in (("old", old_ms), ("newer", newer_ms)):
            entry = EntityToken(version=5, written_at_ms=written_ms, puts=(True,))
            site.memtable.put(token_row_key("acct", "g", token),
                              encode_row(Row(5, value=entry.encode())))

        async def scenario() -> list[bytes]:
            await Checkpointer(site).checkpoint_now()  # type: ignore[arg-type]
            return [key for key in (token_row_key("acct", "g", t) for t in ("old", "newer"))
                    if await site.readers[0].get(key) is not None] if site.readers else []
        return asyncio.run(scenario())

    swept = SimpleNamespace(swept_at=now_s - 30, safe_versions=SafeVersions(0))
    assert tokens_after_a_checkpoint(swept) == [token_row_key("acct", "g", "newer")]
    assert tokens_after_a_checkpoint(None) == []


def test_safe_versions_date_rows_by_the_floor_sampled_a_ttl_before_the_last_full_sweep() -> None:
    ttl_s = ENTITY_TOKEN_TTL_MS / 1000
    versions = SafeVersions(floor=10)  # the set fenced and cleared with the floor at 10
    versions.sample(100.0, 20)
    versions.sample(200.0, 30)
    assert versions.safe_upto(swept_at_s=100.0 + ttl_s - 1) == 10
    assert versions.safe_upto(swept_at_s=100.0 + ttl_s) == 20
    assert versions.safe_upto(swept_at_s=150.0 + ttl_s) == 20  # never lower again
    assert versions.safe_upto(swept_at_s=500.0 + ttl_s) == 30


def test_a_checkpoint_keeps_a_trimmed_logs_tokens_a_witness_may_still_need() -> None:
    """A log trimmed past two appends' records: their token rows go at the checkpoint,
    but, with witnesses, not the one written after the last safe version (a leftover record
    of its append would be appended again by a recovery without it)."""
    def tokens_after_a_checkpoint(witnesses: object) -> list[str]:
        site = MemorySite(PartitionLimits())
        site.witnesses = witnesses  # type: ignore[assignment]
        site.memtable.put(meta_key("acct", "log"),
                          encode_row(Row(9, value=LogMeta(2, 2, False).encode())))
        for token, version, seq in (("old", 5, 0), ("newer", 8, 1)):
            site.memtable.put(token_row_key("acct", "log", token),
                              encode_row(Row(version, value=TokenEntry(seq, 1).encode())))

        async def scenario() -> list[str]:
            await Checkpointer(site).checkpoint_now()  # type: ignore[arg-type]
            return [t for t in ("old", "newer") if site.readers and await site.readers[0].get(
                token_row_key("acct", "log", t)) is not None]
        return asyncio.run(scenario())

    swept = SimpleNamespace(swept_at=time.time(), safe_versions=SafeVersions(6))
    assert tokens_after_a_checkpoint(swept) == ["newer"]
    assert tokens_after_a_checkpoint(None) == []


def test_no_token_row_goes_while_the_partition_recovers() -> None:
    """The records a recovery executes may be leftovers its last owner kept their token rows
    for: while it recovers, no checkpoint drops one, whatever the TTL says."""
    swept = SimpleNamespace(swept_at=time.time(), safe_versions=SafeVersions(10 ** 9))
    assert token_cutoffs(swept, time.time(), recovering=True) == (0, -1)
    assert token_cutoffs(None, time.time(), recovering=True) == (0, -1)
    expire_ms, kept_above = token_cutoffs(swept, time.time())
    assert expire_ms > 0 and kept_above == 10 ** 9
