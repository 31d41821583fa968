"""frontend/blob_store.py's memory of containers, over a stand-in partition client: what it
saves in reads, and that it never outlives its TTL."""

from __future__ import annotations

import asyncio
from typing import Any

from common.clock import ManualClock
from common.config import FrontEndLimits
from common.errors import NotFound, Unavailable
from frontend import blob_model as model
from frontend.blob_model import BlobError, Container
from frontend.blob_store import BlobStore


class Rows:
    """The container rows of one account; each read waits until `release` is set."""

    def __init__(self) -> None:
        self.containers: dict[str, Container] = {"logs": Container("ab" * 8, 1)}
        self.reads = 0
        self.release = asyncio.Event()  # made inside the test's loop

    async def get(self, account: str, pname: str, row: Any) -> tuple[bytes, str]:
        assert pname == model.CONTAINERS_GROUP
        self.reads += 1
        await self.release.wait()
        if row not in self.containers:
            raise NotFound(row)
        return self.containers[row].encode(), '"1"'


def _store(rows: Rows, clock: ManualClock) -> BlobStore:
    return BlobStore(rows, FrontEndLimits(), clock)  # type: ignore[arg-type]


def test_concurrent_requests_share_one_read_of_a_container() -> None:
    asyncio.run(_concurrent_requests_share_one_read())


async def _concurrent_requests_share_one_read() -> None:
    rows, clock = Rows(), ManualClock()
    store = _store(rows, clock)
    waiting = [asyncio.create_task(store.container("acct", "logs")) for _ in range(16)]
    await asyncio.sleep(0)
    rows.release.set()
    found = await asyncio.gather(*waiting)
    assert rows.reads == 1 and {c.gen for c in found} == {"ab" * 8}
    await store.container("acct", "logs")  # remembered
    assert rows.reads == 1
    clock.advance(FrontEndLimits().blob_container_cache_ttl_ms / 1000)
    rows.containers.clear()  # deleted meanwhile: the memory of it ran out, it is read again
    results = await asyncio.gather(*(store.container("acct", "logs") for _ in range(8)),
                                   return_exceptions=True)
    assert rows.reads == 2
    assert all(isinstance(r, BlobError) and r.code == "ContainerNotFound" for r in results)


def test_a_failed_read_fails_its_waiters_and_the_next_request_reads_again() -> None:
    asyncio.run(_a_failed_read())


async def _a_failed_read() -> None:
    rows, clock = Rows(), ManualClock()
    store = _store(rows, clock)
    rows.release.set()

    async def broken(*args: Any) -> tuple[bytes, str]:
        rows.reads += 1
        raise Unavailable("the partition is moving")
    rows.get = broken  # type: ignore[method-assign]
    results = await asyncio.gather(*(store.container("acct", "logs") for _ in range(4)),
                                   return_exceptions=True)
    assert all(isinstance(r, Unavailable) for r in results) and rows.reads == 1
    del rows.get
    await store.container("acct", "logs")
    assert rows.reads == 2
