"""The owner's sweep of its CURP witnesses in real processes (issue 32, curp.py step 6,
partition_layer/witness_sweep.py): a record that lands after its write was durable (so after
its drop) leaves the witnesses; a record whose write never reached the owner leaves them too,
and that write, arriving afterwards, is not answered early — its acknowledgement would rest
on records that are gone — but once durable.

The front end's part is played by the test, as in test_curp_recovery.py."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from common.proto import partition_pb2 as pb
from partition_layer.client import PartitionClient
from partition_layer.client_requests import put_request
from partition_layer.payload_crc import payload_crcs
from tests.support.waiting import wait_for
from tests.support.witness_calls import dated, held, hinted, record_at, record_of, session_to
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

StampFactory = Callable[..., LocalStamp]
ACCOUNT = "acct"
DEADLINE_S = 30.0
SWEEP = {"curp": True, "curp_sweep_interval_ms": 200, "curp_sweep_age_ms": 300}


def append_request(log: str, data: bytes, token: str) -> pb.Request:
    return pb.Request(account=ACCOUNT, pname=log, append=pb.AppendOp(
        records=[data], crcs=payload_crcs([data]), token=token))


def test_the_sweep_drops_leftovers_and_never_answers_a_swept_write_early(
        stamp_factory: StampFactory) -> None:
    stamp = stamp_factory(3, 3, lock_servers=3, partition_managers=1, partition_servers=1,
                          partition=SWEEP)
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        async def scenario() -> None:
            current, addresses = await pc.aio.partition_map()
            entry = current.get(1)
            address = addresses[entry.server]
            session = session_to(address)
            try:
                hint = int(time.time() * 1_000_000) << 4
                learn = await session.call(dated(hinted(put_request(
                    ACCOUNT, "group", "r0", b"v0", None, None, "t0"), hint, 0)), 10)
                assert not learn.error and len(learn.witnesses) == 3, learn
                epoch, witnesses = learn.epoch, list(learn.witnesses)

                # A leftover: the write is durable (its answer synced: no epoch named) and
                # its record lands only afterwards, after any drop.
                late = dated(hinted(put_request(ACCOUNT, "group", "r1", b"v1", None, None,
                                                "t1"), hint + 1, 0))
                answer = await session.call(late, 10)
                assert not answer.error and not answer.speculative, answer
                assert await record_at(witnesses, entry.id,
                                       record_of(late, "t1", epoch)) == ["ACCEPTED"] * 3
                # In doubt: recorded, never sent to the owner (yet).
                lost = dated(hinted(append_request("log", b"lost", "t2"), hint + 2, epoch))
                assert await record_at(witnesses, entry.id,
                                       record_of(lost, "t2", epoch)) == ["ACCEPTED"] * 3

                async def swept() -> bool:
                    return not any([await held(a, entry.id) for a in witnesses])
                await wait_for(swept, DEADLINE_S, "the sweep to drop both records")

                # The lost write arrives now: executed, but not answered early (its records
                # are gone), only once durable.
                answer = await session.call(lost, 10)
                assert not answer.error and not answer.speculative, answer
                assert answer.first_seq == 0
                # A write of its own, recorded and hinted as ever, is still answered early.
                fresh = dated(hinted(append_request("log", b"fresh", "t3"), hint + 3, epoch))
                assert await record_at(witnesses, entry.id,
                                       record_of(fresh, "t3", epoch)) == ["ACCEPTED"] * 3
                answer = await session.call(fresh, 10)
                assert not answer.error and answer.speculative, answer
            finally:
                await session.close()
            assert await pc.aio.read(ACCOUNT, "log", 0, 10) == [(0, b"lost"), (1, b"fresh")]

        pc.run(scenario())  # on the client's own loop, as its sessions are
