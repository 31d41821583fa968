"""What commutes under CURP (partition_layer/curp.py): footprints of requests, and the owner's
index of unsynced writes, checked against the plain definition."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from common.proto import partition_pb2 as pb
from partition_layer.curp import Footprint, footprint_of


def append(pname: str, token: str = "t") -> pb.Request:
    return pb.Request(account="a", pname=pname, append=pb.AppendOp(records=[b"x"], token=token))


def put(pname: str, row: bytes, token: str = "t") -> pb.Request:
    return pb.Request(account="a", pname=pname, token=token, put=pb.PutOp(row=row, value=b"v"))


def conflict(a: pb.Request, b: pb.Request) -> bool:
    fa, fb = footprint_of(a), footprint_of(b)
    assert fa is not None and fb is not None
    assert fa.conflicts(fb) == fb.conflicts(fa)  # the rule is symmetric
    return fa.conflicts(fb)


def test_appends_commute_across_logs_not_within_one():
    assert not conflict(append("log-1"), append("log-2"))
    assert conflict(append("log-1"), append("log-1"))


def test_entity_writes_commute_across_rows_of_one_group_not_on_one_row():
    assert not conflict(put("g", b"r1"), put("g", b"r2"))
    assert conflict(put("g", b"r1"), put("g", b"r1"))


def test_a_log_and_an_entity_group_of_one_name_conflict():
    """A name's kind is fixed by its first write: which one is first changes both answers."""
    assert conflict(append("n"), put("n", b"r"))
    assert not conflict(append("n"), put("other", b"r"))


def test_batches_by_the_rows_they_touch():
    batch = pb.Request(account="a", pname="g", token="b", batch=pb.BatchOp(items=[
        pb.BatchItem(kind="put", row=b"r1"), pb.BatchItem(kind="put", row=b"r2")]))
    assert conflict(batch, put("g", b"r2"))
    assert not conflict(batch, put("g", b"r3"))


def test_what_keeps_the_sync_path():
    """Reads, scans and replicated rows; writes without the token recovery dedupes by; and
    writes whose refusal a later write could turn into success (curp.py step 3)."""
    assert footprint_of(append("log", token="")) is None
    assert footprint_of(put("g", b"r", token="")) is None
    assert footprint_of(pb.Request(account="a", pname="g", get=pb.GetOp(row=b"r"))) is None
    assert footprint_of(pb.Request(account="a", pname="g", scan=pb.ScanOp())) is None
    # A seal has no token for the owner's sweep to judge its records by (curp.py step 3).
    assert footprint_of(pb.Request(account="a", pname="log", seal=pb.Empty())) is None
    assert footprint_of(pb.Request(account="a", pname="g",
                                   replicate=pb.ReplicateOp())) is None
    conditional = put("g", b"r")
    conditional.put.if_match = '"1"'
    assert footprint_of(conditional) is None
    conditional = put("g", b"r")
    conditional.put.if_none_match = True
    assert footprint_of(conditional) is None
    assert footprint_of(pb.Request(account="a", pname="g", token="d",
                                   delete=pb.DeleteOp(row=b"r"))) is None
    assert footprint_of(pb.Request(account="a", pname="g", token="b", batch=pb.BatchOp(
        items=[pb.BatchItem(kind="put", row=b"r1"),
               pb.BatchItem(kind="delete", row=b"r2")]))) is None
    assert footprint_of(pb.Request(account="a", pname="log",
                                   trim=pb.TrimOp(upto_seq=3))) is None


KEYS = st.sampled_from([b"k1", b"k2", b"k3", b"k4"])
FOOTPRINTS = st.builds(Footprint, st.frozensets(KEYS, max_size=2), st.frozensets(KEYS, max_size=2))


@settings(max_examples=200, deadline=None)
@given(FOOTPRINTS, FOOTPRINTS)
def test_conflict_is_symmetric_and_shared_keys_commute(a, b):
    assert a.conflicts(b) == b.conflicts(a)
    both = a.keys() & b.keys()
    only_shared = all(k not in a.exclusive and k not in b.exclusive for k in both)
    assert a.conflicts(b) == (bool(both) and not only_shared)
