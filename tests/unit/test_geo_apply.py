"""Inter-stamp replication's apply path (issue 30): what a primary partition committed,
shipped as ReplicateOp requests (partition_layer/geo_ship.py) in commit order and applied at
a secondary partition (operations.Replicated), leaves the secondary with the primary's logs
and entities: the same records, values, ETags and tokens (a retried append or write answered
as at the primary), large values in the secondary's own blob data; shipping again changes
nothing; a malformed ReplicateOp is refused whole."""

from __future__ import annotations

import asyncio

import pytest

from common.checksums import crc32c
from common.proto import partition_pb2 as pb
from partition_layer import keys
from partition_layer.commit_log import decode_batch
from partition_layer.geo_ship import replicate_requests
from partition_layer.partition import RangePartition
from partition_layer.requests import handle
from partition_layer.rows import Row, decode_row, encode_row
from tests.support.geo import BIG, LIMITS, Side, append, put


async def workload(primary: Side) -> dict[str, object]:
    """Logs and entities written at the primary; what the writers were told."""
    told: dict[str, object] = {}
    told["first"] = (await primary.ok("orders", append=append(b"o1", b"o2", token="t1"))
                     ).first_seq
    await primary.ok("orders", append=append(BIG, b"o4"))  # a large append: blob data
    await primary.ok("orders", trim=pb.TrimOp(upto_seq=1))
    await primary.ok("done", append=append(b"d1"))
    await primary.ok("done", seal=pb.Empty())
    told["alice"] = (await primary.ok("users", put=put(b"alice", b"Oslo"),
                                      token="w1")).etag
    told["bob"] = (await primary.ok("users", put=put(b"bob", BIG))).etag
    await primary.ok("users", put=put(b"carol", b"Rome"))
    await primary.ok("users", delete=pb.DeleteOp(row=b"carol"))
    told["batch"] = list((await primary.ok("users", batch=pb.BatchOp(items=[
        pb.BatchItem(kind="put", row=b"dave", value=b"Lima", value_crc=crc32c(b"Lima")),
        pb.BatchItem(kind="put", row=b"erin", value=b"Kyiv", value_crc=crc32c(b"Kyiv"))]),
        token="w2")).etags)
    return told


async def ship(primary: RangePartition, secondary: Side) -> int:
    """Every operation of the primary's commit log, in order, applied at the secondary;
    how many requests that took."""
    log = primary.streams["log"]
    sent = 0
    for location in sorted(log.blocks, key=lambda loc: loc.offset):  # type: ignore[attr-defined]
        for op in decode_batch(await log.read(location)).ops:
            for request in await replicate_requests(op, primary.read_blob):
                request.id = next(secondary.ids)
                response = await handle(request, secondary.server.find, LIMITS)
                assert not response.error, (response.error, response.message)
                sent += 1
    return sent


async def state(side: Side) -> dict[str, object]:
    """What a reader sees of the workload's names."""
    seen: dict[str, object] = {}
    for log in ("orders", "done"):
        peek = await side.ok(log, peek=pb.Empty())
        read = await side.ok(log, read=pb.ReadOp(from_seq=peek.first_seq, limit=100))
        seen[log] = (peek.first_seq, peek.next_seq,
                     [(r.seq, r.data, r.crc) for r in read.records])
    for row in (b"alice", b"bob", b"carol", b"dave", b"erin"):
        got = await side.ask("users", get=pb.GetOp(row=row))
        seen[row.decode()] = (got.error, got.value, got.etag, got.value_crc)
    sealed = await side.ask("done", append=append(b"late"))
    seen["sealed"] = sealed.error
    return seen


def test_the_secondary_ends_with_the_primarys_rows_and_answers_retries_as_it_would() -> None:
    async def scenario() -> None:
        primary, secondary = Side(), Side()
        told = await workload(primary)
        assert await ship(primary.partition, secondary) >= 10
        expected = await state(primary)
        assert await state(secondary) == expected
        assert expected["sealed"] == "Sealed" and expected["carol"][0] == "NotFound"
        # Large values are in the secondary's own blob data, not pointers into the other's.
        blob_rows = [k for k, r in secondary.partition.memtable.items()
                     if decode_row(r).blob is not None]
        assert len(blob_rows) == 2
        # Tokens travelled: retries at the secondary are answered as at the primary.
        again = await secondary.ok("orders", append=append(b"o1", b"o2", token="t1"))
        assert again.first_seq == told["first"]
        retried = await secondary.ok("users", batch=pb.BatchOp(items=[
            pb.BatchItem(kind="put", row=b"dave", value=b"Lima", value_crc=crc32c(b"Lima")),
            pb.BatchItem(kind="put", row=b"erin", value=b"Kyiv", value_crc=crc32c(b"Kyiv"))]),
            token="w2")
        assert list(retried.etags) == told["batch"]
        assert await state(secondary) == expected  # the retries wrote nothing
        # ETags travelled: a writer's if_match holds at the secondary.
        moved = await secondary.ok("users", put=put(b"alice", b"Bergen",
                                                     if_match=told["alice"]))
        assert moved.etag != told["alice"]
        stale = await secondary.ask("users", put=put(b"alice", b"Oslo", if_match=told["alice"]))
        assert stale.error == "PreconditionFailed"

    asyncio.run(scenario())


def test_shipping_everything_again_changes_nothing() -> None:
    async def scenario() -> None:
        primary, secondary = Side(), Side()
        await workload(primary)
        await ship(primary.partition, secondary)
        once = await state(secondary)
        await ship(primary.partition, secondary)
        assert await state(secondary) == once == await state(primary)

    asyncio.run(scenario())


def request_of(pname: str, pairs: list[tuple[bytes, bytes]]) -> pb.Request:
    return pb.Request(id=1, account="acct", pname=pname, replicate=pb.ReplicateOp(
        keys=[k for k, _ in pairs], rows=[r for _, r in pairs]))


@pytest.mark.parametrize("case,message", [
    ("empty", "1..4096 keys"),
    ("other name", "not of the request's name"),
    ("other account", "not of the request's name"),
    ("pointer", "inline"),
    ("rows short", "one row per key"),
])
def test_a_malformed_replicated_operation_is_refused_whole(case: str, message: str) -> None:
    good = (keys.encode_key("acct", "users", keys.KIND_ENTITY, b"zed"),
            encode_row(Row(7, value=b"v")))
    bad = {
        "empty": [],
        "other name": [good, (keys.encode_key("acct", "other", keys.KIND_ENTITY, b"a"),
                              good[1])],
        "other account": [good, (keys.encode_key("acct2", "users", keys.KIND_ENTITY, b"a"),
                                 good[1])],
        "pointer": [good, (good[0] + b"2", bytes.fromhex("02") + bytes(8) + bytes(28))],
        "rows short": [good],
    }[case]

    async def scenario() -> None:
        side = Side()
        request = request_of("users", bad)
        if case == "rows short":
            request.replicate.keys.append(good[0] + b"2")
        response = await handle(request, side.server.find, LIMITS)
        assert response.error == "InvalidArgument" and message in response.message
        assert (await side.ask("users", get=pb.GetOp(row=b"zed"))).error == "NotFound"

    asyncio.run(scenario())


def test_writes_after_replicated_rows_get_versions_above_theirs() -> None:
    """A secondary that becomes primary (a failover) writes rows whose versions, hence
    ETags, are above every version the primary's rows brought: an ETag a client holds from
    the old primary never comes back for another write (committer._version)."""
    async def scenario() -> None:
        primary, secondary = Side(), Side()
        for i in range(50):  # the primary's LSNs run ahead (a name never shipped)
            await primary.ok("other", put=put(b"r", str(i).encode()))
        old = (await primary.ok("users", put=put(b"alice", b"Oslo"))).etag
        log = primary.partition.streams["log"]
        for location in sorted(log.blocks, key=lambda loc: loc.offset):  # type: ignore[attr-defined]
            for op in decode_batch(await log.read(location)).ops:
                for request in await replicate_requests(op, primary.partition.read_blob):
                    if request.pname == "users":
                        request.id = next(secondary.ids)
                        assert not (await handle(request, secondary.server.find,
                                                 LIMITS)).error
        assert secondary.partition.applied_lsn < 50 < secondary.partition.version_floor
        fresh = (await secondary.ok("users", put=put(b"bob", b"Rome"))).etag
        assert int(fresh.strip('"')) > int(old.strip('"'))
        moved = (await secondary.ok("users", put=put(b"alice", b"Bergen", if_match=old))).etag
        assert int(moved.strip('"')) > int(fresh.strip('"'))
        stale = await secondary.ask("users", put=put(b"alice", b"Oslo", if_match=old))
        assert stale.error == "PreconditionFailed"

    asyncio.run(scenario())


def test_the_version_floor_is_kept_and_rebuilt() -> None:
    """Applying an operation (a commit, or a replay at load) raises the floor to its rows'
    versions; the metadata record keeps it when it is above the LSN, and derived partitions
    inherit it."""
    from partition_layer import meta_derive
    from partition_layer.commit_log import CommitOp
    from partition_layer.keys import KeyRange
    from partition_layer.partition_meta import PartitionMeta, decode_meta, encode_meta

    async def applied() -> int:
        side = Side()
        side.partition.apply(CommitOp(side.partition.applied_lsn + 1, [
            (keys.encode_key("acct", "users", keys.KIND_ENTITY, b"a"),
             encode_row(Row(977, value=b"v")))]))
        return side.partition.version_floor

    assert asyncio.run(applied()) == 977
    meta = PartitionMeta(1, KeyRange(b"", None), applied_lsn=5, version_floor=977,
                         intents=[meta_derive.split_intent(b"m", 2, 3)])
    assert decode_meta(encode_meta(meta)).version_floor == 977
    assert meta_derive.derive_split_child(meta, 2).version_floor == 977
    plain = PartitionMeta(1, KeyRange(b"", None), applied_lsn=5, version_floor=5)
    assert b"version_floor" not in encode_meta(plain)  # at the LSN: the old record
