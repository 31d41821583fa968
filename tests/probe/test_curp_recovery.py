"""CURP's recovery in real processes (issue 32, partition_layer/curp.py steps 2, 3 and 7): a
write its owner answered early, before any commit-log append, and that three witnesses hold,
survives the owner's SIGKILL — the next owner fences the witnesses, executes it again at the
version it was answered with (its ETag), and names its own witnesses, which drop a write's
record once it is durable; a write that reached the witnesses and never the owner (in doubt)
may take effect then too.

The front end's part is played by the test: it sends a hinted write to the owner and its
record to the witnesses, as a front end on the fast path would."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from common import rpc
from common.proto import partition_pb2 as pb
from partition_layer.client import PartitionClient
from partition_layer.client_requests import put_request
from partition_layer.payload_crc import payload_crcs
from partition_layer.rows import etag_of
from tests.support.waiting import wait_for
from tests.support.witness_calls import (
    held,
    hinted,
    record_at,
    record_of,
    session_to,
    until_owned_by,
)
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

StampFactory = Callable[..., LocalStamp]
ACCOUNT = "acct"
DEADLINE_S = 30.0


def test_an_early_answer_held_by_the_witnesses_survives_the_owners_sigkill(
        stamp_factory: StampFactory) -> None:
    stamp = stamp_factory(3, 3, lock_servers=3, partition_managers=1, partition_servers=2,
                          partition={"curp": True})
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        async def scenario() -> None:
            await pc.aio.put(ACCOUNT, "group", "r0", b"first")  # the group exists, durable
            current, addresses = await pc.aio.partition_map()
            entry = current.get(1)
            owner = entry.server
            session = session_to(addresses[owner])
            try:
                # Unknown witnesses: the answer (when durable) names them, with the epoch.
                learn = hinted(put_request(ACCOUNT, "group", "r1", b"v1", None, None, "t1"),
                               1 << 52, 0)
                taught = await session.call(learn, 10)
                assert not taught.error and not taught.speculative
                assert len(taught.witnesses) == 3 and taught.epoch > 0
                epoch, witnesses = taught.epoch, list(taught.witnesses)

                # The owner's commit log stalls: nothing more is durable there.
                await asyncio.to_thread(rpc.arm_remote, addresses[owner],
                                        "ps.commit.before_append=delay:60000")
                hint = int(time.time() * 1_000_000) << 4
                early = hinted(put_request(ACCOUNT, "group", "r2", b"early", None, None,
                                           "t2"), hint, epoch)
                assert await record_at(witnesses, entry.id,
                                       record_of(early, "t2", epoch)) == ["ACCEPTED"] * 3
                answer = await session.call(early, 10)
                assert not answer.error, answer
                assert answer.speculative and answer.etag == etag_of(hint)

                # In doubt: at the witnesses, never sent to the owner.
                records = [b"doubt"]
                doubt = hinted(pb.Request(account=ACCOUNT, pname="log", append=pb.AppendOp(
                    records=records, crcs=payload_crcs(records), token="t3")), hint + 1,
                    epoch)
                assert await record_at(witnesses, entry.id,
                                       record_of(doubt, "t3", epoch)) == ["ACCEPTED"] * 3
            finally:
                await session.close()

            stamp.kill(owner)
            survivor = next(r.name for r in stamp.partition_servers() if r.name != owner)

            await until_owned_by(pc, survivor, DEADLINE_S)
            value, etag = await asyncio.wait_for(pc.aio.get(ACCOUNT, "group", "r2"),
                                                 DEADLINE_S)
            assert (value, etag) == (b"early", etag_of(hint)), \
                "the write answered early was lost, or came back at another version"
            assert await pc.aio.read(ACCOUNT, "log", 0, 10) == [(0, b"doubt")]
            # The new owner names its own witnesses, under its own epoch.
            _, addresses = await pc.aio.partition_map()
            session = session_to(addresses[survivor])
            try:
                again = await session.call(hinted(put_request(
                    ACCOUNT, "group", "r3", b"v3", None, None, "t4"), hint + 2, epoch), 10)
                assert not again.error and not again.speculative
                assert len(again.witnesses) == 3 and again.epoch > epoch
                # Under the new epoch: answered early, and once durable the owner has its
                # witnesses drop the record (curp.py step 6).
                fast = hinted(put_request(ACCOUNT, "group", "r4", b"v4", None, None, "t5"),
                              hint + 3, again.epoch)
                assert await record_at(list(again.witnesses), entry.id, record_of(
                    fast, "t5", again.epoch)) == ["ACCEPTED"] * 3
                answer = await session.call(fast, 10)
                assert answer.speculative and answer.etag == etag_of(hint + 3)
            finally:
                await session.close()

            async def dropped() -> bool:
                tokens = [await held(a, entry.id) for a in again.witnesses]
                return not any(tokens)
            await wait_for(dropped, DEADLINE_S, "the witnesses to drop a durable write's record")

        pc.run(scenario())  # on the client's own loop, as its sessions are


def test_a_read_racing_an_unsynced_write_never_sees_it_vanish(
        stamp_factory: StampFactory) -> None:
    """A write the owner answered early but that no witness holds (its front end never got
    the acceptances: in doubt), the owner's commit log stalled: a get of its row waits for
    the write's sync — answered now, it could give neither the new value (which may vanish)
    nor the old one (stale, had the write been acknowledged) — and when the owner is
    SIGKILLed the write vanishes, no reader having seen it (DESIGN §8 invariant 7, curp.py
    step 5)."""
    stamp = stamp_factory(3, 3, lock_servers=3, partition_managers=1, partition_servers=2,
                          partition={"curp": True})
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        async def scenario() -> None:
            await pc.aio.put(ACCOUNT, "group", "r1", b"before")
            current, addresses = await pc.aio.partition_map()
            owner = current.get(1).server
            session = session_to(addresses[owner])
            try:
                hint = int(time.time() * 1_000_000) << 4
                taught = await session.call(hinted(put_request(
                    ACCOUNT, "group", "r0", b"v0", None, None, "t0"), hint, 0), 10)
                epoch = taught.epoch
                await asyncio.to_thread(rpc.arm_remote, addresses[owner],
                                        "ps.commit.before_append=delay:60000")
                unheld = hinted(put_request(ACCOUNT, "group", "r1", b"vanishes", None, None,
                                            "t1"), hint + 1, epoch)
                answer = await session.call(unheld, 10)
                assert not answer.error and answer.speculative, answer
                read = asyncio.ensure_future(session.call(pb.Request(
                    account=ACCOUNT, pname="group", get=pb.GetOp(row=b"r1")), 30))
                done, _ = await asyncio.wait([read], timeout=1.0)
                assert not done, f"a read answered around an unsynced write: {read.result()}"
                stamp.kill(owner)
                try:
                    seen = await read
                    assert seen.error, f"a read saw a write that vanished: {seen}"
                except Exception as exc:  # the stream broke with its server: no answer
                    assert "vanishes" not in str(exc)
            finally:
                await session.close()
            survivor = next(r.name for r in stamp.partition_servers() if r.name != owner)

            await until_owned_by(pc, survivor, DEADLINE_S)
            value, _ = await asyncio.wait_for(pc.aio.get(ACCOUNT, "group", "r1"), DEADLINE_S)
            assert value == b"before"

        pc.run(scenario())  # on the client's own loop, as its sessions are
