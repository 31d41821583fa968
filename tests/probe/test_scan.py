"""Scans across range partitions over real processes: a stamp that starts with 4 partitions
on 2 partition servers (PartitionLimits.bootstrap_split_keys), the cross-partition scanner
(partition_layer/scan_client.py) and the front end's scan (frontend/scan.py) called
directly: key order, continuations, a token's prefix, log names — and a partition server
killed with SIGKILL, or a partition moved, in the middle of a scan, which resumes without
losing or doubling a key."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from common.config import FrontEndLimits
from common.errors import InvalidArgument, NotOwner, PermissionDenied, StampError
from common.proto import frontend_pb2 as fe_pb
from common.proto import partition_pb2 as pb
from common.rpc import arm_remote
from frontend.scan import encode_continuation, scan_pages
from partition_layer.client import AsyncPartitionClient, PartitionClient
from tests.conftest import config_toml, stamp_config
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

ACCOUNT = "acct"
SPLITS = ("acct/g03", "acct/g06", "acct/g09")
PARTITION = {"memtable_bytes_max": 256 * 1024, "data_block_bytes": 4096,
             "bootstrap_split_keys": SPLITS}
GROUPS = 12
FE_SCAN_S = 120  # a scan that hangs fails the test (a scan here takes well under a second)
ROWS = 60


def start_stamp(root: Path) -> LocalStamp:
    config = stamp_config(3, 3, lock_servers=3, partition_managers=1, partition_servers=2,
                          partition=PARTITION)  # type: ignore[arg-type]
    (root / "stamp.toml").write_text(config_toml(partition=PARTITION))
    local = LocalStamp(root / "stamp", config, str(root / "stamp.toml"))
    local.up()
    # The PM assigns each partition to a server live when the map is made: spread them.
    with PartitionClient.from_stamp(str(local.data_dir)) as pc:
        current, _ = pc.partition_map()
    for entry in current.partitions:
        wanted = "ps-1" if entry.id % 2 else "ps-2"
        if entry.server != wanted:
            cli(local, "partition", "move", str(entry.id), wanted)
    local.wait_partitions_served()
    return local


def cli(local: LocalStamp, *args: str) -> str:
    return subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir", str(local.data_dir),
                           *args], capture_output=True, text=True, timeout=120,
                          check=True).stdout


def fill(pc: PartitionClient) -> list[tuple[str, bytes]]:
    written = []
    for g in range(GROUPS):
        group = f"g{g:02}"
        pc.batch(ACCOUNT, group, [("put", b"r%03d" % r, b"%s.%d" % (group.encode(), r) * 20)
                                  for r in range(ROWS)])
        written += [(group, b"r%03d" % r) for r in range(ROWS)]
    for name in ("log-a", "log-b", "g04-log", "zz-log"):
        pc.append(ACCOUNT, name, [b"x"] * 50)
    pc.put("other", "g05", "r000", b"another account")
    return written


@pytest.fixture(scope="module")
def stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    local = start_stamp(tmp_path_factory.mktemp("scan"))
    try:
        yield local
    finally:
        local.kill_all()


@pytest.fixture(scope="module")
def written(stamp: LocalStamp) -> list[tuple[str, bytes]]:
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        return fill(pc)


def fe_scan(stamp: LocalStamp, request: fe_pb.ScanRequest, name_prefix: str = "",
            limits: FrontEndLimits | None = None) -> list[fe_pb.ScanPage]:
    """The pages of `request`; TimeoutError (not a hung test) past FE_SCAN_S."""
    async def go() -> list[fe_pb.ScanPage]:
        client = AsyncPartitionClient([r.address for r in stamp.partition_managers()],
                                      stamp.config.partition)
        try:
            async with asyncio.timeout(FE_SCAN_S):
                return [p async for p in scan_pages(client, request, name_prefix,
                                                    limits or FrontEndLimits())]
        finally:
            await client.close()
    return asyncio.run(go())


def keys_of(pages: list[fe_pb.ScanPage]) -> list[tuple[str, bytes]]:
    return [(i.pname, i.row) for p in pages for i in p.items]


def test_partition_ls_shows_the_bootstrap_partitions(stamp: LocalStamp,
                                                      written: list[tuple[str, bytes]]
                                                      ) -> None:
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        current, _ = pc.partition_map()
        assert len(current.partitions) == 4
        assert {p.server for p in current.partitions} == {"ps-1", "ps-2"}
    shown = cli(stamp, "partition", "ls")
    for split in SPLITS:
        assert split in shown


def test_scan_all_in_key_order_across_partitions(stamp: LocalStamp,
                                                  written: list[tuple[str, bytes]]) -> None:
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        got = list(pc.scan_all(ACCOUNT))
        assert [k for k, _ in got] == sorted(written)
        assert all(v == b"%s.%d" % (p.encode(), int(r[1:])) * 20 for (p, r), v in got)
        assert [k for k, _ in pc.scan_all(ACCOUNT, ("g02", "r050"), ("g07", ""), 100)] == \
            [k for k in sorted(written) if ("g02", b"r050") <= k < ("g07", b"")][:100]


def test_front_end_pages_and_continuations(stamp: LocalStamp,
                                           written: list[tuple[str, bytes]]) -> None:
    request = fe_pb.ScanRequest(account=ACCOUNT, page_rows=25)
    pages = fe_scan(stamp, request)
    assert keys_of(pages) == sorted(written)
    assert all(p.continuation for p in pages[:-1]) and not pages[-1].continuation
    assert all(len(p.items) <= 25 for p in pages)
    # Each continuation resumes exactly after its page's last item.
    for n in (0, len(pages) // 2, len(pages) - 2):
        again = fe_scan(stamp, fe_pb.ScanRequest(account=ACCOUNT, page_rows=1000,
                                                 continuation=pages[n].continuation))
        assert keys_of(again) == keys_of(pages[n + 1:])
    limited = fe_scan(stamp, fe_pb.ScanRequest(account=ACCOUNT, limit=130, page_rows=40))
    assert keys_of(limited) == sorted(written)[:130] and limited[-1].continuation
    rest = fe_scan(stamp, fe_pb.ScanRequest(account=ACCOUNT, page_rows=1000,
                                            continuation=limited[-1].continuation))
    assert keys_of(rest) == sorted(written)[130:]


def test_front_end_prefix_log_names_and_bad_continuations(
        stamp: LocalStamp, written: list[tuple[str, bytes]]) -> None:
    under = fe_scan(stamp, fe_pb.ScanRequest(account=ACCOUNT), name_prefix="g0")
    assert keys_of(under) == [k for k in sorted(written) if k[0].startswith("g0")]
    with pytest.raises(PermissionDenied):
        fe_scan(stamp, fe_pb.ScanRequest(account=ACCOUNT, start_pname="h"), name_prefix="g0")
    names = fe_scan(stamp, fe_pb.ScanRequest(account=ACCOUNT, mode=pb.SCAN_LOG_NAMES,
                                             page_rows=1))
    assert [i.pname for p in names for i in p.items] == ["g04-log", "log-a", "log-b",
                                                         "zz-log"]
    logs = fe_scan(stamp, fe_pb.ScanRequest(account=ACCOUNT, mode=pb.SCAN_LOG_NAMES,
                                            prefix="log"))
    assert [i.pname for p in logs for i in p.items] == ["log-a", "log-b"]
    for bad in (b"garbage", encode_continuation(b"\x00")):
        with pytest.raises(InvalidArgument):
            fe_scan(stamp, fe_pb.ScanRequest(account=ACCOUNT, continuation=bad))


def test_a_partition_server_killed_mid_scan(tmp_path: Path) -> None:
    local = start_stamp(tmp_path)
    try:
        with PartitionClient.from_stamp(str(local.data_dir)) as pc:
            written = fill(pc)
            current, _ = pc.partition_map()
        first_server = current.partitions[0].server

        async def go() -> list[tuple[str, bytes]]:
            client = AsyncPartitionClient([r.address for r in local.partition_managers()],
                                          local.config.partition)
            got: list[tuple[str, bytes]] = []
            try:
                pages = scan_pages(client, fe_pb.ScanRequest(account=ACCOUNT, page_rows=20),
                                   "", FrontEndLimits(scan_partitions_in_flight_max=2))
                async for page in pages:
                    got += [(i.pname, i.row) for i in page.items]
                    if len(got) == 20:
                        # The server of the partition being read, and of the one read
                        # ahead, dies with its streams open.
                        local.kill(first_server)
            finally:
                await client.close()
            return got
        got = asyncio.run(go())
        assert not local.alive(first_server)
        assert got == sorted(written)  # nothing lost, nothing twice, in order
    finally:
        local.kill_all()


class RecordingClient(AsyncPartitionClient):
    """Remembers the errors its scan streams end with."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.stream_errors: list[StampError] = []

    def scan_stream(self, address: str, request: pb.PartitionScanRequest
                    ) -> AsyncIterator[pb.PartitionScanPage]:
        inner = super().scan_stream(address, request)

        async def recorded() -> AsyncIterator[pb.PartitionScanPage]:
            try:
                async for page in inner:
                    yield page
            except StampError as exc:
                self.stream_errors.append(exc)
                raise
        return recorded()


def test_a_partition_moved_mid_scan(stamp: LocalStamp, written: list[tuple[str, bytes]]
                                    ) -> None:
    """The server of the partition being read unloads it (NotOwner mid-stream): the scan
    goes on from its last item at the new owner."""
    # Account "aaa" sorts before "acct": all in the first partition.
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        current, addresses = pc.partition_map()
        pc.batch("aaa", "big", [("put", b"r%04d" % r, b"v" * 100) for r in range(100)])
    first = current.partitions[0]
    other = "ps-2" if first.server == "ps-1" else "ps-1"
    expected = [("big", b"r%04d" % r) for r in range(100)]
    # Slow pages (50 of 2 rows, 100 ms each): the stream is still open when the partition
    # moves (gRPC's flow control would otherwise let the server send every page before).
    arm_remote(addresses[first.server], "ps.scan.page=delay:100,times=50")

    async def go() -> tuple[list[tuple[str, bytes]], list[StampError]]:
        client = RecordingClient([r.address for r in stamp.partition_managers()],
                                 stamp.config.partition)
        got: list[tuple[str, bytes]] = []
        try:
            async for page in scan_pages(client, fe_pb.ScanRequest(account="aaa",
                                                                   page_rows=2), "",
                                         FrontEndLimits(scan_partitions_in_flight_max=1)):
                got += [(i.pname, i.row) for i in page.items]
                if len(got) == 2:
                    await asyncio.to_thread(cli, stamp, "partition", "move", str(first.id),
                                            other)
        finally:
            await client.close()
        return got, client.stream_errors
    try:
        got, errors = asyncio.run(go())
    finally:
        cli(stamp, "partition", "move", str(first.id), first.server)
    assert got == expected
    assert any(isinstance(e, NotOwner) for e in errors), errors


def test_the_partition_client_lists_logs_across_partitions(
        stamp: LocalStamp, written: list[tuple[str, bytes]]) -> None:
    """PartitionClient.list_logs, as the SDK's: log names only (no entity group), in order,
    under a prefix, of one account."""
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        assert list(pc.list_logs(ACCOUNT)) == ["g04-log", "log-a", "log-b", "zz-log"]
        assert list(pc.list_logs(ACCOUNT, "log")) == ["log-a", "log-b"]
        assert list(pc.list_logs("other")) == []  # it has an entity group, no log
