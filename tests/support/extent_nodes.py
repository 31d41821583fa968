"""Extent nodes of a running stamp, spoken to directly: their addresses, a new extent
replicated on chosen nodes, a sealed replica brought back, and what each node holds."""

from __future__ import annotations

from common.ids import random_extent_id
from stream_layer.client import AsyncStreamClient
from stream_layer.extent_client import AsyncExtentClient
from tools.chaos.extents import read_image
from tools.local_stamp import LocalStamp


def addresses(stamp: LocalStamp) -> list[str]:
    return [n.address for n in stamp.extent_nodes()]


async def new_extent(client: AsyncExtentClient, replicas: list[str]) -> int:
    extent_id = random_extent_id()
    await client.create_replicated(extent_id, replicas)
    return extent_id


async def rejoin_sealed(client: AsyncExtentClient, address: str, extent_id: int, length: int,
                        sealed_on: list[str], image: bytes) -> None:
    """A replica back after its extent was sealed without it: sealed at the same length, it
    holds the same bytes (invariant 2)."""
    await client.wait_serving(address)
    assert await client.seal(address, extent_id, length, sealed_on) == length
    assert await client.commit_length(address, extent_id) == (length, True)
    assert await read_image(client, address, extent_id, length) == image


async def holdings(stamp: LocalStamp, client: AsyncStreamClient) -> dict[str, set[int]]:
    """Replicas each live extent node holds."""
    return {n.name: {e.extent_id for e in await client.extents.list_extents(n.address)}
            for n in stamp.extent_nodes() if stamp.alive(n.name)}
