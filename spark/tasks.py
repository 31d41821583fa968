"""The executor side of every job (§7): a Spark task takes its slice of the items and runs the
job's per-item function on each, in one event loop with one set of clients. Only item ids go
in and small result dicts come out: the bytes stay on the extent nodes.

Contract: `run_items` never raises for one item's failure — a StampError becomes that item's
FAILED result (a rerun retries it) — so one bad extent does not fail the Spark task and
repeat the others."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

from common import faults
from common.errors import StampError
from spark.job_context import JobContext
from spark.job_result import FAILED, ItemResult

log = logging.getLogger(__name__)

GC_RELEASE = "gc-release"  # the gc job's first stage (spark/gc_release.py)

# An item is an extent id, or a tuple that starts with one (the ec job's (id, k, m)); gc's
# first stage has partitions: (partition id, its server's address).
ItemFunction = Callable[[JobContext, Any], Awaitable[ItemResult]]


def item_id(item: Any) -> int:
    return int(item[0]) if isinstance(item, tuple | list) else int(item)


def item_function(job: str) -> ItemFunction:
    """The per-item function of `job` (imported here: a task imports only its job)."""
    if job == "scrub":
        from spark.scrub import scrub_extent

        return scrub_extent
    if job == "ec":
        from spark.ec import ec_extent

        return ec_extent
    if job == "gc":
        from spark.gc import gc_extent

        return gc_extent
    if job == GC_RELEASE:
        from spark.gc_release import release_partition

        return release_partition
    raise ValueError(f"unknown job {job!r}")


async def run_items_async(job: str, settings: dict[str, Any], items: Iterable[Any]
                          ) -> list[dict[str, Any]]:
    # STAMP_FAULTS: the crash tests stop a job half way, inside its tasks.
    faults.arm_from_env()
    work = item_function(job)
    ctx = JobContext.open(settings)
    slots = asyncio.Semaphore(ctx.limits.items_concurrent_per_task)

    async def one(item: Any) -> dict[str, Any]:
        async with slots:
            try:
                result = await work(ctx, item)
            except StampError as exc:
                log.warning("%s of item %d failed: %s", job, item_id(item), exc)
                result = ItemResult(item_id(item), FAILED,
                                    detail=f"{type(exc).__name__}: {exc}",
                                    kind="partition" if job == GC_RELEASE else "extent")
            return result.to_dict()
    try:
        return list(await asyncio.gather(*(one(item) for item in items)))
    finally:
        await ctx.close()


def run_items(job: str, settings: dict[str, Any], items: Iterable[Any]
              ) -> Iterator[dict[str, Any]]:
    """A Spark `mapPartitions` function: the results of `job` on this task's items."""
    return iter(asyncio.run(run_items_async(job, settings, list(items))))
