"""CURP end to end (issue 32): a stamp with the fast path on, SDK writers appending to many
logs and putting distinct rows through a front end. Most writes are acknowledged on the
owner's early answer and three witnesses' acceptances; then the owner's commit log stalls,
writes go on being acknowledged early, and the owner is SIGKILLed. Every acknowledged write
is at the new owner afterwards: each append at its sequence number, each row with its value
and the ETag its writer was given (curp.py steps 3, 4 and 7)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from stampsdk import aio
from stampsdk.errors import StampError

from common import rpc
from partition_layer.client import PartitionClient
from tests.support.waiting import wait_until
from tools.chaos.extents import read_whole_log
from tools.local_stamp import LocalStamp
from tools.scrape import scrape

# Serial (run alone by make test): with a second stamp's test beside it, witnesses' verdicts
# missed even a 250 ms wait often enough that no write was acknowledged early once the log
# stalled (twice in three make test runs); alone it never failed.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

StampFactory = Callable[..., LocalStamp]
WRITERS = 8
LOGS = 32
TIMEOUT_S = 60.0
PHASE_WRITES = 150  # acknowledged writes each phase waits for
# Once the log stalls, only the blocks the commit pipeline holds are decided (and their hinted
# writes answered early): four, by default, were too few for five early answers under load.
PARTITION = {"curp": True, "commit_pipeline_depth": 16}
# A witness silent past the front end's timeout sends the write to a sync, which a stalled
# log never finishes: 50 ms (the default) is too short on a loaded machine (as in
# test_curp_witness_faults.py).
FRONT_END = {"curp": True, "curp_witness_timeout_ms": 250}


def fast_acks(stamp: LocalStamp) -> float:
    samples = asyncio.run(scrape(stamp.record("fe-1").metrics_address, 5.0))
    return samples.value("stamp_fe_curp_writes_total", answer="fast")


def test_writes_acknowledged_early_survive_the_owners_sigkill(
        stamp_factory: StampFactory) -> None:
    stamp = stamp_factory(3, 3, lock_servers=3, partition_managers=1, partition_servers=2,
                          front_ends=1, partition=PARTITION, front_end=FRONT_END)
    text = stamp.admin_connection_string_file.read_text().strip()
    appended: list[tuple[str, int, bytes]] = []
    put: dict[str, tuple[bytes, str]] = {}
    stop = threading.Event()

    async def load() -> None:
        client = aio.Client.from_connection_string(text, timeout_s=TIMEOUT_S)

        async def writer(index: int) -> None:
            number = 0
            while not stop.is_set():
                log = f"log-{(index + number * WRITERS) % LOGS}"
                record = f"w{index}-n{number}".encode()
                row, value = f"row-{index}-{number}", f"v{index}-{number}".encode()
                try:
                    appended.append((log, await client.append(log, [record]), record))
                    put[row] = (value, await client.put("group", row, value))
                except StampError:
                    pass  # in doubt or refused: not acknowledged, nothing is checked of it
                number += 1
        try:
            await asyncio.gather(*(writer(i) for i in range(WRITERS)))
        finally:
            await client.close()

    runner = threading.Thread(target=lambda: asyncio.run(load()))
    runner.start()
    try:
        wait_until(lambda: len(appended) >= PHASE_WRITES, TIMEOUT_S, "writes before the fault")
        assert fast_acks(stamp) > 0, "no write was acknowledged on the fast path"
        with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
            current, addresses = pc.partition_map()
            owner = current.get(1).server
            # Fast writes flowing right now: a front end that just saw a witness call fail
            # keeps records off its witnesses for a while, and the stalled log takes only
            # the few blocks its pipeline holds (found by the witness-fault probes).
            flowing = fast_acks(stamp)
            wait_until(lambda: fast_acks(stamp) >= flowing + 3, TIMEOUT_S,
                       "fast writes flowing before the stall")
            # Its commit log stalls: writes answered early from now on are on the
            # witnesses alone when the owner dies.
            rpc.arm_remote(addresses[owner], "ps.commit.before_append=delay:60000")
            fast_before = fast_acks(stamp)
            wait_until(lambda: fast_acks(stamp) >= fast_before + 2, TIMEOUT_S,
                       "writes acknowledged with the log stalled")
            stamp.kill(owner)
            at = len(appended)
            wait_until(lambda: len(appended) >= at + PHASE_WRITES, TIMEOUT_S,
                       "writes after the owner's kill")
    finally:
        stop.set()
        runner.join(TIMEOUT_S)
    assert not runner.is_alive()

    with PartitionClient.from_stamp(str(stamp.data_dir)) as pc:
        logs: dict[str, dict[int, bytes]] = {}
        for log, seq, record in appended:
            if log not in logs:
                logs[log] = dict(read_whole_log(pc, "admin", log))
            assert logs[log].get(seq) == record, f"{log} lost {record!r} acknowledged at {seq}"
        for row, (value, etag) in put.items():
            assert pc.get("admin", "group", row) == (value, etag), f"row {row} lost or changed"
