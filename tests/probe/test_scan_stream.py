"""The PS Scan stream over real processes (partition_layer/scan_stream.py): entities in key
order with their values (blob values included) and CRC32C, log names, one snapshot per
stream while writes go on, NotOwner from a server that does not hold the start. And the
pressure report on the PS's Call responses (ResponseBatch.pressure)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import grpc
import pytest

from common import rpc
from common.checksums import crc32c
from common.clock import SystemClock
from common.config import FrontEndLimits
from common.errors import NotOwner
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from frontend.throttle import AccountThrottle
from partition_layer import keys
from partition_layer.client import AsyncPartitionClient, PartitionClient
from tests.conftest import module_stamp
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

PARTITION = {"memtable_bytes_max": 64 * 1024, "data_block_bytes": 4096,
             "blob_value_bytes_min": 16 * 1024}
ACCOUNT = "scanner"


@pytest.fixture(scope="module")
def stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    with module_stamp(tmp_path_factory, "scan-stream", PARTITION,
                      extent_nodes=3, stream_managers=3,
                      lock_servers=3, partition_managers=1, partition_servers=2) as local:
        yield local


@pytest.fixture(scope="module")
def pc(stamp: LocalStamp) -> Iterator[PartitionClient]:
    with PartitionClient.from_stamp(str(stamp.data_dir)) as client:
        yield client


def owner_and_other(pc: PartitionClient, stamp: LocalStamp) -> tuple[str, str]:
    current, addresses = pc.partition_map()
    (entry,) = current.partitions
    owner = addresses[entry.server]
    (other,) = [r.address for r in stamp.partition_servers() if r.address != owner]
    return owner, other


def scan(address: str, request: pb.PartitionScanRequest) -> list[pb.PartitionScanPage]:
    async def go() -> list[pb.PartitionScanPage]:
        async with rpc.aio_channel(address, 64 * 1024 * 1024) as channel:
            stream = pb_grpc.PartitionServerStub(channel).Scan(request, timeout=30)
            try:
                return [page async for page in stream]
            except grpc.RpcError as exc:
                raise rpc.from_rpc_error(exc) from None
    return asyncio.run(go())


def test_entities_in_key_order_with_values_and_crcs(pc: PartitionClient,
        stamp: LocalStamp) -> None:
    expected = {}
    for group in ("g-b", "g-a", "g-c"):
        for i in range(40):
            value = (b"%s-%d " % (group.encode(), i)) * 50
            pc.put(ACCOUNT, group, f"r{i:03}", value)
            expected[(group, f"r{i:03}".encode())] = value
    big = b"B" * (40 * 1024)  # in blob data
    pc.put(ACCOUNT, "g-a", "zz-big", big)
    expected[("g-a", b"zz-big")] = big
    pc.append(ACCOUNT, "a-log", [b"x"] * 100)  # a log in the middle: not an entity
    pc.put("other-account", "g-a", "r000", b"foreign")  # another account: clamped away
    owner, _ = owner_and_other(pc, stamp)
    pages = scan(owner, pb.PartitionScanRequest(account=ACCOUNT, page_rows=7))
    got = [(i.pname, i.row) for p in pages for i in p.items]
    assert got == sorted(expected)
    for page in pages:
        for item in page.items:
            assert item.value == expected[(item.pname, item.row)]
            assert item.crc == crc32c(item.value)
    assert pages[-1].done and pages[-1].resume_key == b""
    assert all(len(p.items) == 7 for p in pages[:-1])
    names = scan(owner, pb.PartitionScanRequest(account=ACCOUNT, mode=pb.SCAN_LOG_NAMES))
    assert [i.pname for p in names for i in p.items] == ["a-log"]


def test_a_stream_is_one_snapshot_while_writes_go_on(pc: PartitionClient,
        stamp: LocalStamp) -> None:
    for i in range(60):
        pc.put(ACCOUNT, "snap", f"r{i:03}", b"before")
    owner, _ = owner_and_other(pc, stamp)
    start = keys.encode_key(ACCOUNT, "snap", keys.KIND_META, b"")
    end = keys.prefix_end(keys.pname_prefix(ACCOUNT, "snap"))

    async def go() -> list[tuple[bytes, bytes]]:
        async with rpc.aio_channel(owner, 64 * 1024 * 1024) as channel:
            stream = pb_grpc.PartitionServerStub(channel).Scan(pb.PartitionScanRequest(
                account=ACCOUNT, start_key=start, end_key=end, has_end=True, page_rows=5),
                timeout=30)
            seen = []
            first = True
            async for page in stream:
                seen += [(i.row, i.value) for i in page.items]
                if first:
                    first = False
                    # Overwrite, delete and add rows (enough to checkpoint the memtable).
                    await asyncio.to_thread(_rewrite, pc)
            return seen
    seen = asyncio.run(go())
    assert seen == [(f"r{i:03}".encode(), b"before") for i in range(60)]


def _rewrite(pc: PartitionClient) -> None:
    for i in range(60):
        if i % 3 == 0:
            pc.delete(ACCOUNT, "snap", f"r{i:03}")
        else:
            pc.put(ACCOUNT, "snap", f"r{i:03}", b"after" * 400)
    pc.put(ACCOUNT, "snap", "r0305", b"new")


def test_not_owner_from_a_server_without_the_partition(pc: PartitionClient,
        stamp: LocalStamp) -> None:
    _, other = owner_and_other(pc, stamp)
    with pytest.raises(NotOwner):
        scan(other, pb.PartitionScanRequest(account=ACCOUNT))


@pytest.mark.serial  # timing-sensitive: run alone (`make test`)
def test_response_batches_carry_the_servers_pressure(stamp: LocalStamp) -> None:
    """Every Call response batch says which PS sent it, how many operations it holds open
    and its recent p99; a front end's throttle takes it from the client's hook."""
    limits = FrontEndLimits(overload_queue_ops_min=1)
    throttle = AccountThrottle(limits, SystemClock(), random.Random(0))
    reports: list[pb.ServerPressure] = []
    overloaded: list[bool] = []

    def observe(report: pb.ServerPressure) -> None:
        reports.append(pb.ServerPressure(server=report.server, queue_ops=report.queue_ops,
                                         p99_ms=report.p99_ms))
        throttle.observe_server(report.server, report.queue_ops, report.p99_ms)
        overloaded.append(throttle.is_overloaded(report.server))

    async def go() -> None:
        client = AsyncPartitionClient([r.address for r in stamp.partition_managers()],
                                      stamp.config.partition, on_pressure=observe)
        try:
            for _ in range(3):
                # 200 appends sent together: they arrive in one request batch, and the
                # commit pipeline holds at most 4 blocks of 32: the first answers leave
                # the rest open.
                await asyncio.gather(*(client.append(ACCOUNT, "pressed", [b"x"])
                                       for _ in range(200)))
        finally:
            await client.close()
    asyncio.run(go())
    servers = {r.name for r in stamp.partition_servers()}
    assert reports and {r.server for r in reports} <= servers
    assert max(r.queue_ops for r in reports) > 0
    assert reports[-1].p99_ms > 0  # commits of the first rounds, recomputed since
    assert overloaded == [r.queue_ops >= 1 or r.p99_ms >= limits.overload_p99_ms_min
                          for r in reports]
    assert any(overloaded)
