"""A deposed owner under CURP (issue 32): frozen (SIGSTOP) while its lease lapses, its
partition loaded by the other server meanwhile, then thawed and sent a fast write as a front
end would — to it and to the witnesses it named. Nothing can be acknowledged: the witnesses,
fenced by the new owner's load, refuse the records (FENCED), and the old owner gives no
answer a front end could take for one; the write is nowhere afterwards, and every write
acknowledged before the freeze is at the new owner. The front end's part is played by the
test, as in test_curp_recovery.py."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable

import pytest

from common.errors import NotFound
from partition_layer.client import PartitionClient
from partition_layer.client_requests import put_request
from partition_layer.rows import etag_of
from tests.support.partitions import aserving
from tests.support.waiting import wait_for
from tests.support.witness_calls import hinted, record_at, record_of, session_to
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

StampFactory = Callable[..., LocalStamp]
ACCOUNT = "acct"
DEADLINE_S = 30.0
PARTITION = {"curp": True, "partition_lease_ttl_ms": 1000, "server_session_ttl_ms": 1000}


def test_a_deposed_owner_thawed_gets_no_write_acknowledged(
        stamp_factory: StampFactory) -> None:
    stamp = stamp_factory(3, 3, lock_servers=3, partition_managers=1, partition_servers=2,
                          partition=PARTITION)
    hint = int(time.time() * 1_000_000) << 4
    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        async def scenario() -> None:
            current, addresses = await pc.aio.partition_map()
            entry = current.get(1)
            old = entry.server
            new = next(r.name for r in stamp.partition_servers() if r.name != old)
            session = session_to(addresses[old])
            try:
                taught = await session.call(hinted(put_request(
                    ACCOUNT, "group", "r0", b"v0", None, None, "t0"), hint, 0), 10)
                assert not taught.error and len(taught.witnesses) == 3, taught
                epoch, witnesses = taught.epoch, list(taught.witnesses)
                before = hinted(put_request(ACCOUNT, "group", "r1", b"v1", None, None, "t1"),
                                hint + 1, epoch)
                assert await record_at(witnesses, entry.id,
                                       record_of(before, "t1", epoch)) == ["ACCEPTED"] * 3
                acked = await session.call(before, 10)
                assert not acked.error and acked.speculative, acked

                os.kill(stamp.record(old).pid, signal.SIGSTOP)
                try:
                    await wait_for(lambda: aserving(stamp, new), DEADLINE_S,
                                   f"{new} to load partition 1")
                finally:
                    os.kill(stamp.record(old).pid, signal.SIGCONT)

                stale = hinted(put_request(ACCOUNT, "group", "r2", b"stale", None, None,
                                           "t2"), hint + 2, epoch)
                verdicts = await record_at(witnesses, entry.id, record_of(stale, "t2", epoch))
                assert verdicts == ["FENCED"] * 3, verdicts
                try:
                    answer = await session.call(stale, 10)
                    assert answer.error, f"the deposed owner answered a write: {answer}"
                except Exception as exc:  # a broken stream is no acknowledgement either
                    assert "speculative" not in str(exc)
            finally:
                await session.close()

            value, etag = await asyncio.wait_for(pc.aio.get(ACCOUNT, "group", "r1"),
                                                 DEADLINE_S)
            assert (value, etag) == (b"v1", etag_of(hint + 1))
            with pytest.raises(NotFound):  # the write sent to the deposed owner
                await pc.aio.get(ACCOUNT, "group", "r2")
        pc.run(scenario())
