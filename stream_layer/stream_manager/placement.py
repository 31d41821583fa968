"""Where extent replicas go (§2): pure decisions, behind one small interface (Swift's ring).

- `place_extent`: `count` nodes in distinct fault domains, least loaded first;
- `place_replacement`: one node in a fault domain that does not already hold the extent.
Load is the number of replicas a node holds (from the replicated state) plus what the leader
has placed but not yet committed, so a burst of placements spreads out.

`SlowNodes` remembers the nodes that caused a seal (a writer found them past their
per-replica timeout: frozen, a slow disk, §2 gray failures): new extents keep off them for a
while, when the stamp has room.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from common.clock import Clock
from common.errors import Unavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Candidate:
    name: str
    fault_domain: str
    load: int


def place_extent(candidates: Iterable[Candidate], count: int) -> list[str]:
    """The least loaded node of each of the `count` least loaded fault domains; the least
    loaded of all first (it becomes the primary, which does the most work).

    With fewer healthy fault domains than `count` (a whole domain down), the rest are the
    least loaded other nodes: still `count` distinct nodes, so any one node can be lost,
    rather than a stamp that refuses every new extent."""
    ordered = sorted(candidates, key=lambda c: (c.load, c.name))
    best_per_domain: dict[str, Candidate] = {}
    for c in ordered:
        best_per_domain.setdefault(c.fault_domain, c)
    chosen = sorted(best_per_domain.values(), key=lambda c: (c.load, c.name))[:count]
    if len(chosen) < count:
        log.warning("only %d fault domains have healthy extent nodes: placing %d replicas on "
                    "distinct nodes", len(chosen), count)
        chosen += [c for c in ordered if c not in chosen][:count - len(chosen)]
    if len(chosen) < count:
        raise Unavailable(f"need {count} healthy extent nodes, have {len(ordered)}")
    return [c.name for c in chosen]


def place_replacement(candidates: Iterable[Candidate], keep: Collection[str],
                      domains_of: Mapping[str, str], exclude: Collection[str] = ()) -> str:
    """A node for a replica that replaces a lost one: outside the fault domains of the
    replicas that stay (`keep`), not one of `keep` or `exclude`, least loaded."""
    taken = {domains_of[h] for h in keep if h in domains_of}
    unusable = set(keep) | set(exclude)
    options = [c for c in candidates if c.name not in unusable and c.fault_domain not in taken]
    if not options:
        # Fewer healthy fault domains than replicas: settle for a distinct node.
        options = [c for c in candidates if c.name not in unusable]
    if not options:
        raise Unavailable(f"no healthy extent node can take another replica (keeping "
                          f"{sorted(keep)})")
    return min(options, key=lambda c: (c.load, c.name)).name


def place_fragments(candidates: Iterable[Candidate], count: int) -> list[str]:
    """`count` distinct nodes for an erasure-coded extent's fragments, spread as evenly over
    fault domains as the stamp allows (a round robin over the domains, least loaded first):
    with 9 nodes in 3 domains, RS(6,3) puts 3 fragments in each, so losing a whole domain
    loses m fragments and the extent stays readable."""
    by_domain: dict[str, list[Candidate]] = {}
    for c in sorted(candidates, key=lambda c: (c.load, c.name)):
        by_domain.setdefault(c.fault_domain, []).append(c)
    chosen: list[str] = []
    while len(chosen) < count and any(by_domain.values()):
        # Each round takes the least loaded remaining node of every domain that has one.
        heads = sorted((nodes[0] for nodes in by_domain.values() if nodes),
                       key=lambda c: (c.load, c.name))
        for c in heads[:count - len(chosen)]:
            chosen.append(c.name)
            by_domain[c.fault_domain].pop(0)
    if len(chosen) < count:
        raise Unavailable(f"erasure coding needs {count} healthy extent nodes, have "
                          f"{len(chosen)}")
    return chosen


def place_fragment_replacement(candidates: Iterable[Candidate], keep: Collection[str],
                               domains_of: Mapping[str, str]) -> str:
    """A node for a rebuilt fragment: not holding one of the extent's fragments (`keep`), in
    the fault domain with the fewest of them, least loaded."""
    per_domain: dict[str, int] = {}
    for name in keep:
        domain = domains_of.get(name, "")
        per_domain[domain] = per_domain.get(domain, 0) + 1
    options = [c for c in candidates if c.name not in set(keep)]
    if not options:
        raise Unavailable(f"no healthy extent node can take a fragment (holding: "
                          f"{sorted(keep)})")
    return min(options, key=lambda c: (per_domain.get(c.fault_domain, 0), c.load, c.name)).name


class SlowNodes:
    """Nodes found slow lately, each avoided for `avoid_s` after it was last found slow
    ("until it recovers": one that is still slow is found again at the next seal it holds up).
    Soft state on the leader, on an injected clock; bounded: one entry per node, expired
    entries dropped whenever one is added."""

    def __init__(self, avoid_s: float, clock: Clock) -> None:
        self.avoid_s = avoid_s
        self.clock = clock
        self._until: dict[str, float] = {}

    def mark(self, names: Iterable[str]) -> None:
        now = self.clock.monotonic()
        for name in names:
            if not self.slow(name):
                log.warning("extent node %s is slow: new extents avoid it for %.0f s", name,
                            self.avoid_s)
            self._until[name] = now + self.avoid_s
        self._until = {n: until for n, until in self._until.items() if until > now}

    def slow(self, name: str) -> bool:
        return self._until.get(name, 0.0) > self.clock.monotonic()

    def names(self) -> set[str]:
        now = self.clock.monotonic()
        return {n for n, until in self._until.items() if until > now}
