"""A loading owner's execution of its witnesses' records (partition_layer/witness_replay.py),
on in-memory streams: a write's own refusal is an answer like any other, but a write that
could not be executed (the lease ran out, say) fails the recovery, so the metadata goes on
naming the witnesses that hold it."""

from __future__ import annotations

import asyncio

import pytest

from common.config import PartitionLimits
from common.errors import Unavailable
from common.proto import partition_pb2 as pb
from common.proto import witness_pb2 as wpb
from partition_layer import witness_replay
from partition_layer.operations import LogSeal
from partition_layer.payload_crc import payload_crcs
from tests.support.partitions import serving_partition


def appended(pname: str, token: str) -> wpb.WitnessRecord:
    records = [b"r"]
    request = pb.Request(account="acct", pname=pname, version_hint=1 << 50, curp_epoch=1,
                         append=pb.AppendOp(records=records, crcs=payload_crcs(records),
                                            token=token))
    return wpb.WitnessRecord(token=token.encode(), epoch=1, payload=request.SerializeToString())


def test_a_refusal_of_its_own_is_an_answer_and_the_other_writes_are_executed() -> None:
    async def scenario() -> None:
        p = serving_partition(PartitionLimits())
        await p.committer.submit(LogSeal("acct", "sealed"), 64)
        p.recovering = True
        p.witnessed = [appended("sealed", "t1"), appended("open", "t2")]
        await witness_replay.recover(p)
        assert not p.recovering
        assert (await p.log_state("acct", "open")).next_seq == 1
        assert (await p.log_state("acct", "sealed")).next_seq == 0
        await p.stop("test over")
        await p.closed()
    asyncio.run(scenario())


def test_a_write_not_executed_fails_the_recovery() -> None:
    """The lease ran out: NotOwner is no answer of the write's. Going on would name a new
    set of witnesses without it — an acknowledged write lost."""
    async def scenario() -> None:
        valid = True
        p = serving_partition(PartitionLimits())
        p.lease_valid = lambda: valid
        p.recovering = True
        p.witnessed = [appended("open", "t1")]
        valid = False
        with pytest.raises(Unavailable, match="could not be executed"):
            await witness_replay.recover(p)
        assert p.recovering
        await p.stop("test over")
        await p.closed()
    asyncio.run(scenario())
