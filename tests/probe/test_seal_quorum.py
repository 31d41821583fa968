"""A seal is decided only from enough replicas that its length survives the loss of any one
of them (issue 15 hole 4), on real processes: two of three replicas frozen (SIGSTOP), the
stream manager does not seal at the lone replica's length; when one more answers the seal
completes at a length both hold, the last one is brought to it when it comes back, and every
acknowledged append reads back after the primary is killed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable

import pytest

from common.errors import StampError, Unavailable
from stream_layer.client import AsyncStreamClient
from stream_layer.framing import Location
from tests.support.streams import assert_all_readable, client_for
from tests.support.waiting import wait_for
from tools.local_stamp import LocalStamp

# serial: its bounds are timings (or it freezes processes); `make test` runs it alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

StampFactory = Callable[..., LocalStamp]


async def _sealed_at(client: AsyncStreamClient, address: str, extent_id: int,
                     length: int) -> bool:
    return await client.extents.commit_length(address, extent_id, timeout_s=2) == (length,
                                                                                  True)


def test_seal_waits_for_two_replicas_and_survives_the_loss_of_either(
        stamp_factory: StampFactory) -> None:
    # Nodes stay alive in the stream manager's eyes (no dead_after) so that only the seal
    # request under test seals the extent; the client gives up on a seal after 3 s.
    stamp = stamp_factory(6, 3, stream_manager={"dead_after_ms": 600_000,
                                                "leader_wait_ms": 3000})

    async def scenario() -> None:
        client = client_for(stamp)
        stream = await client.create_stream("log")
        acked: list[tuple[Location, bytes]] = []
        for i in range(20):
            block = f"acked-{i}|".encode().ljust(500, b".")
            acked.append(((await stream.append([block]))[0], block))
        extent = stream.extents[-1]
        extent_id = extent.extent_id
        primary, *secondaries = extent.addresses
        acked_end = max(loc.offset + loc.length for loc, _ in acked)
        frozen = [stamp.record(stamp.name_of(a)).pid for a in secondaries]
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        try:
            # The primary journals an append its frozen secondaries never get: it alone
            # holds bytes past every acknowledged one.
            unacked = asyncio.ensure_future(client.extents.append(primary, extent_id,
                                                                  [b"unacked".ljust(500)]))

            async def primary_ahead() -> int | None:
                length, _ = await client.extents.commit_length(primary, extent_id)
                return length if length > acked_end else None
            primary_length = await wait_for(primary_ahead, 15, "the primary to run ahead")

            with pytest.raises(Unavailable, match="needs 2"):
                await client.sm.seal_extent(extent_id)
            still = await client.sm.get_extent(extent_id)
            assert still.state == "open", f"sealed from one replica at {still.sealed_length}"

            os.kill(frozen[0], signal.SIGCONT)  # one more replica answers
            sealed = await wait_for(lambda: client.sm.seal_extent(extent_id), 30,
                                    "the seal to complete with two replicas")
            length = sealed.sealed_length
            assert acked_end <= length <= primary_length
            for address in (primary, secondaries[0]):
                await wait_for(lambda a=address: _sealed_at(client, a, extent_id, length), 30,
                               f"{address} sealed at {length}")
        finally:
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
        # The last replica comes back and is brought to the sealed length.
        await wait_for(lambda: _sealed_at(client, secondaries[1], extent_id, length), 40,
                       "the returning replica sealed at the recorded length")
        images = {await client.extents.read_frames(a, extent_id, 0, length)
                  for a in extent.addresses}
        assert len(images) == 1, "sealed replicas differ"
        with contextlib.suppress(StampError, TimeoutError):
            # Acknowledged only if every replica had it before the seal fenced it: then it
            # lies below the sealed length, and must read back like any other.
            acked.append(((await asyncio.wait_for(unacked, 30))[0],
                          b"unacked".ljust(500)))

        # Either replica that decided the seal may be lost: here the primary.
        stamp.kill(stamp.name_of(primary))
        reopened = await client.open_stream("log")
        await assert_all_readable(reopened, acked)
        # And the stream is not stuck: it continues on a new extent.
        (loc,) = await reopened.append([b"after the seal"])
        assert loc.extent_id != extent_id
        await client.close()
    asyncio.run(scenario())
