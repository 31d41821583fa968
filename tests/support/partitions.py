"""The partition layer without processes (a serving RangePartition on a FakeStream, log
appends, a reference table) and one question to a real partition server (`aserving`)."""

from __future__ import annotations

from common import rpc
from common.config import PartitionLimits
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from partition_layer import partition as partition_module
from partition_layer.keys import KeyRange
from partition_layer.operations import LogAppend, Operation, Overlay, log_meta, meta_key
from partition_layer.partition_meta import PartitionMeta
from partition_layer.payload_crc import payload_crcs
from partition_layer.rows import LogMeta, Row
from partition_layer.run_cache import IndexCache
from tests.support.streams import FakeStream
from tools.local_stamp import LocalStamp


def serving_partition(limits: PartitionLimits) -> partition_module.RangePartition:
    """A partition as `load` leaves a new one, on in-memory streams."""
    p = partition_module.RangePartition(1, KeyRange(b"", None), None,  # type: ignore[arg-type]
                                        limits, epoch=1, lease_valid=lambda: True)
    p.streams = {kind: FakeStream() for kind in ("log", "row", "meta", "blob")}  # type: ignore[misc]
    p.meta = PartitionMeta(partition_id=1, key_range=p.range, runs=[], replay_from=None,
                           applied_lsn=0, next_run_id=1, intents=[])
    p.indexes = IndexCache(limits.index_cache_bytes_max, p.streams["row"].read,
                           p.block_cache)
    p._move(partition_module.SERVING)  # as `load` does
    p.committer.start()
    return p


def log_append(account: str, log: str, records: tuple[bytes, ...], **fields: object
               ) -> LogAppend:
    """A LogAppend of `records` with their CRC32Cs, as the partition server makes one from
    a verified request."""
    return LogAppend(account, log, records, crcs=tuple(payload_crcs(records)),
                     **fields)  # type: ignore[arg-type]


def with_crcs(first: int, records: tuple[bytes, ...] | list[bytes]
              ) -> list[tuple[int, bytes, int]]:
    """[(seq, record, crc)] as decode_records gives them back."""
    return [(first + i, r, c) for i, (r, c) in enumerate(zip(records, payload_crcs(records),
                                                             strict=True))]


class Table:
    """Rows as the committer would see them, applying each op's mutations in turn."""

    def __init__(self) -> None:
        self.rows: dict[bytes, Row] = {}
        self.lsn = 0

    def run(self, op: Operation) -> object:
        overlay = Overlay({k: self.rows.get(k) for k in op.reads()})
        result, mutations = op.apply(overlay, self.lsn + 1)
        if mutations:
            self.lsn += 1
            for key, row in mutations:
                assert row.version == self.lsn
                if row.tombstone:
                    self.rows.pop(key, None)
                else:
                    self.rows[key] = row
        return result

    def meta(self, log: str) -> LogMeta:
        key = meta_key("a", log)
        return log_meta(Overlay({key: self.rows.get(key)}), key)


async def aserving(stamp: LocalStamp, name: str, partition_id: int = 1) -> bool:
    async with rpc.aio_channel(stamp.address(name), 16 << 20) as channel:
        load = await rpc.call(pb_grpc.PartitionServerStub(channel).Status(
            pb.ServerStatusRequest(), timeout=2))
    return any(p.partition_id == partition_id and p.state == "serving" for p in load.partitions)
