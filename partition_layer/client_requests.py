"""The data requests the partition client sends (client.py), built from its Python arguments:
argument checks that need no server, and the routing key of a scan.

Contract: every builder either returns a complete pb.Request or raises InvalidArgument; every
value put carries its CRC32C (DESIGN §5, end-to-end checksums); a mutation is given `token` as
is (the client makes one per call, so a retry of that call is answered from the first
attempt's outcome, operations.EntityWrite).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from common.checksums import crc32c
from common.errors import InvalidArgument
from common.proto import partition_pb2 as pb
from partition_layer import keys

Row = bytes | str


def row_bytes(row: Row) -> bytes:
    return row.encode() if isinstance(row, str) else bytes(row)


def put_request(account: str, pname: str, row: Row, value: bytes, if_match: str | None,
                if_none_match: str | None, token: str) -> pb.Request:
    value = bytes(value)
    return pb.Request(account=account, pname=pname, token=token, put=pb.PutOp(
        row=row_bytes(row), value=value, value_crc=crc32c(value), if_match=if_match or "",
        if_none_match=_if_none_match(if_none_match)))


def delete_request(account: str, pname: str, row: Row, if_match: str | None, token: str
                   ) -> pb.Request:
    return pb.Request(account=account, pname=pname, token=token, delete=pb.DeleteOp(
        row=row_bytes(row), if_match=if_match or ""))


def batch_request(account: str, pname: str, ops: Sequence[tuple[Any, ...]], token: str
                  ) -> pb.Request:
    return pb.Request(account=account, pname=pname, token=token,
                      batch=pb.BatchOp(items=[_batch_item(op) for op in ops]))


def check_seq(what: str, seq: int) -> int:
    """A sequence number as the wire carries it (uint64): protobuf would raise ValueError."""
    if not isinstance(seq, int) or not 0 <= seq < 1 << 64:
        raise InvalidArgument(f"{what} is a sequence number from 0 to 2**64 - 1, not {seq!r}")
    return seq


def scan_key(request: pb.Request) -> bytes:
    """The key whose partition holds the start of a scan."""
    kind = keys.KIND_ENTITY if request.scan.start_row else keys.KIND_META
    return keys.encode_key(request.account, request.scan.start_pname, kind,
                           request.scan.start_row)


def _if_none_match(value: str | None) -> bool:
    if value in (None, ""):
        return False
    if value != "*":
        raise InvalidArgument('if_none_match is "*" (the row must not exist) or None')
    return True


def _batch_item(op: tuple[Any, ...]) -> pb.BatchItem:
    if not op or op[0] not in ("put", "delete"):
        raise InvalidArgument(f"a batch operation is ('put', row, value[, if_match]) or "
                              f"('delete', row[, if_match]), not {op!r}")
    if op[0] == "put":
        if len(op) not in (3, 4):
            raise InvalidArgument(f"('put', row, value[, if_match]), not {op!r}")
        value = bytes(op[2])
        return pb.BatchItem(kind="put", row=row_bytes(op[1]), value=value,
                            value_crc=crc32c(value),
                            if_match=op[3] if len(op) == 4 and op[3] else "")
    if len(op) not in (2, 3):
        raise InvalidArgument(f"('delete', row[, if_match]), not {op!r}")
    return pb.BatchItem(kind="delete", row=row_bytes(op[1]),
                        if_match=op[2] if len(op) == 3 and op[2] else "")
