"""What a partition server does with one data request (§5): validate it, find the range
partition that holds its key, run it there, and say how it went in a Response.

Contract: every request gets exactly one Response; a refused or failed one carries the error's
class name (common/errors.py) and message, and a NotOwner means "not executed here: refresh
the partition map and ask again". End-to-end checksums (DESIGN §5): an append, put or batch
whose records or values do not match the CRC32Cs it carries is refused (ChecksumError; an
append without one CRC per record: InvalidArgument) before anything is written; the CRCs it
carried are stored beside the bytes, and reads return them (read_replies.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from common import faults
from common.config import PartitionLimits
from common.errors import InvalidArgument, NotFound, StampError, Throttled, Unavailable
from common.proto import partition_pb2 as pb
from partition_layer import keys
from partition_layer.geo_copy import clear_name
from partition_layer.geo_ship import REPLICATE_ROWS_MAX
from partition_layer.operations import (
    EntityWrite,
    LogAppend,
    LogSeal,
    LogTrim,
    Replicated,
    Write,
    check_entity_group,
    entity_key,
    meta_key,
    validate_writes,
)
from partition_layer.partition import RangePartition
from partition_layer.payload_crc import check_append_sizes, verify_append, verify_payload
from partition_layer.queued_op import Done
from partition_layer.read_replies import records_reply, value_and_crc
from partition_layer.record_batch import encode_records, encoded_bytes
from partition_layer.rows import Row, decode_row, etag_of
from partition_layer.speculation import Speculative, replaying
from partition_layer.witness_set import owner_epoch

NAME_BYTES_MAX = 1024
TOKEN_BYTES_MAX = 128

Finder = Callable[[bytes], RangePartition]


def route_key(account: str, pname: str) -> bytes:
    """The key a partition name is routed by: all of a name's rows share one partition."""
    return meta_key(account, pname)


async def handle(request: pb.Request, find: Finder, limits: PartitionLimits) -> pb.Response:
    response = pb.Response(id=request.id)
    try:
        await _dispatch(request, response, find, limits)
    except StampError as exc:
        return error_response(request.id, exc)
    if request.version_hint:
        with contextlib.suppress(StampError):  # moved on since: the answer stands untaught
            _teach(request, find(route_key(request.account, request.pname)), response)
    return response


def error_response(request_id: int, exc: StampError) -> pb.Response:
    response = pb.Response(id=request_id, error=type(exc).__name__, message=str(exc))
    if isinstance(exc, Throttled):
        response.retry_after_s = exc.retry_after_s
    return response


def start_small_append(request: pb.Request, find: Finder, limits: PartitionLimits,
                       done: Done) -> bool:
    """The hot path of a log append small enough for the commit log itself, without a task
    or a future: validated and queued for the group commit right here; `done(first_seq,
    None)` or `done(None, error)` once it is decided (GroupCommitter.submit_with). False:
    not such an append, `handle` it. Raises StampError as `handle` would answer it (and
    then `done` is never called)."""
    small = _small_append(request, find, limits)
    if small is None or _teaches(request, small[0]):
        return False  # `handle` it: its answer tells the front end the owner's witnesses
    partition, op, nbytes = small
    partition.committer.submit_with(op, nbytes, done, _curp_hint(request, partition))
    return True


def _small_append(request: pb.Request, find: Finder, limits: PartitionLimits
                  ) -> tuple[RangePartition, LogAppend, int] | None:
    """A validated log append that goes to the commit log itself, with its partition and
    size; None: not an append, or one large enough for blob data first."""
    if request.WhichOneof("op") != "append":
        return None
    # Once: every access to a repeated bytes field of the request copies the bytes.
    records = tuple(request.append.records)
    nbytes = encoded_bytes(records)
    if nbytes >= limits.blob_value_bytes_min:
        return None
    _check_names(request)
    records, crcs = _verified_append(request, records, limits)
    route = route_key(request.account, request.pname)
    partition = find(route)
    partition.check_serving()
    partition.stats.sample_key(route)
    return partition, LogAppend(request.account, request.pname, records,
                                request.append.token, crcs=crcs), nbytes + 64


def _verified_append(request: pb.Request, records: tuple[bytes, ...],
                     limits: PartitionLimits) -> tuple[tuple[bytes, ...], tuple[int, ...]]:
    """An append's `records` (request.append.records, read once) and their CRC32Cs, within
    the limits and matching (§5)."""
    append = request.append
    crcs = tuple(append.crcs)
    _check_append(records, append.token, limits)
    verify_append(records, crcs, "partition server", request.pname)
    # A fault point for the tests: bytes changed after they were verified here must still
    # fail the reader's check (the CRC stored is the client's, not one of what is stored).
    first = faults.flipped("ps.write.flip_after_verify", records[0])
    if first is not records[0]:
        records = (first, *records[1:])
    return records, crcs


def _check_names(request: pb.Request) -> None:
    for what, name in (("account", request.account), ("partition name", request.pname)):
        if not name or len(name.encode()) > NAME_BYTES_MAX:
            raise InvalidArgument(f"an {what} has 1..{NAME_BYTES_MAX} bytes")


async def _dispatch(request: pb.Request, response: pb.Response, find: Finder,
                    limits: PartitionLimits) -> None:
    op = request.WhichOneof("op")
    if op is None:
        raise InvalidArgument("a request names an operation")
    if op == "scan":
        await _scan(request, response, find, limits)
        return
    _check_names(request)
    route = route_key(request.account, request.pname)
    partition = find(route)
    account, pname = request.account, request.pname
    hint = _curp_hint(request, partition)
    if op == "sync":
        await _sync(request.sync, partition)
        return
    small = _small_append(request, find, limits) if op == "append" else None
    if small is not None:  # counted for the load finder there
        response.first_seq = answered(await small[0].committer.submit(*small[1:], hint),
                                      response)
        return
    # Every request routed here counts towards where a split would halve the load (stats.py).
    partition.stats.sample_key(route)
    if op == "append":
        # A large append goes to blob data once, before the commit, like a large value: the
        # commit log, the memtable and the checkpoints then carry only a pointer.
        records, crcs = _verified_append(request, tuple(request.append.records), limits)
        partition.check_serving()
        batch = encode_records(records, crcs)
        with _pinning_blobs(partition):
            blob = await partition.write_blob(batch)
            response.first_seq = answered(await partition.submit(
                LogAppend(account, pname, (), request.append.token, blob=blob,
                          count=len(records)), len(batch) + 64, hint), response)
    elif op == "read":
        limit = min(request.read.limit or limits.read_records_max, limits.read_records_max)
        partition.check_serving()
        await _after_early_writes(partition, [meta_key(account, pname)])
        records, _ = await partition.read_log(account, pname, request.read.from_seq, limit)
        response.records.extend(records_reply(records))
    elif op == "trim":
        await partition.submit(LogTrim(account, pname, request.trim.upto_seq), 64)
    elif op == "seal":
        answered(await partition.submit(LogSeal(account, pname), 64, hint), response)
    elif op == "peek":
        partition.check_serving()
        await _after_early_writes(partition, [meta_key(account, pname)])
        meta = await partition.log_state(account, pname)
        response.first_seq, response.next_seq = meta.first_seq, meta.next_seq
    elif op == "replicate":
        if request.replicate.clear:  # a geo bootstrap's (geo_copy.py)
            await clear_name(partition, account, pname)
            if not request.replicate.keys:
                return
        with _pinning_blobs(partition):  # large values go to blob data here too
            rows = await _replicated_rows(request, partition, limits)
            nbytes = sum(map(len, request.replicate.keys)) + sum(map(len, request.replicate.rows))
            await partition.submit(Replicated(account, pname, tuple(rows)), nbytes)
    elif op == "get":
        partition.check_serving()
        _check_row(request.get.row, limits)
        key = entity_key(account, pname, request.get.row)
        await _after_early_writes(partition, [key, meta_key(account, pname)])
        row = await partition.get_row(key)
        if row is None:
            # Entity keys never meet a log's, so a row found is an entity; only a miss needs
            # the name's kind, to say "a log" rather than "not found".
            check_entity_group(await partition.get_row(meta_key(account, pname)), pname)
            raise NotFound(f"no row {request.get.row!r} in {pname!r}")
        response.value, response.value_crc = await value_and_crc(partition, row)
        response.etag = etag_of(row.version)
    else:
        with _pinning_blobs(partition):  # large values go to blob data before the commit
            writes = await _writes(request, op, partition, limits)
            _check_token(request.token)
            etags = answered(await partition.submit(
                EntityWrite(account, pname, tuple(writes), request.token,
                            int(time.time() * 1000)),
                sum(len(w.value or b"") + len(w.row) + 64 for w in writes), hint), response)
        if op == "batch":
            response.etags.extend(etags)
        else:
            response.etag = etags[0]


def _curp_hint(request: pb.Request, partition: RangePartition) -> int:
    """The version hint the committer may answer `request` early by (speculation.py): the
    front end's if it recorded the write at this owner's witnesses (its curp_epoch is their
    set's, witness_set.set_epoch), or if the write is executed again from a witness's
    record; else 0."""
    hint = request.version_hint
    if not hint or replaying.get():
        return hint
    return hint if (partition.witnesses is not None
                    and request.curp_epoch == partition.witnesses.epoch) else 0


def _teaches(request: pb.Request, partition: RangePartition) -> bool:
    """A hinted write recorded at other witnesses than this owner's: its answer names them."""
    return bool(request.version_hint and partition.witnesses is not None
                and request.curp_epoch != partition.witnesses.epoch and not replaying.get())


def _teach(request: pb.Request, partition: RangePartition, response: pb.Response) -> None:
    if _teaches(request, partition):
        assert partition.witnesses is not None
        response.epoch = partition.witnesses.epoch
        response.witnesses.extend(partition.witnesses.members.addresses)


def answered(result: Any, response: pb.Response) -> Any:
    """An operation's result, with `response` marked speculative (and naming the write for
    a SyncOp) if it was answered before it was durable (CURP, speculation.py)."""
    if isinstance(result, Speculative):
        response.speculative, response.epoch, response.lsn = True, result.epoch, result.lsn
        return result.result
    return result


async def _sync(sync: pb.SyncOp, partition: RangePartition) -> None:
    """A front end's wait for an early answer's write to be durable (CURP's slow path):
    Unavailable (it may or may not be) once the owner is not the one that answered."""
    if owner_epoch(sync.epoch) != partition.epoch:  # the set's epoch, as answered
        raise Unavailable(f"partition {partition.id}: the owner of epoch {sync.epoch} is gone; "
                          "its early answers may or may not be durable")
    partition.check_serving()
    await partition.committer.speculation.until_durable(sync.lsn)


async def _after_early_writes(partition: RangePartition, read: Sequence[bytes]) -> None:
    """A read waits until no row it reads holds a write answered early and not yet durable:
    a crash could still take that write back (DESIGN §8 invariant 7, curp.py step 5); and,
    having waited, it is still the owner's to answer."""
    speculation = partition.committer.speculation
    if speculation.last_lsn:
        await speculation.until_rows_durable(read)
        partition.check_serving()


def _pinning_blobs(partition: RangePartition) -> contextlib.AbstractContextManager[None]:
    """Around writing values to blob data and committing the operation that points at them:
    until it commits (or fails) no row references them, and garbage collection must keep
    their extent (extent_needs.py, WritePins)."""
    return partition.blob_pins.pinned(partition.streams["blob"].last_extent_id)


def _check_append(records: Sequence[bytes], token: str, limits: PartitionLimits) -> None:
    check_append_sizes(list(map(len, records)), limits)
    _check_token(token)


def _check_token(token: str) -> None:
    if len(token.encode()) > TOKEN_BYTES_MAX:
        raise InvalidArgument(f"a token has at most {TOKEN_BYTES_MAX} bytes")


def _check_row(row: bytes, limits: PartitionLimits) -> None:
    if not row or len(row) > limits.row_bytes_max:
        raise InvalidArgument(f"a row key has 1..{limits.row_bytes_max} bytes")


async def _writes(request: pb.Request, op: str, partition: RangePartition,
                  limits: PartitionLimits) -> list[Write]:
    if op in ("put", "batch"):
        verify_payload(request, "partition server")
    if op == "put":
        items = [pb.BatchItem(kind="put", row=request.put.row, value=request.put.value,
                              if_match=request.put.if_match,
                              if_none_match=request.put.if_none_match,
                              value_crc=request.put.value_crc)]
    elif op == "delete":
        items = [pb.BatchItem(kind="delete", row=request.delete.row,
                              if_match=request.delete.if_match)]
    else:
        items = list(request.batch.items)
        if not 1 <= len(items) <= limits.batch_ops_max:
            raise InvalidArgument(f"a batch has 1..{limits.batch_ops_max} operations")
    # The fault point as at appends: a value changed after it was verified here.
    writes = [Write(i.kind, i.row,
                    faults.flipped("ps.write.flip_after_verify", i.value)
                    if i.kind == "put" else None, None, i.if_match, i.if_none_match,
                    i.value_crc if i.kind == "put" else None) for i in items]
    validate_writes(writes)
    for write in writes:
        _check_row(write.row, limits)
        if write.value is not None and len(write.value) > limits.value_bytes_max:
            raise InvalidArgument(f"a value has at most {limits.value_bytes_max} bytes")
    partition.check_serving()
    # Large values are written once, to blob data, before the commit; the row points there.
    stored = []
    for write in writes:
        if write.value is not None and len(write.value) >= limits.blob_value_bytes_min:
            write = Write(write.kind, write.row, None, await partition.write_blob(write.value),
                          write.if_match, write.if_none_match, write.value_crc)
        stored.append(write)
    return stored


def replicate_rows_max(limits: PartitionLimits) -> int:
    """The most rows a ReplicateOp carries: a shipper's squash of a name's operations
    (geo_ship.REPLICATE_ROWS_MAX), or one operation's (a batch's entities, its name's mark
    and token), whichever is more."""
    return max(REPLICATE_ROWS_MAX, limits.batch_ops_max + 2)


async def _replicated_rows(request: pb.Request, partition: RangePartition,
                           limits: PartitionLimits) -> list[tuple[bytes, Row]]:
    """The rows of a ReplicateOp, checked (every key of the request's name, every row
    well-formed and inline) and with large values written to this stamp's blob data first,
    as a write here would (the row keeps its version and CRC32C)."""
    replicate = request.replicate
    if not 1 <= len(replicate.keys) <= replicate_rows_max(limits) \
            or len(replicate.rows) != len(replicate.keys):
        raise InvalidArgument(f"a replicated operation has 1..{replicate_rows_max(limits)} "
                              "keys, and one row per key")
    prefix = keys.pname_prefix(request.account, request.pname)
    rows = []
    for key, encoded in zip(replicate.keys, replicate.rows, strict=True):
        if not key.startswith(prefix):
            raise InvalidArgument("a replicated row's key is not of the request's name")
        row = decode_row(encoded)
        if row.blob is not None:
            raise InvalidArgument("a replicated row carries its value inline, not a pointer "
                                  "into another stamp's blob data")
        rows.append((bytes(key), row))
    partition.check_serving()
    stored = []
    for key, row in rows:
        if row.value is not None and len(row.value) >= limits.blob_value_bytes_min:
            row = Row(row.version, blob=await partition.write_blob(row.value),
                      value_crc=row.value_crc)
        stored.append((key, row))
    return stored


async def _scan(request: pb.Request, response: pb.Response, find: Finder,
                limits: PartitionLimits) -> None:
    """User rows of one account in key order, within the partition holding the start."""
    scan = request.scan
    if not request.account:
        raise InvalidArgument("a scan names its account")
    limit = min(scan.limit or limits.scan_rows_max, limits.scan_rows_max)
    start = meta_key(request.account, scan.start_pname) if not scan.start_row else \
        entity_key(request.account, scan.start_pname, scan.start_row)
    account_end = keys.prefix_end(keys.account_prefix(request.account))
    end = (entity_key(request.account, scan.end_pname, scan.end_row)
           if scan.has_end else account_end)
    partition = find(start)
    partition.check_serving()
    # A scan reads many rows: it waits for every write answered early so far (curp.py).
    if partition.committer.speculation.last_lsn:
        await partition.committer.speculation.until_all_durable()
        partition.check_serving()
    if partition.range.high is not None and (end is None or partition.range.high < end):
        end = partition.range.high
    # The scan spans [start, end) of this partition: it counts against splitting inside it.
    partition.stats.sample_span(start, end, meta_key(request.account, scan.start_pname))
    while len(response.items) < limit:
        rows, more = await partition.scan(start, end, limit - len(response.items))
        for key, row in rows:
            _account, pname, kind, row_key = keys.decode_key(key)
            if kind != keys.KIND_ENTITY:
                continue  # bookkeeping rows and log records are not entities
            value, crc = await value_and_crc(partition, row)
            response.items.append(pb.ScanItem(pname=pname, row=row_key, value=value,
                                              etag=etag_of(row.version), crc=crc))
        if not more or not rows:
            response.more = more
            return
        start = rows[-1][0] + b"\x00"
    response.more = True
