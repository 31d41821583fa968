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


def test_an_append_is_checked_from_its_records_read_once(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """Each read of a message's repeated bytes field copies every record (100 KiB for an
    append of 100 records of 1 KiB): the limits and the CRCs of an append are checked on one
    tuple of its records, read once — not by verify_payload, which reads them again."""
    import frontend.server_checks as server_checks

    checked: list[tuple[bytes, ...]] = []
    real = server_checks.verify_append

    def verify_append(records: tuple[bytes, ...], *args: object) -> None:
        checked.append(records)
        real(records, *args)  # type: ignore[arg-type]

    def verify_payload(request: pb.Request, where: str) -> None:
        raise AssertionError(f"an append's records read a second time ({where})")

    monkeypatch.setattr(server_checks, "verify_append", verify_append)
    monkeypatch.setattr(server_checks, "verify_payload", verify_payload)
    assert check(append([b"abc", b"de"])) == REQUEST_OVERHEAD_BYTES + 5
    assert checked == [(b"abc", b"de")]
    corrupt = append([b"abc", b"de"])
    corrupt.append.records[1] = b"dE"
    with pytest.raises(ChecksumError, match="record 1"):
        check(corrupt)
    with pytest.raises(InvalidArgument, match="record 1 has 11 bytes"):
        check(append([b"abc", b"x" * 11]))


def test_a_client_cannot_set_the_version_a_front_end_gives_curp_writes() -> None:
    """Request.version_hint makes the owner answer before the write is durable (CURP): set
    by a client, whose front end would pass the early answer on as final, it is refused;
    and a client's SyncOp is no operation a front end takes."""
    hinted = append([b"x"])
    hinted.version_hint = 1 << 60
    with pytest.raises(InvalidArgument, match="version_hint"):
        check(hinted)
    with pytest.raises(InvalidArgument, match="'sync'"):
        check(pb.Request(account="acme", pname="orders", sync=pb.SyncOp(epoch=1, lsn=2)))
