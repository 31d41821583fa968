"""frontend/server_checks.check_request: names by the naming rules, every size limit refused
with InvalidArgument naming the limit (`partition.FIELD`), a payload that does not match its
CRC32C refused with ChecksumError, and the bytes a good request carries."""

from __future__ import annotations

import pytest

from common.config import PartitionLimits
from common.errors import ChecksumError, InvalidArgument
from common.proto import partition_pb2 as pb
from frontend.server_checks import REQUEST_OVERHEAD_BYTES, check_request
from partition_layer.payload_crc import payload_crcs

LIMITS = PartitionLimits(append_records_max=3, record_bytes_max=10, append_bytes_max=25,
                         batch_ops_max=2, row_bytes_max=4, value_bytes_max=8,
                         blob_value_bytes_min=8)


def append(records: list[bytes], log: str = "orders", account: str = "acme") -> pb.Request:
    return pb.Request(account=account, pname=log, append=pb.AppendOp(
        records=records, crcs=payload_crcs(records), token="t"))


def put(row: bytes, value: bytes) -> pb.Request:
    return pb.Request(account="acme", pname="users", put=pb.PutOp(
        row=row, value=value, value_crc=payload_crcs([value])[0]))


def check(request: pb.Request) -> int:
    return check_request(request, request.WhichOneof("op") or "", LIMITS)


def test_good_requests_and_their_bytes() -> None:
    assert check(append([b"abc", b"de"])) == REQUEST_OVERHEAD_BYTES + 5
    assert check(put(b"row", b"value")) == REQUEST_OVERHEAD_BYTES + 5
    read = pb.Request(account="acme", pname="orders", read=pb.ReadOp(from_seq=0, limit=5))
    assert check(read) == REQUEST_OVERHEAD_BYTES


@pytest.mark.parametrize("request_, words", [
    (append([b"x"], account="Acme"), "account name"),
    (append([b"x"], log="a_b"), "log name"),
    (append([b"x"], log="-ab"), "log name"),
    (append([]), "at least one record"),
    (append([b"x"] * 4), "partition.append_records_max = 3"),
    (append([b"x" * 11]), "partition.record_bytes_max = 10"),
    (append([b"x" * 10] * 3), "partition.append_bytes_max = 25"),
    (put(b"rowsx", b"v"), "partition.row_bytes_max = 4"),
    (put(b"", b"v"), "partition.row_bytes_max = 4"),
    (put(b"row", b"v" * 9), "partition.value_bytes_max = 8"),
    (pb.Request(account="acme", pname="users", batch=pb.BatchOp(items=[
        pb.BatchItem(kind="delete", row=b"r")] * 3)), "partition.batch_ops_max = 2"),
    (pb.Request(account="acme", pname="users", batch=pb.BatchOp(items=[
        pb.BatchItem(kind="merge", row=b"r")])), "put or a delete"),
    (pb.Request(account="acme", pname="users", scan=pb.ScanOp()), "does not take"),
])
def test_limits_are_refused_by_name(request_: pb.Request, words: str) -> None:
    with pytest.raises(InvalidArgument, match=words.replace(".", r"\.")):
        check(request_)


def test_a_payload_that_does_not_match_its_crc_is_refused() -> None:
    request = append([b"abc", b"def"])
    request.append.records[1] = b"deF"
    with pytest.raises(ChecksumError, match="record 1"):
        check(request)
    changed = put(b"row", b"value")
    changed.put.value = b"valuE"
    with pytest.raises(ChecksumError):
        check(changed)
    missing = append([b"abc"])
    del missing.append.crcs[:]
    with pytest.raises(InvalidArgument, match="one CRC32C per record"):
        check(missing)
