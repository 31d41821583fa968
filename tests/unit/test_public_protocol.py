"""The public protocol (protocol/frontend_v1.proto, issue 31) mirrors the internal messages a
front end reads it as (frontend/public_protocol.py), and what is not public is dropped."""

from __future__ import annotations

from common.proto import frontend_pb2 as fe_pb
from common.proto import frontend_v1_pb2 as v1
from common.proto import partition_pb2 as pb
from frontend import public_protocol

REQUESTS = ("RequestBatch", "Request", "SubscribeRequest", "ScanRequest", "ScanRangesRequest",
            "FrontEndStatusRequest")


def test_every_public_message_mirrors_its_internal_namesake() -> None:
    assert public_protocol.mirror_problems() == []


def test_the_public_service_has_the_internal_services_methods() -> None:
    public = {m.name for m in v1.DESCRIPTOR.services_by_name["FrontEnd"].methods}
    internal = {m.name for m in fe_pb.DESCRIPTOR.services_by_name["FrontEnd"].methods}
    # Replicate is between stamps (issue 30: signed with the location's secret), no SDK's.
    assert public == internal - {"Replicate"}


def test_only_requests_top_level_fields_and_never_set_answers_are_internal() -> None:
    """read_request_batch clears a Request's internal fields only: if another message a
    caller sends grew one, it would have to clear that too (and this fails first). An answer
    field that is not public must be one a front end never sets."""
    internal = {m.name: public_protocol.internal_only(m)
                for m in v1.DESCRIPTOR.message_types_by_name.values()}
    assert {name: fields for name, fields in internal.items() if fields} == {
        "Request": ["curp_epoch", "deadline_ms", "replicate", "scan", "sync", "version_hint"],
        "Response": ["epoch", "lsn", "speculative", "witnesses"],
        "ResponseBatch": ["pressure"]}
    never_set = public_protocol.INTERNAL_ANSWER_FIELDS
    assert never_set == {"stamp.partition.ResponseBatch": {"pressure"},
                         "stamp.partition.Response": {"speculative", "epoch", "lsn",
                                                      "witnesses"}}
    assert all(not internal[name] for name in REQUESTS if name != "Request")


def test_a_public_request_is_read_as_the_internal_one_without_internal_fields() -> None:
    records = [b"r" * 100, b"s"]
    request = pb.Request(id=7, account="acme", pname="orders", token="t", timeout_ms=900,
                         deadline_ms=123, append=pb.AppendOp(records=records, crcs=[1, 2]))
    scan = pb.Request(account="acme", scan=pb.ScanOp(start_pname="a"))
    # Inter-stamp replication's op (issue 30) is internal too: rows as they are, versions
    # and tokens included, are never the caller's to send.
    replicate = pb.Request(account="acme", pname="orders", replicate=pb.ReplicateOp(
        keys=[b"k"], rows=[b"r"]))
    # So are CURP's (issue 32): a version the owner gives a write it answers early, and the
    # front end's wait for such a write.
    request.version_hint, request.curp_epoch = 1 << 60, 3
    data = pb.RequestBatch(requests=[request, scan, replicate]).SerializeToString()
    batch = public_protocol.read_request_batch(data)
    first, second, third = batch.requests
    assert first.deadline_ms == 0 and second.WhichOneof("op") is None
    assert third.WhichOneof("op") is None
    expected = pb.Request()
    expected.CopyFrom(request)
    expected.ClearField("deadline_ms")
    expected.ClearField("version_hint")
    expected.ClearField("curp_epoch")
    assert first == expected
    # What a caller of the public protocol sends is byte for byte what the front end reads.
    public = v1.Request.FromString(expected.SerializeToString())
    assert public.SerializeToString(deterministic=True) == expected.SerializeToString(
        deterministic=True)
