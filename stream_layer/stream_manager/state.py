"""The stream manager's replicated state machine (§2 "Stream manager"): pure, no I/O, no clock.

Everything that affects the stream namespace lives here, and changes only through `apply`,
which every replica runs on the same commands in the same (Raft log) order:
- streams: name -> ordered extent ids; only the last extent of a stream may be open;
- extents: replicas (node names, [0] the primary), state, sealed length, EC fragments;
- nodes: the extent node registry (address, fault domain, upgrade domain, capacity, alive);
- the extent id allocator;
- retired stream names (a split's or merge's parents), never created again.
An extent may be held by several streams (CreateStreamFrom: a split's children share their
parent's extents); it stays until no stream holds it (DeleteExtent refuses until then). A
stream's writer drops sealed extents it no longer needs (DropExtents, drop_handlers.py).

Contract: `apply(command)` returns a result or raises a StampError for a refused command, and
a refused command changes nothing — a MultiModify is all or none (an undo log restores every
record it touched). Records are immutable and replaced whole, which is what makes undo a
matter of putting old records back. Liveness (heartbeat times) is soft state on the leader,
not here: only its conclusions (NodeDead, NodeAlive) are commands.

The records and their transition table are in records.py, the commands in commands.py; both
are re-exported here, so `state.X` names every piece of the state machine. The erasure-coding
handlers are in erasure_handlers.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from common.errors import (
    AlreadyExists,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    StampError,
)
from stream_layer.stream_manager import drop_handlers, erasure_handlers
from stream_layer.stream_manager import policies as stream_policies
from stream_layer.stream_manager.commands import (
    AddExtent,
    Concat,
    CreateStream,
    CreateStreamFrom,
    DeleteExtent,
    DeleteStream,
    DropExtents,
    FenceStream,
    MultiModify,
    NodeAlive,
    NodeDead,
    RecordErasureCoding,
    RegisterNode,
    ReleaseReplicas,
    RenameStream,
    ReplaceFragment,
    ReplaceReplica,
    ReserveExtentIds,
    RetireStream,
    SealExtent,
    SetStreamPolicy,
)
from stream_layer.stream_manager.records import (
    ALIVE,
    DEAD,
    DELETED,
    ERASURE_CODED,
    EXTENT_IDS_RESERVED_MAX,
    EXTENT_TRANSITIONS,
    OPEN,
    SEALED,
    STREAM_NAME_BYTES_MAX,
    Extent,
    Node,
    Stream,
    StreamPolicy,
    check_epoch,
)

# Re-exported: every piece of the state machine is `state.X` to its users.
__all__ = [
    "ALIVE", "DEAD", "DELETED", "ERASURE_CODED", "EXTENT_IDS_RESERVED_MAX", "EXTENT_TRANSITIONS",
    "OPEN", "SEALED", "STREAM_NAME_BYTES_MAX", "AddExtent", "Concat", "CreateStream",
    "CreateStreamFrom", "DeleteExtent", "DeleteStream", "DropExtents", "Extent", "FenceStream",
    "MultiModify",
    "Node", "NodeAlive", "NodeDead", "RecordErasureCoding", "RegisterNode", "ReleaseReplicas",
    "RenameStream", "ReplaceFragment", "ReplaceReplica", "ReserveExtentIds", "RetireStream",
    "SealExtent", "SetStreamPolicy", "Stream", "StreamManagerState", "StreamPolicy",
    "check_epoch",
]


# ---- the state machine -----------------------------------------------------------------------

@dataclass
class StreamManagerState:
    streams: dict[str, Stream] = field(default_factory=dict)
    extents: dict[int, Extent] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    next_extent_id: int = 1
    # Names of streams a split or merge retired (RetireStream): never created again, so a
    # late loader of a parent partition cannot bring its streams back empty.
    retired: set[str] = field(default_factory=set)
    # Erasure-coding policies by stream name or pattern (SetStreamPolicy; the ec job).
    policies: dict[str, StreamPolicy] = field(default_factory=dict)
    _undo: list[Callable[[], None]] | None = field(default=None, repr=False, compare=False)

    def apply(self, command: Any) -> Any:
        """Apply one command; a refused command raises StampError and changes nothing."""
        handler = self._HANDLERS.get(type(command))
        if handler is None:
            raise InvalidArgument(f"unknown command {type(command).__name__}")
        if isinstance(command, MultiModify):
            return handler(self, command)
        self._undo = []
        try:
            return handler(self, command)
        except StampError:
            self._rollback()
            raise
        finally:
            self._undo = None

    # ---- records with undo -----------------------------------------------------------------

    def _put(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        if self._undo is not None:
            had, old = key in table, table.get(key)
            self._undo.append(lambda: table.__setitem__(key, old) if had else table.pop(key))
        table[key] = value

    def _remove(self, table: dict[Any, Any], key: Any) -> None:
        if self._undo is not None:
            old = table[key]
            self._undo.append(lambda: table.__setitem__(key, old))
        del table[key]

    def _retire(self, name: str) -> None:
        if self._undo is not None and name not in self.retired:
            self._undo.append(lambda: self.retired.discard(name))
        self.retired.add(name)

    def _rollback(self) -> None:
        assert self._undo is not None
        for undo in reversed(self._undo):
            undo()

    # ---- lookups ---------------------------------------------------------------------------

    def stream(self, name: str) -> Stream:
        stream = self.streams.get(name)
        if stream is None:
            raise NotFound(f"no stream named {name!r}")
        return stream

    def extent(self, extent_id: int) -> Extent:
        extent = self.extents.get(extent_id)
        if extent is None:
            raise NotFound(f"no extent {extent_id}")
        return extent

    def node(self, name: str) -> Node:
        node = self.nodes.get(name)
        if node is None:
            raise NotFound(f"no extent node named {name!r}")
        return node

    def references(self) -> dict[int, int]:
        """How many streams reference each extent (an extent may be shared after split)."""
        counts: dict[int, int] = {}
        for stream in self.streams.values():
            for extent_id in stream.extents:
                counts[extent_id] = counts.get(extent_id, 0) + 1
        return counts

    # ---- handlers --------------------------------------------------------------------------

    def check_new_name(self, name: str) -> None:
        """A stream may be created under `name`: valid, not in use, never retired."""
        if not name or len(name.encode()) > STREAM_NAME_BYTES_MAX:
            raise InvalidArgument(f"a stream name has 1..{STREAM_NAME_BYTES_MAX} bytes")
        if name in self.streams:
            raise AlreadyExists(f"stream {name!r} exists")
        if name in self.retired:
            raise PreconditionFailed(f"stream name {name!r} was retired (its partition was "
                                     f"split or merged): it is never created again")

    def _create_stream(self, c: CreateStream) -> Stream:
        self.check_new_name(c.name)
        stream = Stream(c.name)
        self._put(self.streams, c.name, stream)
        return stream

    def _create_stream_from(self, c: CreateStreamFrom) -> Stream:
        """A new stream of existing extents (shared, pointers only): each exists and is
        sealed or erasure-coded (an open extent has one writer's stream; a deleted one has
        no data), none repeats (a stream holds an extent once)."""
        self.check_new_name(c.name)
        if len(set(c.extents)) != len(c.extents):
            raise InvalidArgument(f"stream {c.name!r}: extents {list(c.extents)} repeat")
        for extent_id in c.extents:
            extent = self.extent(extent_id)
            if extent.state in (OPEN, DELETED):
                raise PreconditionFailed(f"extent {extent_id} is {extent.state}: a stream "
                                         f"is made only of sealed extents")
        stream = Stream(c.name, tuple(c.extents))
        self._put(self.streams, c.name, stream)
        return stream

    def _delete_stream(self, c: DeleteStream) -> None:
        self.stream(c.name)
        self._remove(self.streams, c.name)

    def _retire_stream(self, c: RetireStream) -> None:
        self.stream(c.name)
        self._remove(self.streams, c.name)
        self._retire(c.name)

    def _rename_stream(self, c: RenameStream) -> Stream:
        stream = self.stream(c.old)
        self.check_new_name(c.new)
        renamed = Stream(c.new, stream.extents, stream.writer_epoch)
        self._put(self.streams, c.new, renamed)
        self._remove(self.streams, c.old)
        return renamed

    def _reserve_extent_ids(self, c: ReserveExtentIds) -> tuple[int, int]:
        if not 1 <= c.count <= EXTENT_IDS_RESERVED_MAX:
            raise InvalidArgument(f"reserve 1..{EXTENT_IDS_RESERVED_MAX} extent ids")
        first = self.next_extent_id
        self.next_extent_id += c.count
        return first, self.next_extent_id

    def _fence_stream(self, c: FenceStream) -> Stream:
        stream = self.stream(c.name)
        check_epoch(stream, c.epoch)
        fenced = dataclasses.replace(stream, writer_epoch=c.epoch)
        self._put(self.streams, stream.name, fenced)
        return fenced

    def _add_extent(self, c: AddExtent) -> Stream:
        stream = self.stream(c.stream)
        check_epoch(stream, c.epoch)
        last = stream.extents[-1] if stream.extents else 0
        if last != c.expect_last:
            raise PreconditionFailed(f"stream {c.stream!r} ends with extent {last}, not "
                                     f"{c.expect_last}")
        if last and self.extent(last).state == OPEN:
            raise PreconditionFailed(f"stream {c.stream!r}: its last extent {last} is open")
        if c.extent_id in self.extents or c.extent_id >= self.next_extent_id:
            raise InvalidArgument(f"extent id {c.extent_id} was not reserved or is in use")
        if len(c.replicas) < 1 or len(set(c.replicas)) != len(c.replicas):
            raise InvalidArgument(f"replicas {c.replicas} must be distinct")
        for name in c.replicas:
            self.node(name)
        self._put(self.extents, c.extent_id, Extent(c.extent_id, tuple(c.replicas)))
        grown = dataclasses.replace(stream, extents=(*stream.extents, c.extent_id))
        self._put(self.streams, stream.name, grown)
        return grown

    def _transition(self, extent: Extent, state: str, **changes: Any) -> Extent:
        if state not in EXTENT_TRANSITIONS[extent.state]:
            raise PreconditionFailed(f"extent {extent.extent_id} is {extent.state}: cannot "
                                     f"become {state}")
        changed = dataclasses.replace(extent, state=state, **changes)
        self._put(self.extents, extent.extent_id, changed)
        return changed

    def _seal_extent(self, c: SealExtent) -> Extent:
        extent = self.extent(c.extent_id)
        if extent.state != OPEN:
            if extent.state == SEALED and extent.sealed_length == c.length:
                return extent  # a retried seal: the same answer
            raise PreconditionFailed(f"extent {c.extent_id} is {extent.state} at "
                                     f"{extent.sealed_length}; cannot seal at {c.length}")
        if c.length < 0:
            raise InvalidArgument("a sealed length is not negative")
        return self._transition(extent, SEALED, sealed_length=c.length, sealed_at=c.at)

    def _concat(self, c: Concat) -> Stream:
        target, source = self.stream(c.target), self.stream(c.source)
        if c.target == c.source:
            raise InvalidArgument("cannot concatenate a stream onto itself")
        # Streams may share extents (a split's children): a stream holds each one once.
        repeated = sorted(set(target.extents) & set(source.extents))
        if repeated:
            raise InvalidArgument(f"stream {c.target!r} already holds extent {repeated[0]} of "
                                  f"{c.source!r}: a stream holds an extent once")
        for extent_id in (*target.extents[-1:], *source.extents):
            if self.extent(extent_id).state == OPEN:
                raise PreconditionFailed(f"extent {extent_id} is open: seal it before concat")
        joined = dataclasses.replace(target, extents=target.extents + source.extents)
        self._put(self.streams, target.name, joined)
        return joined

    def _multi_modify(self, c: MultiModify) -> list[Any]:
        if not c.commands:
            raise InvalidArgument("an empty multi-modify")
        self._undo = []
        try:
            results = []
            for command in c.commands:
                if isinstance(command, MultiModify | ReserveExtentIds):
                    raise InvalidArgument(f"{type(command).__name__} cannot be nested")
                handler = self._HANDLERS.get(type(command))
                if handler is None:
                    raise InvalidArgument(f"unknown command {type(command).__name__}")
                results.append(handler(self, command))
            return results
        except StampError:
            self._rollback()
            raise
        finally:
            self._undo = None

    def _register_node(self, c: RegisterNode) -> Node:
        if not (c.name and c.address and c.fault_domain):
            raise InvalidArgument("a node needs a name, an address and a fault domain")
        node = Node(c.name, c.address, c.fault_domain, c.upgrade_domain, c.capacity_bytes)
        self._put(self.nodes, c.name, node)
        return node

    def _node_dead(self, c: NodeDead) -> Node:
        node = dataclasses.replace(self.node(c.name), state=DEAD)
        self._put(self.nodes, c.name, node)
        return node

    def _node_alive(self, c: NodeAlive) -> Node:
        node = dataclasses.replace(self.node(c.name), state=ALIVE)
        self._put(self.nodes, c.name, node)
        return node

    def _replace_replica(self, c: ReplaceReplica) -> Extent:
        extent = self.extent(c.extent_id)
        if extent.state != SEALED:
            raise PreconditionFailed(f"extent {c.extent_id} is {extent.state}: only sealed "
                                     f"extents are re-replicated")
        if c.old not in extent.replicas:
            raise PreconditionFailed(f"{c.old} holds no replica of extent {c.extent_id}")
        if c.new in extent.replicas:
            raise PreconditionFailed(f"{c.new} already holds extent {c.extent_id}")
        self.node(c.new)
        replicas = tuple(c.new if r == c.old else r for r in extent.replicas)
        changed = dataclasses.replace(extent, replicas=replicas)
        self._put(self.extents, c.extent_id, changed)
        return changed

    def _delete_extent(self, c: DeleteExtent) -> Extent:
        extent = self.extent(c.extent_id)
        if self.references().get(c.extent_id):
            raise PreconditionFailed(f"extent {c.extent_id} is still referenced by a stream")
        return self._transition(extent, DELETED)

    _HANDLERS: ClassVar[dict[type, Callable[[StreamManagerState, Any], Any]]] = {
        CreateStream: _create_stream, CreateStreamFrom: _create_stream_from,
        DeleteStream: _delete_stream, RetireStream: _retire_stream,
        RenameStream: _rename_stream, ReserveExtentIds: _reserve_extent_ids,
        AddExtent: _add_extent, FenceStream: _fence_stream, SealExtent: _seal_extent,
        Concat: _concat,
        MultiModify: _multi_modify, RegisterNode: _register_node, NodeDead: _node_dead,
        NodeAlive: _node_alive, ReplaceReplica: _replace_replica,
        DeleteExtent: _delete_extent, SetStreamPolicy: stream_policies.set_stream_policy,
        RecordErasureCoding: erasure_handlers.record_erasure_coding,
        ReleaseReplicas: erasure_handlers.release_replicas,
        ReplaceFragment: erasure_handlers.replace_fragment,
        DropExtents: drop_handlers.drop_extents,
    }

    # ---- snapshots and comparison ----------------------------------------------------------

    def to_snapshot(self) -> dict[str, Any]:
        return {
            "streams": [dataclasses.asdict(s) for s in self.streams.values()],
            "extents": [dataclasses.asdict(e) for e in self.extents.values()],
            "nodes": [dataclasses.asdict(n) for n in self.nodes.values()],
            "next_extent_id": self.next_extent_id,
            "retired": sorted(self.retired),
            "policies": [dataclasses.asdict(p) for p in self.policies.values()],
        }

    @classmethod
    def from_snapshot(cls, raw: dict[str, Any]) -> StreamManagerState:
        # Snapshots from before retirement existed have no "retired": none was.
        state = cls(next_extent_id=raw["next_extent_id"], retired=set(raw.get("retired", ())))
        for s in raw["streams"]:
            state.streams[s["name"]] = Stream(s["name"], tuple(s["extents"]),
                                              s.get("writer_epoch", 0))
        for e in raw["extents"]:
            state.extents[e["extent_id"]] = Extent(**{
                **e, "replicas": tuple(e["replicas"]), "fragments": tuple(e["fragments"]),
                "ec_cuts": tuple(e.get("ec_cuts", ())), "ec_crcs": tuple(e.get("ec_crcs", ()))})
        for n in raw["nodes"]:
            state.nodes[n["name"]] = Node(**n)
        for p in raw.get("policies", ()):  # none in snapshots from before policies
            state.policies[p["pattern"]] = StreamPolicy(**p)
        return state

    def digest(self) -> str:
        """A hash of the whole state, order-independent: equal on replicas that agree."""
        snapshot = self.to_snapshot()
        for key in ("streams", "extents", "nodes", "policies"):
            snapshot[key] = sorted(snapshot[key], key=lambda r: json.dumps(r, sort_keys=True))
        return hashlib.sha256(json.dumps(snapshot, sort_keys=True).encode()).hexdigest()
