"""Moving accounts off stamps past the capacity watermark (issue 30), on a location of this
machine: one round, `balance_once`, which `stamp location balance` runs by hand and the
location server runs on its own every interval (location/server_main.py `--balance-location`).

A round: every stamp is registered anew with its use now (tools/local_location.py); each
account's size is estimated at its primary (the `size_bytes` of the partitions holding its
keys, a partition's shared evenly among the accounts it holds keys of: partitions do not
count bytes per account); location/watermark.py plans the moves; the first `moves_max` of
them are made, each a migration (tools/geo_migrate.py), one after the other. A stamp's use
goes down once the copies it dropped are collected (`stamp job gc`), so a round soon after
would still see it over the watermark: the location server rests a stamp it moved an account
off for REST_S (about the gc job's interval) before it sheds more.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable

from common.errors import StampError
from location.placement import AccountPlacement
from location.watermark import WATERMARK_PERCENT, Plan, plan_moves
from partition_layer import keys
from tools.geo_account import overlaps, server_loads, stamps_of
from tools.geo_migrate import MigrationReport, migrate
from tools.local_location import LocalLocation
from tools.progress import SILENT, Progress

log = logging.getLogger(__name__)

MOVES_PER_ROUND = 1
REST_S = 1800.0


def balance_once(location: LocalLocation, watermark_percent: int = WATERMARK_PERCENT,
                 moves_max: int = MOVES_PER_ROUND, progress: Progress = SILENT,
                 resting: Collection[str] = ()) -> tuple[Plan, list[MigrationReport]]:
    """One round (module docstring): the plan, and the migrations made. `resting`: stamps
    that shed nothing this round (location/watermark.py)."""
    infos = location.register()
    with location.store_client() as store:
        placements = store.placements()
    sizes = asyncio.run(account_sizes(location, placements))
    plan = plan_moves(infos, placements, sizes, watermark_percent, resting)
    made = []
    for move in plan.moves[:moves_max]:
        progress.phase(f"{move.source} is over {watermark_percent}% used: moving "
                       f"{move.account} ({move.account_bytes:,} bytes) to {move.to}")
        log.info("%s is over the %d%% watermark: migrating %s (%d bytes) to %s", move.source,
                 watermark_percent, move.account, move.account_bytes, move.to)
        made.append(migrate(location, move.account, move.to, progress))
    return plan, made


async def account_sizes(location: LocalLocation, placements: Iterable[AccountPlacement]
                        ) -> dict[str, int]:
    """Each account's estimated bytes at its primary (module docstring); an account whose
    primary does not answer is left out (it is not moved this round)."""
    stamps = stamps_of(location)
    by_primary: dict[str, list[str]] = {}
    for placement in placements:
        by_primary.setdefault(placement.primary, []).append(placement.account)
    sizes: dict[str, int] = {}
    for stamp_name, accounts in by_primary.items():
        try:
            partitions = [p for _, load in await server_loads(stamps[stamp_name])
                          for p in load.partitions]
        except StampError as exc:
            log.warning("stamp %s did not say its partitions' sizes: %s", stamp_name, exc)
            continue
        spans = {a: (keys.account_prefix(a), keys.prefix_end(keys.account_prefix(a)))
                 for a in accounts}
        for partition in partitions:
            holding = [a for a, (low, high) in spans.items()
                       if overlaps(partition.range, low, high)]
            for account in holding:
                sizes[account] = sizes.get(account, 0) + partition.size_bytes // len(holding)
    return sizes
