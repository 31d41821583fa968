"""What a maintenance job reports (§7): one `ItemResult` per item (an extent), and the run's
totals (`summarize`). Plain values that travel from Spark tasks to the driver as dicts; the
totals are pure, so the summary table and `stamp job ls` agree by construction."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any

OK = "ok"                # checked (or done), nothing wrong
REPAIRED = "repaired"    # scrub: found bad copies, and fixed all of them
DAMAGED = "damaged"      # scrub: found bad copies it did not fix (dry run, no good copy...)
DONE = "done"            # ec / gc: the item was converted / deleted
WOULD = "would"          # a dry run: the item would be converted / deleted / repaired
SKIPPED = "skipped"      # not for this job now (not sealed yet, policy not due, ...)
FAILED = "failed"        # an error; a rerun retries it
STATUSES = (OK, REPAIRED, DAMAGED, DONE, WOULD, SKIPPED, FAILED)


@dataclass(frozen=True)
class ItemResult:
    item: int            # the extent id (the partition id of a "partition" item)
    status: str
    copies: int = 0      # replicas / fragments looked at
    bytes: int = 0       # bytes verified (scrub) or converted / reclaimed (ec / gc)
    found: int = 0       # bad copies found
    fixed: int = 0       # bad copies repaired
    detail: str = ""
    kind: str = "extent"  # or "partition": gc's first stage (spark/gc_release.py)
    released: int = 0    # gc: extents the partition dropped from its streams
    released_bytes: int = 0  # their bytes (one replica's worth; the sweep reclaims them)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ItemResult:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})


def summarize(results: Iterable[ItemResult]) -> dict[str, int]:
    """Totals of a run: items, each status's count, copies, bytes, found, fixed, and the
    extents (and bytes) partitions released from their streams (gc)."""
    results = list(results)
    counts = Counter(r.status for r in results)
    return {"items": len(results), **{s: counts.get(s, 0) for s in STATUSES},
            "copies": sum(r.copies for r in results), "bytes": sum(r.bytes for r in results),
            "found": sum(r.found for r in results), "fixed": sum(r.fixed for r in results),
            "released": sum(r.released for r in results),
            "released_bytes": sum(r.released_bytes for r in results)}
