"""The commands of the stream manager's state machine (state.py): plain values, the entries of
its Raft log. Each says what changes; `StreamManagerState.apply` decides whether it may."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CreateStream:
    name: str


@dataclass(frozen=True)
class DeleteStream:
    name: str


@dataclass(frozen=True)
class RenameStream:
    old: str
    new: str


@dataclass(frozen=True)
class ReserveExtentIds:
    """Hand the leader a block of extent ids, so it can create replicas before it commits."""

    count: int


@dataclass(frozen=True)
class AddExtent:
    """Append a new open extent to a stream. `expect_last` guards against a racing change:
    the stream's last extent must be it (0: the stream must be empty)."""

    stream: str
    extent_id: int
    replicas: tuple[str, ...]
    expect_last: int
    epoch: int = 0  # the writer's epoch: refused once a newer writer fenced the stream


@dataclass(frozen=True)
class FenceStream:
    """Make `epoch` the stream's writer epoch; refused if a newer one holds it already."""

    name: str
    epoch: int


@dataclass(frozen=True)
class SealExtent:
    extent_id: int
    length: int
    # When the leader decided the seal (its wall clock, unix seconds; 0: unknown, an older
    # log entry): erasure-coding policies count their "after" from it. In the command, so
    # every replica records the same time.
    at: float = 0.0


@dataclass(frozen=True)
class Concat:
    """Append `source`'s extents to `target` (pointers only). Every extent of `source` and
    the last extent of `target` must be sealed: only a stream's last extent may be open."""

    target: str
    source: str


@dataclass(frozen=True)
class CreateStreamFrom:
    """A new stream holding exactly `extents` (pointers, in order): each must exist, none
    may be open or deleted, none may repeat. Split and merge build the children's streams
    with it inside one MultiModify (with FenceStream guards on the parents' streams and
    DeleteStream of them), so either the parent's streams or the children's exist."""

    name: str
    extents: tuple[int, ...]


@dataclass(frozen=True)
class RetireStream:
    """Delete a stream and retire its name for good: CreateStream and CreateStreamFrom of a
    retired name are refused (PreconditionFailed). A split or merge retires its parents'
    streams, so a late Load of a parent can never bring it back empty."""

    name: str


@dataclass(frozen=True)
class MultiModify:
    """Several changes applied atomically: all or none (split and merge use this)."""

    commands: tuple[Any, ...]


@dataclass(frozen=True)
class RegisterNode:
    name: str
    address: str
    fault_domain: str
    upgrade_domain: str
    capacity_bytes: int


@dataclass(frozen=True)
class NodeDead:
    name: str


@dataclass(frozen=True)
class NodeAlive:
    name: str


@dataclass(frozen=True)
class ReplaceReplica:
    """A sealed extent's replica on `old` was copied to `new`."""

    extent_id: int
    old: str
    new: str


@dataclass(frozen=True)
class RecordErasureCoding:
    """A sealed extent's k+m fragments are written to `fragments` (node per fragment, data
    then parity) and verified: it becomes erasure-coded. Its replicas stay listed until
    ReleaseReplicas, so a conversion that stops in between knows what is left to delete."""

    extent_id: int
    fragments: tuple[str, ...]
    k: int
    m: int
    cuts: tuple[int, ...]
    crcs: tuple[int, ...]


@dataclass(frozen=True)
class ReleaseReplicas:
    """The replicas of an erasure-coded extent on `nodes` were deleted."""

    extent_id: int
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class ReplaceFragment:
    """Fragment `index` of an erasure-coded extent was rebuilt from `old` onto `new`."""

    extent_id: int
    index: int
    old: str
    new: str


@dataclass(frozen=True)
class SetStreamPolicy:
    """Set what the ec job does with the sealed extents of the streams `pattern` names (a
    stream name, or an fnmatch pattern such as `p-*.rows`): RS(ec_k, ec_m) once sealed for
    `after_s` seconds. ec_k == 0 removes the policy."""

    pattern: str
    ec_k: int
    ec_m: int
    after_s: float


@dataclass(frozen=True)
class DeleteExtent:
    """Mark an extent no stream references as deleted (garbage collection)."""

    extent_id: int


@dataclass(frozen=True)
class DropExtents:
    """Garbage collection (§7 "gc", issue 18): take `extents` out of stream `stream`, whose
    writer (the partition owning it) no longer needs them. Pointers only: an extent another
    stream still holds (a split's sibling) stays there; one no stream holds any more is left
    to the orphan sweep, which deletes it after its grace period.

    Safe when stale: an id no longer in the stream is skipped (dropped already, by a retry or
    an earlier run). Refused, changing nothing: below the stream's writer epoch (Fenced: a
    deposed owner decides nothing), and for the stream's last extent or an open one
    (PreconditionFailed: appends go there; only sealed extents are ever dropped)."""

    stream: str
    extents: tuple[int, ...]
    epoch: int = 0
