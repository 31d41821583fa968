"""A power cut of a whole stamp with CURP's fast path on (issue 32): a write its owner
answered early, with its commit log stalled, is held only by the witnesses' journals when
every process stops at once and every unsynced byte is thrown away (tools/lossyfs). After the
restart the owner recovers it from the witnesses at the ETag it was answered with: a witness
accepts a record only once it is durable. The front end's part is played by the test, as in
test_curp_recovery.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from common import rpc
from partition_layer.client import PartitionClient
from partition_layer.client_requests import put_request
from partition_layer.rows import etag_of
from tests.conftest import stamp_config
from tests.support.witness_calls import hinted, record_at, record_of, session_to
from tools.local_stamp import LocalStamp
from tools.lossyfs.mount import LossyMount, available, power_cut

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(available() is not None, reason=f"no FUSE: {available()}")]

ACCOUNT = "acct"
DEADLINE_S = 30.0
# Leases the restart waits out, short (as tests/probe/test_power_cut.py has them).
PARTITION = {"curp": True, "partition_lease_ttl_ms": 1000, "server_session_ttl_ms": 1000,
             "manager_lease_ttl_ms": 1000}


def test_an_early_answer_survives_a_power_cut_of_the_whole_stamp(
        lossy_stamp_factory: Callable[..., tuple[LocalStamp, LossyMount]]) -> None:
    stamp, mount = lossy_stamp_factory(
        stamp_config(4, 3, lock_servers=3, partition_managers=1, partition_servers=1,
                     partition=PARTITION), partition=PARTITION)
    hint = int(time.time() * 1_000_000) << 4
    with PartitionClient([r.address for r in stamp.partition_managers()],
                         stamp.config.partition) as pc:
        async def answered_early() -> None:
            current, addresses = await pc.aio.partition_map()
            entry = current.get(1)
            session = session_to(addresses[entry.server])
            try:
                taught = await session.call(hinted(put_request(
                    ACCOUNT, "group", "r0", b"v0", None, None, "t0"), hint, 0), 10)
                assert not taught.error and len(taught.witnesses) == 3, taught
                epoch, witnesses = taught.epoch, list(taught.witnesses)
                await asyncio.to_thread(rpc.arm_remote, addresses[entry.server],
                                        "ps.commit.before_append=delay:60000")
                early = hinted(put_request(ACCOUNT, "group", "r1", b"early", None, None,
                                           "t1"), hint + 1, epoch)
                assert await record_at(witnesses, entry.id,
                                       record_of(early, "t1", epoch)) == ["ACCEPTED"] * 3
                answer = await session.call(early, 10)
                assert not answer.error and answer.speculative, answer
            finally:
                await session.close()
        pc.run(answered_early())

    report = power_cut(stamp.pids(), mount)
    stamp.forget_dead()
    stamp.up()
    assert int(report["bytes_dropped"]) + int(report["entries_dropped"]) > 0, report
    with PartitionClient([r.address for r in stamp.partition_managers()],
                         stamp.config.partition) as pc:
        async def read_back() -> tuple[bytes, str]:
            return await asyncio.wait_for(pc.aio.get(ACCOUNT, "group", "r1"), DEADLINE_S)
        assert pc.run(read_back()) == (b"early", etag_of(hint + 1)), \
            "the write answered early was lost in the power cut, or came back changed"
        assert pc.get(ACCOUNT, "group", "r0")[0] == b"v0"
