"""Which accounts a location moves off a stamp that passed its capacity watermark (issue 30;
WAS moves accounts when a stamp is about 70% used): pure planning, no I/O. The moves are
made by tools/geo_balance.py (a migration each: tools/geo_migrate.py).

Contract of `plan_moves`:
- A stamp is over the watermark when its use (location/placement.py's `used_percent`) is at
  least `watermark_percent`; stamps that never reported a capacity are never over it.
- Each over stamp sheds the accounts it is the primary of, the largest first, until its use,
  less what it shed, is under the watermark (or nothing it may move is left).
- An account moves to a stamp of its primary's region that is neither its primary nor its
  secondary (its secondary then stays the one of the other region, and the stamp moved off
  drops its copy: the only way its use goes down), the least used such stamp whose use,
  with what the plan already sends it plus the account, stays under the watermark. None
  such: the account stays (and the plan says so in `stuck`).
- Accounts whose secondary is not live are left alone (a migration needs a live one), and
  so are accounts of unknown size (not in `account_bytes`: their primary did not answer).
- Stamps in `resting` shed nothing: a stamp's use is what its disks hold, which goes down
  only once the copies it dropped are collected (`stamp job gc`); until then it would look
  as full as before and shed account after account.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from location.placement import AccountPlacement, StampInfo

WATERMARK_PERCENT = 70


@dataclass(frozen=True)
class Move:
    account: str
    source: str
    to: str
    account_bytes: int


@dataclass
class Plan:
    moves: list[Move] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)  # accounts over stamps with nowhere to go
    over: list[str] = field(default_factory=list)  # stamps over the watermark


def plan_moves(stamps: Mapping[str, StampInfo], placements: Iterable[AccountPlacement],
               account_bytes: Mapping[str, int], watermark_percent: int = WATERMARK_PERCENT,
               resting: Collection[str] = ()) -> Plan:
    """The moves that bring stamps under the watermark (module contract)."""
    plan = Plan()
    added: dict[str, int] = {}  # bytes the plan sends each stamp
    by_primary: dict[str, list[AccountPlacement]] = {}
    for placement in placements:
        by_primary.setdefault(placement.primary, []).append(placement)
    for name, info in sorted(stamps.items()):
        if not info.capacity_bytes or info.used_percent() < watermark_percent \
                or name in resting:
            continue
        plan.over.append(name)
        shed = 0
        movable = [p for p in by_primary.get(name, [])
                   if p.secondary_state == "live" and p.account in account_bytes]
        for placement in sorted(movable, key=lambda p: (-account_bytes[p.account],
                                                        p.account)):
            if _percent(info, info.used_bytes - shed) < watermark_percent:
                break
            size = account_bytes[placement.account]
            to = _target(stamps, placement, size, added, watermark_percent)
            if to is None:
                plan.stuck.append(placement.account)
                continue
            plan.moves.append(Move(placement.account, name, to, size))
            added[to] = added.get(to, 0) + size
            shed += size
    return plan


def _target(stamps: Mapping[str, StampInfo], placement: AccountPlacement, size: int,
            added: Mapping[str, int], watermark_percent: int) -> str | None:
    region = stamps[placement.primary].region
    fits = [info for info in stamps.values()
            if info.region == region and info.name not in (placement.primary,
                                                           placement.secondary)
            and info.capacity_bytes
            and _percent(info, info.used_bytes + added.get(info.name, 0) + size)
            < watermark_percent]
    if not fits:
        return None
    return min(fits, key=lambda i: (_percent(i, i.used_bytes + added.get(i.name, 0)),
                                    i.name)).name


def _percent(info: StampInfo, used_bytes: int) -> float:
    return 100 * used_bytes / info.capacity_bytes
