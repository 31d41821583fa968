"""The requests the SDK sends to a front end, built from its Python arguments and checked
before they leave (issue 16): a bad argument is an InvalidArgument whose message names the
rule or the limit it breaks, never a crash, a hang or a round trip.

The rules (limits: stampsdk/limits.py, the stamp's own):
- account, log and partition names: stampsdk/names.py (3..63 of a-z, 0-9 and single
  hyphens, starting and ending with a letter or a digit);
- records and values are bytes-like (bytes, bytearray, memoryview; not str);
- an append: 1..`append_records_max` records, each at most `record_bytes_max` bytes, at most
  `append_bytes_max` bytes in all;
- a value: at most `value_bytes_max` bytes; a row key (bytes, or str as UTF-8): 1 to
  `row_bytes_max` bytes;
- a batch: 1..`batch_ops_max` operations, `("put", row, value[, if_match])` or
  `("delete", row[, if_match])`;
- sequence numbers: integers 0..2**64-1; a read's limit: a positive integer (a read returns
  at most `read_records_max` records and about `read_bytes_max` bytes, maybe fewer than
  asked: read on from the last one);
- `if_none_match` is "*" or None; `if_match` an ETag string or None, not both; a token: a
  non-empty string of at most TOKEN_BYTES_MAX bytes.

Contract: every builder returns a complete pb.Request (with the CRC32C of every record and
value set: DESIGN §5's end-to-end checksum) or raises InvalidArgument. Requests are signed
later, at send time (stampsdk/aio.py), so that each attempt carries a fresh timestamp.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

from stampsdk import names
from stampsdk._proto import frontend_v1_pb2 as pb
from stampsdk.checksums import crc32cs
from stampsdk.errors import InvalidArgument
from stampsdk.limits import TOKEN_BYTES_MAX, Limits

Row = Union[bytes, str]
UINT64_END = 1 << 64
UINT32_MAX = (1 << 32) - 1


def data_bytes(what: str, value: Any) -> bytes:
    """`value` as bytes if it is bytes-like; InvalidArgument otherwise (a str is refused: its
    encoding would be a guess)."""
    if type(value) is bytes:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise InvalidArgument(f"{what} is bytes (or bytearray, memoryview), not "
                          f"{type(value).__name__}")


def utf8(what: str, text: str) -> bytes:
    """`text` in UTF-8; InvalidArgument if it has none (a lone surrogate)."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        raise InvalidArgument(f"{what} is Unicode text (UTF-8), not {text!r:.80}") from None


def row_bytes(row: Any, limits: Limits) -> bytes:
    """A row key as bytes (a str as UTF-8) of 1 to `limits.row_bytes_max` bytes;
    InvalidArgument otherwise."""
    if isinstance(row, str):
        data = utf8("a row key", row)
    elif isinstance(row, (bytes, bytearray, memoryview)):
        data = bytes(row)
    else:
        raise InvalidArgument(f"a row key is bytes or str, not {type(row).__name__}")
    if not 1 <= len(data) <= limits.row_bytes_max:
        raise InvalidArgument(f"a row key has 1 to {limits.row_bytes_max} bytes "
                              f"(row_bytes_max), not {len(data)}")
    return data


def check_seq(what: str, seq: Any) -> int:
    """`seq` if it is an int (not a bool) from 0 to 2**64 - 1; InvalidArgument naming `what`
    otherwise."""
    if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq < UINT64_END:
        raise InvalidArgument(f"{what} is a sequence number from 0 to 2**64 - 1, not {seq!r}")
    return seq


def check_token(token: Any) -> str:
    """`token` if it is a non-empty str of at most TOKEN_BYTES_MAX bytes in UTF-8;
    InvalidArgument otherwise."""
    if not isinstance(token, str) or not token:
        raise InvalidArgument(f"a token is a non-empty string, not {token!r:.80}")
    if len(utf8("a token", token)) > TOKEN_BYTES_MAX:
        raise InvalidArgument(f"a token has at most {TOKEN_BYTES_MAX} bytes (UTF-8)")
    return token


def check_if_match(if_match: Any) -> str:
    """The wire form of `if_match`: "" for None (no condition), else the ETag str itself;
    InvalidArgument for anything else."""
    if if_match is None:
        return ""
    if not isinstance(if_match, str):
        raise InvalidArgument(f"if_match is an ETag string or None, not "
                              f"{type(if_match).__name__}")
    utf8("if_match", if_match)
    return if_match


def check_if_none_match(value: Any) -> bool:
    """The wire form of `if_none_match`: True for "*" (the row must not exist), False for
    None; InvalidArgument for anything else."""
    if value is None:
        return False
    if value != "*":
        raise InvalidArgument('if_none_match is "*" (the row must not exist) or None, not '
                              f"{value!r:.80}")
    return True


def value_bytes(value: Any, limits: Limits) -> bytes:
    """An entity value as bytes (bytes-like, not str) of at most `limits.value_bytes_max`;
    InvalidArgument otherwise."""
    data = data_bytes("a value", value)
    if len(data) > limits.value_bytes_max:
        raise InvalidArgument(f"a value has at most {limits.value_bytes_max} bytes "
                              f"(value_bytes_max), not {len(data)}")
    return data


# ---- logs -----------------------------------------------------------------------------------

_BYTES_ONLY = {bytes}


def append_request(account: str, log: str, records: Any, token: str,
                   limits: Limits) -> pb.Request:
    """An append of `records` (a sequence of bytes-like, within `check_append_sizes`) to
    `log` with `token`, each record's CRC32C set."""
    names.check_log(log)
    if isinstance(records, (str, bytes, bytearray, memoryview)) or not isinstance(
            records, Sequence):
        raise InvalidArgument(f"records are a sequence (list, tuple) of bytes, not "
                              f"{type(records).__name__}")
    # The common case (all bytes) checked in bulk: this runs per append.
    data = records if set(map(type, records)) == _BYTES_ONLY else [
        data_bytes(f"record {i}", r) for i, r in enumerate(records)]
    check_append_sizes(list(map(len, data)), limits)
    return pb.Request(account=account, pname=log, append=pb.AppendOp(
        records=data, token=check_token(token), crcs=crc32cs(data)))


def read_request(account: str, log: str, from_seq: int, limit: int) -> pb.Request:
    """A read of `log` from `from_seq`, of up to `limit` records (a positive int; more than
    2**32 - 1 is sent as that)."""
    names.check_log(log)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        raise InvalidArgument(f"a read's limit is a positive integer, not {limit!r:.80}")
    return pb.Request(account=account, pname=log, read=pb.ReadOp(
        from_seq=check_seq("from_seq", from_seq), limit=min(limit, UINT32_MAX)))


def trim_request(account: str, log: str, upto_seq: int) -> pb.Request:
    """A trim of `log` below `upto_seq` (a sequence number, `check_seq`)."""
    names.check_log(log)
    return pb.Request(account=account, pname=log,
                      trim=pb.TrimOp(upto_seq=check_seq("upto_seq", upto_seq)))


def seal_request(account: str, log: str) -> pb.Request:
    """A seal of `log` (InvalidArgument for a malformed name: the only check)."""
    return pb.Request(account=account, pname=names.check_log(log), seal=pb.Empty())


def peek_request(account: str, log: str) -> pb.Request:
    """A peek at `log`: its answer is the log's (first_seq, next_seq)."""
    return pb.Request(account=account, pname=names.check_log(log), peek=pb.Empty())


# ---- entities -------------------------------------------------------------------------------

def put_request(account: str, pname: str, row: Row, value: bytes, if_match: str | None,
                if_none_match: str | None, token: str, limits: Limits
                ) -> pb.Request:
    """A put of `value` at (pname, row) with its CRC32C, under at most one of the
    conditions `if_match` (an ETag) and `if_none_match` ("*"), with `token`."""
    names.check_partition(pname)
    data = value_bytes(value, limits)
    if if_match and if_none_match is not None:
        raise InvalidArgument("if_match and if_none_match exclude each other")
    return pb.Request(account=account, pname=pname, token=check_token(token), put=pb.PutOp(
        row=row_bytes(row, limits), value=data, if_match=check_if_match(if_match),
        if_none_match=check_if_none_match(if_none_match), value_crc=crc32cs([data])[0]))


def get_request(account: str, pname: str, row: Row, limits: Limits) -> pb.Request:
    """A get of (pname, row) (`row_bytes`)."""
    names.check_partition(pname)
    return pb.Request(account=account, pname=pname, get=pb.GetOp(row=row_bytes(row, limits)))


def delete_request(account: str, pname: str, row: Row, if_match: str | None, token: str,
                   limits: Limits) -> pb.Request:
    """A delete of (pname, row), only of ETag `if_match` when it is given, with `token`."""
    names.check_partition(pname)
    return pb.Request(account=account, pname=pname, token=check_token(token),
                      delete=pb.DeleteOp(row=row_bytes(row, limits),
                                         if_match=check_if_match(if_match)))


def batch_request(account: str, pname: str, ops: Any, token: str, limits: Limits
                  ) -> pb.Request:
    """A batch of 1 to `limits.batch_ops_max` operations (`batch_item`) on rows of `pname`,
    applied all or none, with `token`."""
    names.check_partition(pname)
    if isinstance(ops, (str, bytes)) or not isinstance(ops, Sequence):
        raise InvalidArgument(f"a batch's operations are a sequence of tuples, not "
                              f"{type(ops).__name__}")
    if not 1 <= len(ops) <= limits.batch_ops_max:
        raise InvalidArgument(f"a batch has 1 to {limits.batch_ops_max} operations "
                              f"(batch_ops_max), not {len(ops)}")
    items = [batch_item(i, op, limits) for i, op in enumerate(ops)]
    return pb.Request(account=account, pname=pname, token=check_token(token),
                      batch=pb.BatchOp(items=items))


def batch_item(index: int, op: Any, limits: Limits) -> pb.BatchItem:
    """Operation number `index` of a batch: `("put", row, value[, if_match])` (with the
    value's CRC32C) or `("delete", row[, if_match])`, as a tuple or a list; InvalidArgument
    naming `index` otherwise."""
    shape = ("a batch operation is ('put', row, value[, if_match]) or "
             "('delete', row[, if_match])")
    if not isinstance(op, (tuple, list)) or not op or op[0] not in ("put", "delete"):
        raise InvalidArgument(f"operation {index}: {shape}, not {op!r:.80}")
    if op[0] == "put":
        if len(op) not in (3, 4):
            raise InvalidArgument(f"operation {index}: {shape}, not {op!r:.80}")
        data = value_bytes(op[2], limits)
        return pb.BatchItem(kind="put", row=row_bytes(op[1], limits), value=data,
                            if_match=check_if_match(op[3] if len(op) == 4 else None),
                            value_crc=crc32cs([data])[0])
    if len(op) not in (2, 3):
        raise InvalidArgument(f"operation {index}: {shape}, not {op!r:.80}")
    return pb.BatchItem(kind="delete", row=row_bytes(op[1], limits),
                        if_match=check_if_match(op[2] if len(op) == 3 else None))


def check_append_sizes(sizes: Sequence[int], limits: Limits) -> int:
    """The bytes of an append whose records have `sizes`; InvalidArgument naming the limit it
    breaks (records per append, bytes per record, bytes per append)."""
    if not sizes:
        raise InvalidArgument("an append carries at least one record")
    if len(sizes) > limits.append_records_max:
        raise InvalidArgument(f"an append of {len(sizes)} records exceeds "
                              f"partition.append_records_max = {limits.append_records_max}")
    if max(sizes) > limits.record_bytes_max:
        i = next(i for i, size in enumerate(sizes) if size > limits.record_bytes_max)
        raise InvalidArgument(f"record {i} has {sizes[i]} bytes, more than "
                              f"partition.record_bytes_max = {limits.record_bytes_max}")
    total = sum(sizes)
    if total > limits.append_bytes_max:
        raise InvalidArgument(f"an append of {total} bytes exceeds "
                              f"partition.append_bytes_max = {limits.append_bytes_max}")
    return total


def request_bytes(request: pb.Request) -> int:
    """About how large `request` is on the wire (for batching), without serializing it."""
    op = request.WhichOneof("op")
    if op == "append":
        return append_bytes(request.append.records)
    if op == "put":
        return len(request.put.value) + len(request.put.row) + 256
    if op == "batch":
        return sum(len(i.value) + len(i.row) + 64 for i in request.batch.items) + 256
    return 256


def append_bytes(records: Sequence[bytes]) -> int:
    """request_bytes of an append of `records` (checked by append_request)."""
    return sum(map(len, records)) + 8 * len(records) + 256
