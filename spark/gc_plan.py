"""The gc job's decisions (§7 "gc"), pure: which copies on the extent nodes are orphans, which
extents no stream holds, and which of them a sweep may delete now (mark, then sweep).

Orphans are copies the stream manager does not count on:
- a replica of an extent it does not know (a create that failed before it committed, a
  deposed leader's spares), of an extent it deleted, or on a node that is not among the
  extent's replicas any more (a node back after its replicas were made again elsewhere);
- a fragment of an extent it does not know or deleted, one not recorded on that node at
  that index (a replaced fragment), or of an extent not erasure-coded (a conversion that
  stopped before recording it).
Extents the leader holds outside its state (its spares, copies and rebuilds under way:
`busy`) are never candidates. Unreferenced extents (known, not deleted, held by no stream)
are candidates too: the sweep has the stream manager delete them (refused atomically if a
stream holds one by then), then removes their copies.

Copies of an extent the stream manager deleted are swept without waiting: a deleted extent
never comes back (no transition leaves `deleted`, no stream can take one), so no grace
period protects anything there; it also lets a run finish the copies an earlier run left
when it was killed between deleting an extent and its copies.

Mark then sweep: a run marks every candidate it sees (keeping the time of a mark it made
before); a candidate is swept only if it was marked at least `grace_s` ago and is a candidate
still. A copy or extent that stopped being a candidate (created or taken into a stream after
the mark) loses its mark, and must be seen unused for a whole grace period again. Marks of
copies on nodes that did not answer are kept as they are (neither renewed nor swept).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

DELETED, ERASURE_CODED, SEALED = "deleted", "erasure_coded", "sealed"
REPLICA = -1  # Holding.index of a replica (fragments have their index)
EXTENT_DELETED = "its extent is deleted"


@dataclass(frozen=True)
class Holding:
    """A copy an extent node listed: a replica (index REPLICA) or a fragment."""

    node: str
    extent_id: int
    index: int = REPLICA

    @property
    def key(self) -> str:
        kind = "replica" if self.index == REPLICA else f"fragment{self.index}"
        return f"{kind}:{self.node}:{self.extent_id}"


@dataclass(frozen=True)
class Known:
    """An extent as the stream manager records it."""

    extent_id: int
    state: str
    replicas: tuple[str, ...] = ()
    fragments: tuple[str, ...] = ()
    streams: tuple[str, ...] = ()


def extent_key(extent_id: int) -> str:
    return f"extent:{extent_id}"


def orphan_reason(h: Holding, known: Known | None) -> str:
    """Why copy `h` is an orphan, or '' when the stream manager counts on it."""
    if known is None:
        return "unknown to the stream manager"
    if known.state == DELETED:
        return EXTENT_DELETED
    if h.index == REPLICA:
        return "" if h.node in known.replicas else "not among the extent's replicas"
    if known.state != ERASURE_CODED:
        return f"a fragment of a {known.state} extent (a conversion that stopped)"
    if h.index >= len(known.fragments) or known.fragments[h.index] != h.node:
        return "not the recorded fragment (replaced)"
    return ""


def candidates(holdings: Iterable[Holding], known: Mapping[int, Known], busy: set[int]
               ) -> dict[str, str]:
    """{key: why} of every orphan copy and every unreferenced extent (not busy)."""
    found: dict[str, str] = {}
    for h in holdings:
        if h.extent_id in busy:
            continue
        why = orphan_reason(h, known.get(h.extent_id))
        if why:
            found[h.key] = why
    for k in known.values():
        if k.state != DELETED and not k.streams and k.extent_id not in busy:
            found[extent_key(k.extent_id)] = "held by no stream"
    return found


def plan_sweep(marks: Mapping[str, float], found: Mapping[str, str], now: float,
               grace_s: float, silent_nodes: set[str] = frozenset(), marks_max: int = 0
               ) -> tuple[list[str], dict[str, float]]:
    """(keys to sweep now, the marks to keep): see the module. `silent_nodes`: nodes that did
    not answer (their copies' marks are kept as they were); `marks_max` (0: no bound) keeps
    the oldest marks when there are more."""
    new_marks = {key: marks.get(key, now) for key in found}
    for key, at in marks.items():
        if key not in new_marks and _node_of(key) in silent_nodes:
            new_marks[key] = at
    if marks_max and len(new_marks) > marks_max:
        oldest = sorted(new_marks.items(), key=lambda kv: (kv[1], kv[0]))[:marks_max]
        new_marks = dict(oldest)
    sweep = sorted(key for key, why in found.items()
                   if why == EXTENT_DELETED or (key in marks and now - marks[key] >= grace_s))
    return sweep, new_marks


def _node_of(key: str) -> str:
    parts = key.split(":")
    return parts[1] if len(parts) == 3 else ""
