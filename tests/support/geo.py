"""Inter-stamp replication without processes (issue 30): a partition asked as a partition
server asks it (requests.handle), and the requests a writer sends."""

from __future__ import annotations

from common.checksums import crc32c
from common.config import PartitionLimits
from common.proto import partition_pb2 as pb
from partition_layer.requests import handle
from partition_layer.server import PartitionServer
from tests.support.partitions import serving_partition

LIMITS = PartitionLimits()
BIG = b"x" * LIMITS.blob_value_bytes_min  # goes to blob data at either stamp


class Side:
    """One stamp's partition, asked through requests.handle as a partition server would."""

    def __init__(self) -> None:
        self.partition = serving_partition(LIMITS)
        self.server = PartitionServer("ps-1", None, None, LIMITS)  # type: ignore[arg-type]
        self.server.partitions[self.partition.id] = self.partition
        self.ids = iter(range(1, 1 << 30))

    async def ask(self, pname: str, **op: object) -> pb.Response:
        request = pb.Request(id=next(self.ids), account="acct", pname=pname, **op)
        return await handle(request, self.server.find, LIMITS)

    async def ok(self, pname: str, **op: object) -> pb.Response:
        response = await self.ask(pname, **op)
        assert not response.error, (response.error, response.message)
        return response


def append(*records: bytes, token: str = "") -> pb.AppendOp:
    return pb.AppendOp(records=list(records), crcs=[crc32c(r) for r in records], token=token)


def put(row: bytes, value: bytes, **conditions: object) -> pb.PutOp:
    return pb.PutOp(row=row, value=value, value_crc=crc32c(value), **conditions)
