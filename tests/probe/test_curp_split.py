"""A split or merge parent's CURP records leave its witnesses (issue 32, partition_layer/curp.py
step 8, parent_witnesses.py), real processes: a stamp with CURP on, fast writes to a
partition (answered early, recorded at its three witnesses) and a write in doubt (recorded
at the witnesses, never sent to the owner: no Drop will ever take it), then a split. Once
the manager answered the split, the parent's id holds no record at any witness and a record
sent for it is refused (FENCED: a tombstone), while the children take fast writes under
their own ids. A merge's two parents go the same way (slow: a stamp of its own).

The front end's part is played by the test (tests/support/witness_calls.py)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from common.proto import partition_pb2 as pb
from partition_layer.client import PartitionClient
from partition_layer.client_requests import put_request
from partition_layer.payload_crc import payload_crcs
from tests.split_merge_probe import name_key, pm_call
from tests.support.witness_calls import held, hinted, record_at, record_of, session_to
from tools.local_stamp import LocalStamp

StampFactory = Callable[..., LocalStamp]
ACCOUNT = "acct"
CALL_S = 10.0
ALL_ACCEPTED, ALL_FENCED = ["ACCEPTED"] * 3, ["FENCED"] * 3
_hints = itertools.count(int(time.time() * 1_000_000) << 4)  # above every version, growing
_tokens = itertools.count(1)


@dataclass
class Witnessed:
    """A partition's witnesses as its owner taught them, under its epoch, and a record
    they hold that no Drop will take (its write never reached the owner)."""

    partition_id: int
    witnesses: list[str]
    epoch: int
    in_doubt: pb.Request


def token() -> str:
    return f"t{next(_tokens)}"


async def fast_writes(pc: PartitionClient, partition_id: int, prefix: str) -> Witnessed:
    """A fast put to `partition_id` (names `prefix`-*), answered early, and an append in
    doubt: recorded at its witnesses only."""
    current, addresses = await pc.aio.partition_map()
    session = session_to(addresses[current.get(partition_id).server])
    try:
        # No witnesses known: answered once durable, naming them and the owner's epoch.
        learn = await session.call(hinted(put_request(
            ACCOUNT, f"{prefix}-group", "r0", b"v0", None, None, token()), next(_hints), 0),
            CALL_S)
        assert not learn.error and len(learn.witnesses) == 3 and learn.epoch > 0, learn
        witnesses, epoch = list(learn.witnesses), learn.epoch
        tok = token()
        fast = hinted(put_request(ACCOUNT, f"{prefix}-group", "r1", b"v1", None, None, tok),
                      next(_hints), epoch)
        assert await record_at(witnesses, partition_id,
                               record_of(fast, tok, epoch)) == ALL_ACCEPTED
        answer = await session.call(fast, CALL_S)
        assert not answer.error and answer.speculative, answer
    finally:
        await session.close()
    records = [b"in doubt"]
    tok = token()
    doubt = hinted(pb.Request(account=ACCOUNT, pname=f"{prefix}-log", append=pb.AppendOp(
        records=records, crcs=payload_crcs(records), token=tok)), next(_hints), epoch)
    assert await record_at(witnesses, partition_id, record_of(doubt, tok, epoch)) \
        == ALL_ACCEPTED
    for address in witnesses:
        assert tok.encode() in await held(address, partition_id)
    return Witnessed(partition_id, witnesses, epoch, doubt)


async def assert_dropped(parent: Witnessed) -> None:
    """No record of the parent's id at its witnesses; one sent for it now is refused."""
    for address in parent.witnesses:
        assert await held(address, parent.partition_id) == [], \
            f"witness {address} still holds records of partition {parent.partition_id}"
    tok = token()
    late = hinted(put_request(ACCOUNT, parent.in_doubt.pname, "late", b"late", None, None,
                              tok), next(_hints), parent.epoch)
    assert await record_at(parent.witnesses, parent.partition_id,
                           record_of(late, tok, parent.epoch)) == ALL_FENCED


async def manager(stamp: LocalStamp, method: str, request: object) -> pb.PartitionOpReply:
    reply = await asyncio.to_thread(pm_call, stamp, method, request)
    assert reply.done.result == "ok", reply.done
    return reply


def test_a_split_parent_leaves_its_witnesses(stamp_factory: StampFactory) -> None:
    stamp = stamp_factory(3, 1, lock_servers=1, partition_managers=1, partition_servers=1,
                          partition={"curp": True})
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        async def scenario() -> None:
            parent = await fast_writes(pc, 1, "a")
            # "a-*" < "m" < "z-*": each child gets one side's names.
            split = await manager(stamp, "Split", pb.SplitPartitionRequest(
                partition_id=1, key=name_key(ACCOUNT, "m"), trigger="operator"))
            await assert_dropped(parent)
            left_id, right_id = split.done.to_ids
            await fast_writes(pc, left_id, "a")
            await fast_writes(pc, right_id, "z")

        pc.run(scenario())


@pytest.mark.slow  # a second stamp: about 10 s more
def test_merge_parents_leave_their_witnesses(stamp_factory: StampFactory) -> None:
    stamp = stamp_factory(3, 1, lock_servers=1, partition_managers=1, partition_servers=1,
                          partition={"curp": True, "bootstrap_split_keys": [f"{ACCOUNT}/m"]})
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        async def scenario() -> None:
            current, _ = await pc.aio.partition_map()
            left_id, right_id = (entry.id for entry in current.partitions)
            parents = [await fast_writes(pc, left_id, "a"), await fast_writes(pc, right_id, "z")]
            merge = await manager(stamp, "Merge", pb.MergePartitionsRequest(
                left_id=left_id, right_id=right_id, trigger="operator"))
            for parent in parents:
                await assert_dropped(parent)
            (merged_id,) = merge.done.to_ids
            await fast_writes(pc, merged_id, "a")
            await fast_writes(pc, merged_id, "z")

        pc.run(scenario())
