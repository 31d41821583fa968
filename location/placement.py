"""Where an account lives (issue 30, WAS §2 "Location Service"): pure placement, no I/O.

A location knows its stamps (name, region, front-end endpoints, capacity and use) and, per
account, a primary stamp, which takes its writes, and a secondary stamp in another region,
which the primary replicates to asynchronously. `choose_stamps` picks both for a new
account: the primary by load, the secondary by load among the stamps of other regions, so
that losing a region never loses both copies.

Load is the share of a stamp's capacity in use, in whole percent (a few megabytes more on a
fresh stamp say nothing of its load); between stamps equally used, the one primary for fewer
accounts; then by name, so the choice is deterministic (tests, and two locations computing
the same answer)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from common.errors import InvalidArgument, Unavailable

STAMP_NAME = re.compile(r"[a-z][a-z0-9-]{0,62}")
REGION_NAME = STAMP_NAME
ENDPOINTS_MAX = 64
# An account's secondary as it is (issue 30): live (replicated to), bootstrapping (being
# copied to), unavailable (not replicated to: its copy is behind or diverged, as an old
# primary's after an unplanned failover; only a bootstrap makes it live again, so nothing
# ships to it, the primary's commit log is not kept for it, and no failover goes to it).
SECONDARY_STATES = ("live", "bootstrapping", "unavailable")


def check_stamp_name(name: str) -> str:
    if not STAMP_NAME.fullmatch(name):
        raise InvalidArgument(f"bad stamp name {name!r}: lowercase letters, digits and '-', "
                              "starting with a letter, at most 63 characters")
    return name


@dataclass(frozen=True)
class StampInfo:
    """A stamp as the location knows it. `capacity_bytes` 0: not reported yet."""

    name: str
    region: str
    front_ends: tuple[str, ...]
    capacity_bytes: int = 0
    used_bytes: int = 0
    # Its front ends' Azure Blob REST doors, each "SCHEME://HOST:PORT" (none: not reported)
    blob_endpoints: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_stamp_name(self.name)
        if not REGION_NAME.fullmatch(self.region):
            raise InvalidArgument(f"bad region name {self.region!r}")
        if not 0 < len(self.front_ends) <= ENDPOINTS_MAX:
            raise InvalidArgument(f"stamp {self.name} needs 1 to {ENDPOINTS_MAX} front-end "
                                  "endpoints")
        if len(self.blob_endpoints) > ENDPOINTS_MAX:
            raise InvalidArgument(f"stamp {self.name} has at most {ENDPOINTS_MAX} blob "
                                  "endpoints")
        if self.capacity_bytes < 0 or self.used_bytes < 0:
            raise InvalidArgument("capacity and use are not negative")

    def used_percent(self) -> int:
        """The share of its capacity in use, in whole percent (0 when not reported)."""
        return 100 * self.used_bytes // self.capacity_bytes if self.capacity_bytes else 0

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> StampInfo:
        data = json.loads(raw)
        return cls(name=data["name"], region=data["region"],
                   front_ends=tuple(data["front_ends"]),
                   capacity_bytes=int(data.get("capacity_bytes", 0)),
                   used_bytes=int(data.get("used_bytes", 0)),
                   blob_endpoints=tuple(data.get("blob_endpoints", ())))


@dataclass(frozen=True)
class AccountPlacement:
    """An account's stamps. `epoch` grows with every change of roles (a failover or a
    migration), so a stamp can tell an old placement from a new one."""

    account: str
    primary: str
    secondary: str
    secondary_state: str = "bootstrapping"
    epoch: int = 1

    def __post_init__(self) -> None:
        if self.primary == self.secondary:
            raise InvalidArgument("an account's primary and secondary are two stamps")
        if self.secondary_state not in SECONDARY_STATES:
            raise InvalidArgument(f"bad secondary state {self.secondary_state!r}")

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> AccountPlacement:
        data = json.loads(raw)
        return cls(account=data["account"], primary=data["primary"],
                   secondary=data["secondary"], secondary_state=data["secondary_state"],
                   epoch=int(data["epoch"]))


def choose_stamps(stamps: Iterable[StampInfo], accounts: Mapping[str, int]
                  ) -> tuple[StampInfo, StampInfo]:
    """(primary, secondary) for a new account, given the location's stamps and how many
    accounts each is primary for. Raises Unavailable when the location has no stamp, or
    none in a region other than the primary's: an account is never placed without a copy
    in another region."""
    ranked = sorted(stamps, key=lambda s: (s.used_percent(), accounts.get(s.name, 0), s.name))
    if not ranked:
        raise Unavailable("the location has no stamp: register one first")
    primary = ranked[0]
    secondary = next((s for s in ranked if s.region != primary.region), None)
    if secondary is None:
        raise Unavailable(f"every stamp of the location is in region {primary.region}: an "
                          "account needs a secondary stamp in another region")
    return primary, secondary
