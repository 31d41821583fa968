"""End-to-end checksums through real partition servers (DESIGN §5, §8 invariant 6): a request
whose records or values do not match the CRC32Cs it carries is refused with ChecksumError and
writes nothing; bytes changed after the PS verified them (before they are stored) or on the
read path fail the reader's check, never come back as data; the CRCs travel through the
commit log on the extent nodes (a new owner replays them). One stamp for the module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from common.checksums import crc32c
from common.errors import ChecksumError, InvalidArgument, NotFound
from common.proto import partition_pb2 as pb
from common.rpc import arm_remote
from partition_layer.client import PartitionClient
from partition_layer.client_requests import batch_request, put_request
from tests.conftest import module_stamp
from tests.support.stamps import owner_of
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

BLOB_MIN = 16 * 1024  # values and appends from this size go to blob data first
PARTITION = {"blob_value_bytes_min": BLOB_MIN}
LARGE = bytes(range(256)) * (BLOB_MIN // 256 + 8)


@pytest.fixture(scope="module")
def stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    with module_stamp(tmp_path_factory, "end-to-end-crc", PARTITION,
                      extent_nodes=3, stream_managers=3,
                      lock_servers=3, partition_managers=1, partition_servers=2) as local:
        yield local


@pytest.fixture(scope="module")
def pc(stamp: LocalStamp) -> Iterator[PartitionClient]:
    with PartitionClient.from_stamp(str(stamp.data_dir)) as client:
        client.wait_served(60)
        yield client


def send(pc: PartitionClient, request: pb.Request) -> pb.Response:
    """A hand-made request through the client's routing; its error raised, typed."""
    return pc.run(pc.aio.call(request, idempotent=True))


def arm_owner(stamp: LocalStamp, pc: PartitionClient, spec: str) -> None:
    """Arm a fault point on the server that owns the (only) partition."""
    arm_remote(stamp.address(owner_of(stamp, pc)), spec)


def append_request(log: str, records: list[bytes], crcs: list[int]) -> pb.Request:
    return pb.Request(account="acct", pname=log,
                      append=pb.AppendOp(records=records, crcs=crcs, token=f"t-{log}-{crcs}"))


# ---- requests that do not match their CRCs ---------------------------------------------------

def test_an_append_that_does_not_match_its_crcs_writes_nothing(pc: PartitionClient) -> None:
    assert pc.append("acct", "refused", [b"a", b"b"]) == 0
    wrong = [crc32c(b"c"), crc32c(b"d") ^ 1]
    with pytest.raises(ChecksumError, match="record 1"):
        send(pc, append_request("refused", [b"c", b"d"], wrong))
    with pytest.raises(ChecksumError):  # a large append, bound for blob data
        send(pc, append_request("refused", [LARGE], [crc32c(LARGE) ^ 1]))
    with pytest.raises(InvalidArgument, match="one CRC32C per record"):
        send(pc, append_request("refused", [b"c", b"d"], [crc32c(b"c")]))
    with pytest.raises(InvalidArgument, match="one CRC32C per record"):
        send(pc, append_request("refused", [b"c"], []))
    assert pc.peek("acct", "refused") == (0, 2)
    assert pc.read("acct", "refused", 0, 10) == [(0, b"a"), (1, b"b")]


def test_a_put_that_does_not_match_its_crc_writes_nothing(pc: PartitionClient) -> None:
    etag = pc.put("acct", "puts", "kept", b"old")
    for row, value in (("kept", b"new"), ("absent", b"v"), ("large", LARGE)):
        request = put_request("acct", "puts", row, value, None, None, f"t-{row}")
        request.put.value_crc ^= 1 << 7
        with pytest.raises(ChecksumError, match="value put"):
            send(pc, request)
    assert pc.get("acct", "puts", "kept") == (b"old", etag)
    for row in ("absent", "large"):
        with pytest.raises(NotFound):
            pc.get("acct", "puts", row)


def test_a_batch_with_one_value_off_its_crc_writes_nothing(pc: PartitionClient) -> None:
    request = batch_request("acct", "batches", [("put", "r1", b"one"), ("put", "r2", LARGE)],
                            "t-batch")
    request.batch.items[1].value_crc ^= 1
    with pytest.raises(ChecksumError, match="item 1"):
        send(pc, request)
    for row in ("r1", "r2"):
        with pytest.raises(NotFound):
            pc.get("acct", "batches", row)
    assert pc.scan("acct", ("batches", b""), ("batches", b"\xff"), 10) == []


# ---- bytes changed at the PS: the reader refuses them ----------------------------------------

def test_a_record_changed_after_the_ps_verified_it_fails_every_read(
        stamp: LocalStamp, pc: PartitionClient) -> None:
    for log, record in (("flipped", b"hello, world"), ("flipped-large", LARGE)):
        arm_owner(stamp, pc, "ps.write.flip_after_verify=flip,times=1")
        assert pc.append("acct", log, [record, b"second"]) == 0  # acknowledged: stored as is
        with pytest.raises(ChecksumError, match="record 0"):
            pc.read("acct", log, 0, 10)
        with pytest.raises(ChecksumError):
            next(iter(pc.subscribe("acct", log, 0)))
        # The record after it is intact, and reads on its own.
        assert pc.read("acct", log, 1, 10) == [(1, b"second")]


def test_a_value_changed_after_the_ps_verified_it_fails_every_read(
        stamp: LocalStamp, pc: PartitionClient) -> None:
    for row, value in (("small", b"a value"), ("large", LARGE)):
        arm_owner(stamp, pc, "ps.write.flip_after_verify=flip,times=1")
        pc.put("acct", "flipped-puts", row, value)
        with pytest.raises(ChecksumError):
            pc.get("acct", "flipped-puts", row)
        with pytest.raises(ChecksumError):
            pc.scan("acct", ("flipped-puts", row), ("flipped-puts", row + "\0"), 10)
    arm_owner(stamp, pc, "ps.write.flip_after_verify=flip,times=1")
    pc.batch("acct", "flipped-batch", [("put", "b1", b"batched")])
    with pytest.raises(ChecksumError):
        pc.get("acct", "flipped-batch", "b1")


def test_a_record_changed_on_the_read_path_fails_the_read(
        stamp: LocalStamp, pc: PartitionClient) -> None:
    assert pc.append("acct", "read-path", [b"intact record", b"another"]) == 0
    arm_owner(stamp, pc, "ps.read.flip_record=flip,times=1")
    with pytest.raises(ChecksumError, match="record 0"):
        pc.read("acct", "read-path", 0, 10)
    # What is stored is intact: the next read, unaltered, returns it.
    assert pc.read("acct", "read-path", 0, 10) == [(0, b"intact record"), (1, b"another")]
    arm_owner(stamp, pc, "ps.read.flip_record=flip,times=1")
    with pytest.raises(ChecksumError):
        next(iter(pc.subscribe("acct", "read-path", 0)))


def test_a_value_changed_on_the_read_path_fails_the_read(
        stamp: LocalStamp, pc: PartitionClient) -> None:
    etag = pc.put("acct", "read-path-values", "row", b"intact value")
    arm_owner(stamp, pc, "ps.read.flip_value=flip,times=1")
    with pytest.raises(ChecksumError):
        pc.get("acct", "read-path-values", "row")
    assert pc.get("acct", "read-path-values", "row") == (b"intact value", etag)
    arm_owner(stamp, pc, "ps.read.flip_value=flip,times=1")
    with pytest.raises(ChecksumError):
        pc.scan("acct", ("read-path-values", b""), None, 10)


# ---- the CRCs travel with the bytes: a new owner replays them from the extent nodes ----------

def test_stored_crcs_survive_a_failover(stamp: LocalStamp, pc: PartitionClient) -> None:
    """Last in the module: it kills the owner."""
    assert pc.append("acct", "replayed", [b"r0", b"r1"]) == 0
    etag = pc.put("acct", "replayed-values", "row", b"replayed value")
    arm_owner(stamp, pc, "ps.write.flip_after_verify=flip,times=1")
    assert pc.append("acct", "replayed-bad", [b"corrupted at rest"]) == 0
    victim = owner_of(stamp, pc)
    stamp.kill(victim)
    pc.wait_served(90)
    assert owner_of(stamp, pc) != victim
    # The new owner replayed the commit log: records and values with the CRCs they came with.
    assert pc.read("acct", "replayed", 0, 10) == [(0, b"r0"), (1, b"r1")]
    assert pc.get("acct", "replayed-values", "row") == (b"replayed value", etag)
    with pytest.raises(ChecksumError):
        pc.read("acct", "replayed-bad", 0, 10)
