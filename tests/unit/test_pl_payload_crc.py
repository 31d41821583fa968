"""The checks of end-to-end checksums (payload_crc.py): what the partition server refuses
before acting on a request, and what a reader refuses of a reply."""

from __future__ import annotations

import pytest

from common.checksums import crc32c
from common.errors import ChecksumError, InvalidArgument
from common.proto import partition_pb2 as pb
from partition_layer.client_requests import batch_request, put_request
from partition_layer.payload_crc import payload_crcs, verify_payload, verify_records


def append(records: list[bytes], crcs: list[int]) -> pb.Request:
    return pb.Request(account="a", pname="log", append=pb.AppendOp(records=records, crcs=crcs))


def test_an_append_matches_its_crcs_one_per_record() -> None:
    records = [b"x", b"", b"zz" * 100]
    verify_payload(append(records, payload_crcs(records)), "ps")
    wrong = payload_crcs(records)
    wrong[2] ^= 1 << 31
    with pytest.raises(ChecksumError, match="ps: record 2 of the append to 'log'"):
        verify_payload(append(records, wrong), "ps")
    for crcs in ([], payload_crcs(records)[:2], [*payload_crcs(records), 0]):
        with pytest.raises(InvalidArgument, match="one CRC32C per record"):
            verify_payload(append(records, crcs), "ps")


def test_puts_and_batches_carry_their_values_crcs() -> None:
    """The partition client's requests carry the right CRCs; one changed bit is refused."""
    put = put_request("a", "g", "row", b"value", None, None, "t")
    verify_payload(put, "ps")
    put.put.value = b"valuf"
    with pytest.raises(ChecksumError, match="value put"):
        verify_payload(put, "ps")
    batch = batch_request("a", "g", [("delete", "r0"), ("put", "r1", b"v1")], "t")
    verify_payload(batch, "ps")
    batch.batch.items[1].value_crc ^= 1
    with pytest.raises(ChecksumError, match="item 1"):
        verify_payload(batch, "ps")


def test_a_reader_refuses_a_record_off_its_crc() -> None:
    good = [pb.Record(seq=5, data=b"a", crc=crc32c(b"a")),
            pb.Record(seq=6, data=b"b", crc=crc32c(b"b"))]
    assert verify_records(good, "log 'l'") == [(5, b"a"), (6, b"b")]
    assert verify_records([], "log 'l'") == []
    bad = [*good, pb.Record(seq=7, data=b"c", crc=crc32c(b"d"))]
    with pytest.raises(ChecksumError, match="record 7 of log 'l'"):
        verify_records(bad, "log 'l'")
