"""`stamp bench geo-migrate` (issue 30): the migration of an account holding `--mb` of log
records (default 1,024: the issue's 1 GB) on a location of three small stamps of its own
(tools/local_location.py), under MIGRATE_WRITERS single-record SDK writers.

The account is filled through the SDK (LOADERS writers of RECORD_MB records, then until the
secondary has it all), then moved to west-2 (`tools/geo_migrate.migrate`): west-2 is
bootstrapped (the copy), a planned failover makes it the primary and, when the old primary
shares its region, east-1 is bootstrapped as its secondary anew (a second copy). Reported:
the migration's time, the bytes copied and their rate, the planned failover's own time, the
longest pause a writer saw between two acknowledged appends (target for the failover:
<= 2 s), and writer errors (none expected)."""

from __future__ import annotations

import asyncio
import base64
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stampsdk.aio import Client as AsyncClient

from tools.bench.geo import PauseWatch
from tools.bench.measure import row
from tools.geo_account import stamps_of
from tools.geo_migrate import migrate
from tools.local_location import LocalLocation

Progress = Callable[[str], None]
MIGRATE_WRITERS = 8
LOADERS = 8
RECORD_BYTES = 256 * 1024
TO = "west-2"
SHIPPED_TIMEOUT_S = 900.0


def run_geo_migrate(mb: int = 1024, progress: Progress = lambda _: None
                    ) -> list[dict[str, Any]]:
    directory = Path(tempfile.mkdtemp(prefix="stamp-bench-geo-migrate-"))
    location = LocalLocation(directory / "location")
    try:
        progress("starting a location of three stamps")
        location.up(stamps=3)
        return [asyncio.run(_migrate(location, mb, progress))]
    finally:
        location.down()
        shutil.rmtree(directory, ignore_errors=True)


async def _migrate(location: LocalLocation, mb: int, progress: Progress) -> dict[str, Any]:
    from tools.cmd_location import create_account
    from tools.geo_account import drain

    placement, account = await asyncio.to_thread(create_account, location, "mover")
    text = (f"Location={','.join(location.location_endpoints())};Account=mover;"
            f"Key={base64.b64encode(account.keys[0]).decode()}")
    filled = time.monotonic()
    await _fill(text, mb, progress)
    fill_s = time.monotonic() - filled
    progress(f"waiting until {placement.secondary} has the {mb} MB")
    primary = stamps_of(location)[placement.primary]
    await asyncio.to_thread(drain, primary, "mover", time.time(), SHIPPED_TIMEOUT_S)
    watch = PauseWatch(text, MIGRATE_WRITERS, "writer")
    await asyncio.sleep(1.0)
    progress(f"migrating {mb} MB from {placement.primary} to {TO} under "
             f"{MIGRATE_WRITERS} writers")
    report = await asyncio.to_thread(migrate, location, "mover", TO)
    await asyncio.sleep(2.0)  # writers go on at the new primary
    pauses = await watch.stop()
    return row({"account_mb": mb, "writers": MIGRATE_WRITERS, "from": placement.primary,
                "to": TO}, {
        "migration_s": round(report.seconds, 3),
        "copied_mb": round(report.copied_bytes / 2**20, 1),
        "copy_mb_per_s": round(report.copied_bytes / 2**20 / report.seconds, 1),
        "failover_s": round(report.failover_s, 3),
        **pauses,
        "steps": report.steps + [f"{s} dropped its copy" for s in report.dropped],
        "fill_s": round(fill_s, 3)})


async def _fill(text: str, mb: int, progress: Progress) -> None:
    """`mb` MB of RECORD_BYTES records over LOADERS logs."""
    records = mb * 2**20 // RECORD_BYTES
    done = 0

    async def loader(index: int) -> None:
        nonlocal done
        async with AsyncClient.from_connection_string(text, timeout_s=60) as client:
            for n in range(index, records, LOADERS):
                await client.append(f"fill-{index}", [n.to_bytes(8, "big") * (RECORD_BYTES // 8)])
                done += 1
                if done % 400 == 0:
                    progress(f"filled {done * RECORD_BYTES // 2**20} of {mb} MB")

    await asyncio.gather(*(loader(i) for i in range(LOADERS)))
