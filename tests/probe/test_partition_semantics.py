"""Logs and entities through real partition servers (issue 6): every operation of the
partition-level API, its error cases, checkpoints and blobs. One stamp for the module."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from common.errors import (
    InvalidArgument,
    NotFound,
    OutOfRange,
    PreconditionFailed,
    Sealed,
    Trimmed,
)
from partition_layer.client import PartitionClient
from tests.conftest import module_stamp
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

# Small thresholds: the module's writes cross several checkpoints and a merge.
PARTITION = {"memtable_bytes_max": 256 * 1024, "runs_max": 2, "data_block_bytes": 4096,
             "blob_value_bytes_min": 16 * 1024}


@pytest.fixture(scope="module")
def stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    # One front end: the CLI's log commands go through it (issue 16).
    with module_stamp(tmp_path_factory, "partition-semantics", PARTITION,
                      extent_nodes=3, stream_managers=3, lock_servers=3,
                      partition_managers=2, partition_servers=2, front_ends=1) as local:
        yield local


@pytest.fixture(scope="module")
def pc(stamp: LocalStamp) -> Iterator[PartitionClient]:
    with PartitionClient.from_stamp(str(stamp.data_dir)) as client:
        yield client


def test_log_append_read_peek(pc: PartitionClient) -> None:
    assert pc.peek("acct", "empty") == (0, 0)
    assert pc.read("acct", "empty", 0, 10) == []
    assert pc.append("acct", "events", [b"a", b"b"]) == 0
    assert pc.append("acct", "events", [b"c"]) == 2
    assert pc.read("acct", "events", 0, 10) == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert pc.read("acct", "events", 1, 1) == [(1, b"b")]
    assert pc.read("acct", "events", 3, 10) == []
    assert pc.peek("acct", "events") == (0, 3)
    with pytest.raises(OutOfRange):
        pc.read("acct", "events", 4, 10)
    with pytest.raises(InvalidArgument):
        pc.append("acct", "events", [])
    with pytest.raises(InvalidArgument):
        pc.read("acct", "events", 0, 0)
    # Logs of different accounts and names are separate.
    assert pc.append("other", "events", [b"x"]) == 0


def test_append_token_is_exactly_once(pc: PartitionClient) -> None:
    first = pc.append("acct", "tokens", [b"1", b"2"], token="t-1")
    assert pc.append("acct", "tokens", [b"1", b"2"], token="t-1") == first
    assert pc.peek("acct", "tokens") == (0, 2)
    with pytest.raises(InvalidArgument, match="token"):
        pc.append("acct", "tokens", [b"1"], token="t-1")
    assert pc.append("acct", "tokens", [b"3"], token="t-2") == 2


def test_trim_and_seal(pc: PartitionClient) -> None:
    pc.append("acct", "trimmed", [f"r{i}".encode() for i in range(10)])
    pc.trim("acct", "trimmed", 4)
    assert pc.peek("acct", "trimmed") == (4, 10)
    with pytest.raises(Trimmed):
        pc.read("acct", "trimmed", 3, 5)
    assert pc.read("acct", "trimmed", 4, 2) == [(4, b"r4"), (5, b"r5")]
    pc.trim("acct", "trimmed", 2)  # below what is trimmed already: nothing changes
    assert pc.peek("acct", "trimmed") == (4, 10)
    with pytest.raises(OutOfRange):
        pc.trim("acct", "trimmed", 11)
    pc.seal("acct", "trimmed")
    pc.seal("acct", "trimmed")  # sealing twice is fine
    with pytest.raises(Sealed):
        pc.append("acct", "trimmed", [b"late"])
    assert pc.read("acct", "trimmed", 9, 5) == [(9, b"r9")]


def test_subscribe_delivers_records_as_they_commit(pc: PartitionClient) -> None:
    pc.append("acct", "tail", [b"before"])
    got: list[tuple[int, bytes]] = []
    done = threading.Event()

    def follow() -> None:
        for seq, data in pc.subscribe("acct", "tail", 0):
            got.append((seq, data))
        done.set()  # ends when the log is sealed and read to its end

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    for i in range(20):
        pc.append("acct", "tail", [f"live-{i}".encode()])
    pc.seal("acct", "tail")
    assert done.wait(30), "the subscription did not end after the log was sealed"
    assert got == [(0, b"before")] + [(i + 1, f"live-{i}".encode()) for i in range(20)]


def test_entities_with_etags(pc: PartitionClient) -> None:
    etag = pc.put("acct", "users", "alice", b"v1")
    assert pc.get("acct", "users", "alice") == (b"v1", etag)
    with pytest.raises(PreconditionFailed):
        pc.put("acct", "users", "alice", b"v2", if_none_match="*")
    with pytest.raises(PreconditionFailed):
        pc.put("acct", "users", "alice", b"v2", if_match="not-the-etag")
    etag2 = pc.put("acct", "users", "alice", b"v2", if_match=etag)
    assert etag2 != etag
    assert pc.get("acct", "users", "alice") == (b"v2", etag2)
    with pytest.raises(PreconditionFailed):
        pc.delete("acct", "users", "alice", if_match=etag)
    pc.delete("acct", "users", "alice", if_match=etag2)
    with pytest.raises(NotFound):
        pc.get("acct", "users", "alice")
    with pytest.raises(NotFound):
        pc.delete("acct", "users", "alice")
    assert pc.put("acct", "users", "alice", b"v3", if_none_match="*")
    with pytest.raises(InvalidArgument):
        pc.put("acct", "users", "", b"no row key")
    with pytest.raises(InvalidArgument):
        pc.put("acct", "users", "bob", b"x", if_none_match="yes")


def test_batch_is_all_or_nothing(pc: PartitionClient) -> None:
    etags = pc.batch("acct", "cart", [("put", "a", b"1"), ("put", "b", b"2")])
    assert len(etags) == 2 and all(etags)
    with pytest.raises(PreconditionFailed):
        pc.batch("acct", "cart", [("put", "c", b"3"), ("delete", "a", "wrong-etag")])
    with pytest.raises(NotFound):
        pc.get("acct", "cart", "c")  # the first half did not happen either
    etags = pc.batch("acct", "cart", [("delete", "a"), ("put", "b", b"22", etags[1])])
    assert etags[0] == "" and etags[1]
    assert pc.get("acct", "cart", "b")[0] == b"22"
    with pytest.raises(InvalidArgument):
        pc.batch("acct", "cart", [("upsert", "a", b"1")])


def test_large_values_go_to_blob_data(pc: PartitionClient) -> None:
    big = bytes(range(256)) * 400  # 100 KiB: above blob_value_bytes_min
    etag = pc.put("acct", "blobs", "big", big)
    assert pc.get("acct", "blobs", "big") == (big, etag)


def test_large_appends_are_written_once_to_blob_data(stamp: LocalStamp,
                                                    pc: PartitionClient) -> None:
    """Appends above blob_value_bytes_min go to blob data and the row points there: reads
    (from any record of them, within budgets), token retries, a checkpoint and a reload on
    another server (replaying the commit log's pointer rows) all see the same records."""
    big = [b"%05d-" % i + bytes(range(256)) * 80 for i in range(100)]  # ~2 MB: a blob
    assert pc.append("acct", "blob-log", [b"small-0"]) == 0
    assert pc.append("acct", "blob-log", big, token="big-1") == 1
    assert pc.append("acct", "blob-log", big, token="big-1") == 1  # a retry: no new records
    assert pc.append("acct", "blob-log", [b"small-1"]) == 101
    assert pc.append("acct", "blob-log", big[:50]) == 102
    expected = [(0, b"small-0"), *enumerate(big, 1), (101, b"small-1"),
                *enumerate(big[:50], 102)]

    def read_all() -> list[tuple[int, bytes]]:
        found: list[tuple[int, bytes]] = []
        while len(found) < len(expected):
            chunk = pc.read("acct", "blob-log", len(found), 1000)
            assert chunk, "a read made no progress"
            found += chunk
        return found
    assert read_all() == expected
    assert pc.read("acct", "blob-log", 57, 3) == expected[57:60]
    assert pc.read("acct", "blob-log", 100, 3) == expected[100:103]
    assert pc.peek("acct", "blob-log") == (0, 152)
    listing = json.loads(_cli(stamp, "partition", "ls", "--json").stdout)
    [entry] = listing["partitions"]
    other = "ps-2" if entry["server"] == "ps-1" else "ps-1"
    moved = _cli(stamp, "partition", "move", str(entry["id"]), other)
    assert moved.returncode == 0, moved.stderr
    assert read_all() == expected  # the new owner has no blob cache: from the extent nodes


def test_scan_in_key_order(pc: PartitionClient) -> None:
    for i in range(30):
        pc.put("scan", f"p{i % 3}", f"row-{i:03d}", f"v{i}".encode())
    pc.delete("scan", "p1", "row-001")
    rows = pc.scan("scan", ("p0", ""), None, 1000)
    keys = [k for k, _ in rows]
    assert keys == sorted(keys)
    assert len(rows) == 29 and ("p1", b"row-001") not in keys
    assert pc.scan("scan", ("p1", ""), ("p2", ""), 1000) == [
        (("p1", f"row-{i:03d}".encode()), f"v{i}".encode()) for i in range(4, 30, 3)]
    assert len(pc.scan("scan", None, None, 5)) == 5


def test_many_writes_cross_checkpoints_and_merges(pc: PartitionClient) -> None:
    """Past the memtable threshold several times: rows and log records from every
    checkpoint (and the merged runs) read back, deletes and trims hold."""
    value = b"x" * 2000
    for i in range(400):
        pc.put("bulk", "rows", f"r{i:04d}", value + str(i).encode())
    for i in range(0, 400, 7):
        pc.delete("bulk", "rows", f"r{i:04d}")
    for start in range(0, 600, 100):
        pc.append("bulk", "log", [f"rec-{i}".encode() * 50 for i in range(start, start + 100)])
    pc.trim("bulk", "log", 150)
    for i in range(400):
        if i % 7 == 0:
            with pytest.raises(NotFound):
                pc.get("bulk", "rows", f"r{i:04d}")
        else:
            assert pc.get("bulk", "rows", f"r{i:04d}")[0] == value + str(i).encode()
    records = pc.read("bulk", "log", 150, 1000)
    assert [s for s, _ in records][:1] == [150]
    assert all(data == f"rec-{seq}".encode() * 50 for seq, data in records)
    assert pc.peek("bulk", "log") == (150, 600)


def _cli(stamp: LocalStamp, *args: str, stdin: str | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir",
                           str(stamp.data_dir), *args], capture_output=True, text=True,
                          timeout=120, input=stdin)


def test_cli_logs_and_partitions(stamp: LocalStamp) -> None:
    done = _cli(stamp, "log", "append", "cli-log", "first", "second")
    assert done.returncode == 0 and "at 0..1" in done.stdout, done.stderr
    assert _cli(stamp, "log", "append", "cli-log", stdin="third\nfourth\n").returncode == 0
    assert _cli(stamp, "log", "read", "cli-log").stdout.splitlines() == [
        "0\tfirst", "1\tsecond", "2\tthird", "3\tfourth"]
    assert _cli(stamp, "log", "peek", "cli-log").stdout.strip() == "first 0 next 4"
    wrong = _cli(stamp, "log", "read", "cli-log", "--from", "9")
    assert wrong.returncode == 1 and wrong.stderr.startswith("stamp: error:") \
        and "Traceback" not in wrong.stderr
    listing = json.loads(_cli(stamp, "partition", "ls", "--json").stdout)
    [entry] = listing["partitions"]
    assert entry["state"] == "serving" and entry["range"] == "[-inf, +inf)"
    other = "ps-2" if entry["server"] == "ps-1" else "ps-1"
    moved = _cli(stamp, "partition", "move", "1", other)
    assert moved.returncode == 0, moved.stderr
    assert json.loads(_cli(stamp, "partition", "ls", "--json").stdout)[
        "partitions"][0]["server"] == other
    assert _cli(stamp, "log", "read", "cli-log", "--from", "3").stdout == "3\tfourth\n"
    bad = _cli(stamp, "partition", "move", "1", "ps-9")
    assert bad.returncode == 1 and "not a live partition server" in bad.stderr


def test_a_name_is_a_log_or_an_entity_group(pc: PartitionClient) -> None:
    """Issue 15 hole 1, as the review reproduced it: an entity put whose row is a log
    record's sequence number overwrote that append, and every read failed after it."""
    records = [b"o%d" % i for i in range(6)]
    assert pc.append("kinds", "orders", records) == 0
    with pytest.raises(InvalidArgument, match="is a log"):
        pc.put("kinds", "orders", (5).to_bytes(8, "big"), b"oops")
    with pytest.raises(InvalidArgument, match="is a log"):
        pc.batch("kinds", "orders", [("delete", (5).to_bytes(8, "big"))])
    with pytest.raises(InvalidArgument, match="is a log"):
        pc.get("kinds", "orders", (5).to_bytes(8, "big"))
    assert pc.read("kinds", "orders", 0, 10) == list(enumerate(records))
    pc.put("kinds", "customers", "alice", b"1")
    for wrong in (lambda: pc.append("kinds", "customers", [b"x"]),
                  lambda: pc.read("kinds", "customers", 0, 10),
                  lambda: pc.peek("kinds", "customers"),
                  lambda: pc.trim("kinds", "customers", 0),
                  lambda: pc.seal("kinds", "customers")):
        with pytest.raises(InvalidArgument, match="entity group"):
            wrong()
    assert pc.get("kinds", "customers", "alice")[0] == b"1"
    # A scan yields entities only, never a log's records.
    assert pc.scan("kinds", None, None, 100) == [(("customers", b"alice"), b"1")]


def test_a_retried_put_does_not_undo_a_later_write(pc: PartitionClient) -> None:
    """Issue 15 hole 2 through the client's retry path: a put executes, its answer is lost
    (the session raises Unavailable, as when a stream breaks after the server committed),
    a later put of the same row lands, then the client retries the first one."""
    from common.errors import Unavailable

    aio = pc.aio
    real_session = aio._session
    lost: list[str] = []

    class LosesFirstAnswer:
        def __init__(self, session: object) -> None:
            self.session = session

        async def call(self, request: object, timeout_s: float, nbytes: int = 256) -> object:
            response = await self.session.call(request, timeout_s, nbytes)  # type: ignore[attr-defined]
            # The first put's answer that says it was done (one refused, e.g. NotOwner while
            # the partition still loads, is retried by the client as it is).
            if request.WhichOneof("op") == "put" and request.put.value == b"first" \
                    and not lost and not response.error:  # type: ignore[attr-defined]
                lost.append(response.etag)  # type: ignore[attr-defined]
                await aio.put("retry", "group", "row", b"later")
                raise Unavailable("the answer was lost")
            return response

        def submit(self, request: object, timeout_s: float, nbytes: int = 256
                   ) -> asyncio.Future[object]:
            return asyncio.ensure_future(self.call(request, timeout_s, nbytes))

    aio._session = lambda address: LosesFirstAnswer(real_session(address))  # type: ignore[method-assign]
    try:
        etag = pc.put("retry", "group", "row", b"first")
    finally:
        aio._session = real_session  # type: ignore[method-assign]
    assert lost == [etag], "the retry was not answered from the first attempt"
    value, _ = pc.get("retry", "group", "row")
    assert value == b"later", "the retried put undid the later write"
