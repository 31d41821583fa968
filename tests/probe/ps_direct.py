"""Driving partition servers directly, without a PM (issue 17's PS split/merge probe tests):
Load / Split / Merge / Status RPCs, and logs and entities through a raw Call stream (the PS
routes each request by key to the partition it serves). `Acked` keeps every acknowledged
write and checks that each reads back with the same bytes, seq and ETag."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from common import rpc
from common.errors import StampError
from common.process import LOG_FILE
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from partition_layer import keys
from partition_layer.client_requests import put_request
from partition_layer.partition_meta import PartitionMeta, decode_meta
from partition_layer.partition_streams import stream_name
from partition_layer.payload_crc import payload_crcs
from partition_layer.session import CallSession
from stream_layer.client import AsyncStreamClient
from tools.local_stamp import LocalStamp

ACCOUNT = "acct"
WHOLE = pb.KeyRange(low=b"", has_high=False)
RPC_TIMEOUT_S = 90.0


def name_key(pname: str) -> bytes:
    """The first key of a partition name: where a split may cut."""
    return keys.encode_key(ACCOUNT, pname, keys.KIND_META, b"")


class DirectPS:
    """One partition server's RPCs and its Call stream (open until `close`)."""

    def __init__(self, stamp: LocalStamp, name: str) -> None:
        self.stamp = stamp
        self.name = name
        self.address = stamp.address(name)
        self.stub = pb_grpc.PartitionServerStub(rpc.aio_channel(self.address, 16 << 20))
        self.session = CallSession(self.address, lambda: pb_grpc.PartitionServerStub(
            rpc.aio_channel(self.address, 16 << 20)))

    async def close(self) -> None:
        await self.session.close()

    async def load(self, partition_id: int, create: bool = False) -> pb.LoadReply:
        return await rpc.call(self.stub.Load(pb.LoadRequest(
            partition_id=partition_id, range=WHOLE, create_if_missing=create),
            timeout=RPC_TIMEOUT_S))

    async def split(self, parent: int, pname: str, left: int, right: int) -> pb.SplitReply:
        return await self.split_at(parent, name_key(pname), left, right)

    async def split_at(self, parent: int, key: bytes, left: int, right: int
                       ) -> pb.SplitReply:
        return await rpc.call(self.stub.Split(pb.SplitRequest(
            partition_id=parent, key=key, left_id=left, right_id=right),
            timeout=RPC_TIMEOUT_S))

    async def merge(self, left: int, right: int, merged: int) -> pb.MergeReply:
        return await rpc.call(self.stub.Merge(pb.MergeRequest(
            left_id=left, right_id=right, merged_id=merged), timeout=RPC_TIMEOUT_S))

    async def served(self) -> dict[int, tuple[bytes, bytes | None]]:
        """Partitions serving here: id -> (low, high)."""
        load = await rpc.call(self.stub.Status(pb.ServerStatusRequest(), timeout=10))
        return {p.partition_id: (p.range.low, p.range.high if p.range.has_high else None)
                for p in load.partitions if p.state == "serving"}

    async def call(self, request: pb.Request) -> pb.Response:
        request.account = ACCOUNT
        response = await self.session.call(request, RPC_TIMEOUT_S)
        if response.error:
            raise rpc.error_from_name(response.error, response.message)
        return response

    def log_says(self, text: str) -> bool:
        return text in (Path(self.stamp.record(self.name).dir) / LOG_FILE).read_text(
            errors="replace")


def append_request(pname: str, records: list[bytes], token: str) -> pb.Request:
    return pb.Request(pname=pname, append=pb.AppendOp(records=records,
                                                      crcs=payload_crcs(records), token=token))


@dataclass
class Acked:
    """Every acknowledged write: logs' records by seq, entities' values and ETags."""

    logs: dict[str, list[bytes]]
    entities: dict[tuple[str, str], tuple[bytes, str]] = field(default_factory=dict)
    groups: tuple[str, ...] = ()
    last_append: dict[str, tuple[list[bytes], str, int]] = field(default_factory=dict)

    async def write_round(self, ps: DirectPS, tag: str) -> None:
        """Three records to every log and a put of three rows to every entity group."""
        for pname, records in self.logs.items():
            batch = [f"{pname}/{tag}/{i}".encode() * 20 for i in range(3)]
            token = f"{pname}-{tag}"
            first = (await ps.call(append_request(pname, batch, token))).first_seq
            assert first == len(records), (pname, first, len(records))
            records.extend(batch)
            self.last_append[pname] = (batch, token, first)
        for group in self.groups:
            for i in range(3):
                row, value = f"row-{i}", f"{group}/{tag}/{i}".encode() * 30
                etag = (await ps.call(put_request(ACCOUNT, group, row, value, None, None,
                                                  f"{group}-{tag}-{i}"))).etag
                self.entities[(group, row)] = (value, etag)

    async def check(self, ps: DirectPS) -> None:
        """Every acknowledged record and entity reads back, bytes, seq and ETag."""
        for pname, records in self.logs.items():
            response = await ps.call(pb.Request(pname=pname, read=pb.ReadOp(
                from_seq=0, limit=len(records) + 10)))
            got = [(r.seq, r.data) for r in response.records]
            assert got == list(enumerate(records)), f"log {pname}: {got[:3]}..."
        for (group, row), (value, etag) in self.entities.items():
            response = await ps.call(pb.Request(pname=group, get=pb.GetOp(row=row.encode())))
            assert (response.value, response.etag) == (value, etag), (group, row)

    async def check_scan(self, ps: DirectPS, start_pname: str, groups: set[str]) -> None:
        """A scan from `start_pname` (to the end of the partition holding it) returns
        exactly the acknowledged rows of `groups`, in key order, with their ETags."""
        response = await ps.call(pb.Request(scan=pb.ScanOp(start_pname=start_pname,
                                                           limit=1000)))
        got = [(i.pname, i.row.decode(), i.value, i.etag) for i in response.items]
        expected = sorted((group, row, value, etag) for (group, row), (value, etag)
                          in self.entities.items() if group in groups)
        assert got == expected and not response.more, (start_pname, got[:2])

    async def retry_last_appends(self, ps: DirectPS) -> None:
        """Each log's last append sent again with its token: answered from the first
        attempt (same first seq), nothing appended twice."""
        for pname, (batch, token, first) in self.last_append.items():
            assert (await ps.call(append_request(pname, batch, token))).first_seq == first
        await self.check(ps)


async def newest_record(stamp: LocalStamp, partition_id: int) -> PartitionMeta:
    """The newest record of a partition's metadata stream, read as any client can (its
    open extent to what the replicas agree is committed)."""
    client = AsyncStreamClient([r.address for r in stamp.stream_managers()])
    try:
        stream = await client.open_stream(stream_name(partition_id, "meta"))
        newest = None
        async for _, block in stream.blocks():
            newest = block
        assert newest is not None, f"partition {partition_id} has no metadata record"
        return decode_meta(newest)
    finally:
        await client.close()


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    """Until `check()` is true (a StampError counts as not yet)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            if await check():
                return
        except StampError:
            pass
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.05)
