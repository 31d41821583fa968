"""A witness lost while its owner serves is replaced (issue 32, curp.py step 2,
partition_layer/witness_repick.py), the way a lost replica is: once the extent node holding it
is SIGKILLed, or cut off from every peer, and the stream manager counts it suspect, the owner
moves to a set without it under its next set epoch, front ends learn the new set from its
answers, writes are answered early at it again, and a write so answered survives the owner's
SIGKILL with its commit log stalled (the recovery reads the set the metadata now names).

Four extent nodes in three fault domains: the partition's set is one node of each, and with
one node gone the fourth takes its domain's place. The front end's part is played by the
test, as in test_curp_recovery.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from common import rpc
from common.proto import partition_pb2 as pb
from partition_layer.client import PartitionClient
from partition_layer.client_requests import put_request
from partition_layer.rows import etag_of
from partition_layer.witness_set import generation, owner_epoch
from tests.support.waiting import wait_for
from tests.support.witness_calls import (
    hinted,
    record_at,
    record_of,
    session_to,
    until_owned_by,
)
from tools import cmd_isolate
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

StampFactory = Callable[..., LocalStamp]
ACCOUNT = "acct"
DEADLINE_S = 30.0
QUICK = {"curp": True, "curp_sweep_interval_ms": 200, "curp_witness_lost_ms": 600}


# Cut off, or frozen, under SDK load: tests/probe/test_curp_witness_faults.py.
@pytest.mark.parametrize("fault", ["killed"])
def test_a_lost_witness_is_replaced_and_the_new_set_holds_early_answers(
        stamp_factory: StampFactory, fault: str) -> None:
    stamp = stamp_factory(4, 3, lock_servers=3, partition_managers=1, partition_servers=2,
                          partition=QUICK)
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        async def scenario() -> None:
            current, addresses = await pc.aio.partition_map()
            entry = current.get(1)
            owner = entry.server
            session = session_to(addresses[owner])
            hint = int(time.time() * 1_000_000) << 4
            try:
                taught = await session.call(hinted(put_request(
                    ACCOUNT, "group", "r0", b"v0", None, None, "t0"), hint, 0), 10)
                assert not taught.error and len(taught.witnesses) == 3, taught
                first, witnesses = taught.epoch, list(taught.witnesses)
                # The member in fault domain fd-1 (en-1 or en-4): the other one can take its
                # place (conftest.stamp_config puts en-i in fd-((i - 1) % 3 + 1)).
                lost, lost_address = next((r.name, r.address) for r in stamp.extent_nodes()
                                          if r.address in witnesses
                                          and r.name in ("en-1", "en-4"))
                if fault == "killed":
                    stamp.kill(lost)
                else:
                    cmd_isolate.isolate(stamp, lost)

                # Writes naming the first set go on; once the owner moved, its answers name
                # the new one.
                learned: dict[str, object] = {}
                tokens = iter(range(1, 1 << 20))

                async def moved() -> bool:
                    n = next(tokens)
                    answer = await session.call(hinted(put_request(
                        ACCOUNT, "group", f"m{n}", b"m", None, None, f"m{n}"), hint + n,
                        first), 10)
                    assert not answer.error, answer
                    if answer.witnesses:
                        learned.update(epoch=answer.epoch, witnesses=list(answer.witnesses))
                    return bool(learned)
                await wait_for(moved, DEADLINE_S, f"partition 1 to leave witness {lost}")
                epoch, now_witnesses = learned["epoch"], learned["witnesses"]
                assert isinstance(epoch, int) and isinstance(now_witnesses, list)
                assert owner_epoch(epoch) == owner_epoch(first) and generation(epoch) == 1
                assert lost_address not in now_witnesses and len(now_witnesses) == 3

                # Answered early at the new set, its commit log stalled: held by the new set
                # alone when the owner dies.
                await asyncio.to_thread(rpc.arm_remote, addresses[owner],
                                        "ps.commit.before_append=delay:60000")
                early = hinted(put_request(ACCOUNT, "group", "r1", b"early", None, None,
                                           "t1"), hint + (1 << 20), epoch)
                assert await record_at(now_witnesses, entry.id,
                                       record_of(early, "t1", epoch)) == ["ACCEPTED"] * 3
                answer = await session.call(early, 10)
                assert not answer.error and answer.speculative, answer
            finally:
                await session.close()

            stamp.kill(owner)
            survivor = next(r.name for r in stamp.partition_servers() if r.name != owner)

            await until_owned_by(pc, survivor, DEADLINE_S)
            value, etag = await asyncio.wait_for(pc.aio.get(ACCOUNT, "group", "r1"),
                                                 DEADLINE_S)
            assert (value, etag) == (b"early", etag_of(hint + (1 << 20)))

        pc.run(scenario())  # on the client's own loop, as its sessions are


def test_a_set_that_cannot_be_fenced_at_load_is_picked_once_it_can(
        stamp_factory: StampFactory) -> None:
    """A member of the partition's set is cut off from the partition servers (the stream
    manager still counts it alive): the next owner's load fences the named set (two answer,
    enough) but cannot fence a set of its own, so it serves with none, every write on the
    sync path; once the member is healed it picks, names and uses a set, and answers early
    again."""
    stamp = stamp_factory(3, 3, lock_servers=3, partition_managers=1, partition_servers=2,
                          partition=QUICK)
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        async def scenario() -> None:
            current, addresses = await pc.aio.partition_map()
            entry = current.get(1)
            owner = entry.server
            survivor = next(r.name for r in stamp.partition_servers() if r.name != owner)
            hint = int(time.time() * 1_000_000) << 4
            session = session_to(addresses[owner])
            try:
                taught = await session.call(hinted(put_request(
                    ACCOUNT, "group", "r0", b"v0", None, None, "t0"), hint, 0), 10)
                first, witnesses = taught.epoch, list(taught.witnesses)
                assert len(witnesses) == 3, taught
            finally:
                await session.close()
            cut = next(r.name for r in stamp.extent_nodes() if r.address == witnesses[0])
            cmd_isolate.isolate(stamp, cut, [owner, survivor])
            stamp.kill(owner)

            await until_owned_by(pc, survivor, DEADLINE_S)
            _, addresses = await pc.aio.partition_map()
            session = session_to(addresses[survivor])
            tokens = iter(range(1, 1 << 20))

            async def taught_now() -> pb.Response:
                n = next(tokens)
                answer = await session.call(hinted(put_request(
                    ACCOUNT, "group", f"m{n}", b"m", None, None, f"m{n}"), hint + n, first), 10)
                assert not answer.error, answer
                return answer
            try:
                assert not (await taught_now()).witnesses, "a set fenced with a member cut off"
                cmd_isolate.heal(stamp, cut)
                learned: list[pb.Response] = []

                async def has_set() -> bool:
                    answer = await taught_now()
                    learned.append(answer)
                    return bool(answer.witnesses)
                await wait_for(has_set, DEADLINE_S, "the owner to pick a set once it can")
                epoch, now_witnesses = learned[-1].epoch, list(learned[-1].witnesses)
                assert owner_epoch(epoch) > owner_epoch(first) and generation(epoch) == 1
                fast = hinted(put_request(ACCOUNT, "group", "r1", b"v1", None, None, "t1"),
                              hint + (1 << 20), epoch)
                assert await record_at(now_witnesses, entry.id,
                                       record_of(fast, "t1", epoch)) == ["ACCEPTED"] * 3
                answer = await session.call(fast, 10)
                assert not answer.error and answer.speculative, answer
            finally:
                await session.close()

        pc.run(scenario())  # on the client's own loop, as its sessions are
