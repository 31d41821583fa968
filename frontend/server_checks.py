"""What a front end checks in a Call request once it is authenticated, before it forwards it
(issue 16: "names and limits are checked ... bad input gets InvalidArgument with a message
that names the limit"): the naming rules of frontend/names.py, the partition layer's size
limits (PartitionLimits, named in each message as `partition.FIELD`), and the payload's
CRC32Cs (partition_layer/payload_crc.py).

Pure: `check_request` returns the bytes the request carries (what the throttle charges) or
raises InvalidArgument / ChecksumError; it changes nothing.
"""

from __future__ import annotations

import functools

from common.config import PartitionLimits
from common.errors import InvalidArgument
from common.proto import partition_pb2 as pb
from frontend import names
from partition_layer.payload_crc import check_append_sizes, verify_append, verify_payload

LOG_OPS = frozenset({"append", "read", "trim", "seal", "peek"})
ENTITY_OPS = frozenset({"put", "get", "delete", "batch"})
TOKEN_BYTES_MAX = 128  # as the partition server (partition_layer/requests.py)
REQUEST_OVERHEAD_BYTES = 64  # what the throttle charges a request beyond its payload
# Names found valid, remembered (a name's validity never changes; a refusal is not cached):
# the same few accounts and logs come by thousands of times a second.
NAMES_CACHED_MAX = 65_536
_check_account = functools.lru_cache(maxsize=NAMES_CACHED_MAX)(names.check_account)
_check_log = functools.lru_cache(maxsize=NAMES_CACHED_MAX)(names.check_log)
_check_partition = functools.lru_cache(maxsize=NAMES_CACHED_MAX)(names.check_partition)


def check_request(request: pb.Request, op: str, limits: PartitionLimits) -> int:
    """Names, limits and CRCs of `request` (whose op is `op`); the payload bytes it carries."""
    _check_account(request.account)
    if request.version_hint or request.curp_epoch:
        # CURP's (partition_layer/curp.py): a version the owner would give a write it
        # answers early, and the witnesses' epoch; the front end sets them, a client never.
        raise InvalidArgument("version_hint and curp_epoch are set by a front end, never by "
                              "a client")
    if op in LOG_OPS:
        _check_log(request.pname)
    elif op in ENTITY_OPS:
        _check_partition(request.pname)
    else:
        raise InvalidArgument(f"a front end does not take {op!r} requests on Call")
    nbytes = REQUEST_OVERHEAD_BYTES
    if op == "append":
        # The records read out of the message once (each read of a repeated bytes field
        # copies every record), for the limits and the CRCs both.
        append = request.append
        records = tuple(append.records)
        nbytes += _check_append(append, records, limits)
        verify_append(records, tuple(append.crcs), "front end", request.pname)
        return nbytes
    if op == "put":
        _check_row(request.put.row, limits)
        nbytes += _check_value(request.put.value, limits)
        _check_token(request.token)
    elif op == "get":
        _check_row(request.get.row, limits)
    elif op == "delete":
        _check_row(request.delete.row, limits)
        _check_token(request.token)
    elif op == "batch":
        nbytes += _check_batch(request.batch, limits)
        _check_token(request.token)
    verify_payload(request, "front end")
    return nbytes


def _check_append(append: pb.AppendOp, records: tuple[bytes, ...], limits: PartitionLimits
                  ) -> int:
    total = check_append_sizes(list(map(len, records)), limits)  # no Python work per record
    _check_token(append.token)
    return total


def _check_batch(batch: pb.BatchOp, limits: PartitionLimits) -> int:
    items = batch.items
    if not 1 <= len(items) <= limits.batch_ops_max:
        raise InvalidArgument(f"a batch of {len(items)} operations is outside 1.."
                              f"partition.batch_ops_max = {limits.batch_ops_max}")
    total = 0
    for item in items:
        if item.kind not in ("put", "delete"):
            raise InvalidArgument(f"a batch item is a put or a delete, not {item.kind!r}")
        _check_row(item.row, limits)
        if item.kind == "put":
            total += _check_value(item.value, limits)
    return total


def _check_row(row: bytes, limits: PartitionLimits) -> None:
    if not 1 <= len(row) <= limits.row_bytes_max:
        raise InvalidArgument(f"a row key of {len(row)} bytes is outside 1.."
                              f"partition.row_bytes_max = {limits.row_bytes_max}")


def _check_value(value: bytes, limits: PartitionLimits) -> int:
    if len(value) > limits.value_bytes_max:
        raise InvalidArgument(f"a value of {len(value)} bytes exceeds "
                              f"partition.value_bytes_max = {limits.value_bytes_max}")
    return len(value)


def _check_token(token: str) -> None:
    if len(token.encode()) > TOKEN_BYTES_MAX:
        raise InvalidArgument(f"a token has at most {TOKEN_BYTES_MAX} bytes")
