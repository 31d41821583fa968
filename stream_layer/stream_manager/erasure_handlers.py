"""The erasure-coding handlers of the stream manager's state machine (state.py): a sealed
extent becomes erasure-coded (RecordErasureCoding), its replicas are released once deleted
(ReleaseReplicas), and a lost fragment is rebuilt elsewhere (ReplaceFragment).

Each is a plain function of the state and its command, called by `StreamManagerState.apply`
(through its handler table) inside its undo scope: it changes records only through the
state's `_put` / `_transition`, so a refusal (a StampError) leaves nothing behind."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from common.errors import InvalidArgument, PreconditionFailed
from stream_layer.ec.layout import check_layout
from stream_layer.stream_manager.commands import (
    RecordErasureCoding,
    ReleaseReplicas,
    ReplaceFragment,
)
from stream_layer.stream_manager.records import ERASURE_CODED, SEALED, Extent

if TYPE_CHECKING:
    from stream_layer.stream_manager.state import StreamManagerState


def record_erasure_coding(st: StreamManagerState, c: RecordErasureCoding) -> Extent:
    extent = st.extent(c.extent_id)
    if extent.state == ERASURE_CODED and (extent.fragments, extent.ec_k, extent.ec_m,
                                          extent.ec_cuts, extent.ec_crcs) == (
            c.fragments, c.k, c.m, c.cuts, c.crcs):
        return extent  # a retried record: the same answer
    if extent.state != SEALED:
        raise PreconditionFailed(f"extent {c.extent_id} is {extent.state}: only sealed "
                                 f"extents are erasure-coded")
    check_layout(c.k, c.m, c.cuts)
    if c.cuts[-1] != extent.sealed_length:
        raise InvalidArgument(f"the layout covers {c.cuts[-1]} bytes; extent "
                              f"{c.extent_id} has {extent.sealed_length}")
    if len(c.fragments) != c.k + c.m or len(set(c.fragments)) != len(c.fragments):
        raise InvalidArgument(f"RS({c.k},{c.m}) needs {c.k + c.m} distinct nodes, not "
                              f"{list(c.fragments)}")
    if len(c.crcs) != c.k + c.m:
        raise InvalidArgument(f"RS({c.k},{c.m}) needs {c.k + c.m} fragment checksums")
    for name in c.fragments:
        st.node(name)
    return st._transition(extent, ERASURE_CODED, fragments=tuple(c.fragments),
                          ec_k=c.k, ec_m=c.m, ec_cuts=tuple(c.cuts),
                          ec_crcs=tuple(c.crcs))


def release_replicas(st: StreamManagerState, c: ReleaseReplicas) -> Extent:
    extent = st.extent(c.extent_id)
    if extent.state != ERASURE_CODED:
        raise PreconditionFailed(f"extent {c.extent_id} is {extent.state}: its replicas "
                                 f"are its data")
    kept = tuple(r for r in extent.replicas if r not in c.nodes)
    changed = dataclasses.replace(extent, replicas=kept)
    st._put(st.extents, c.extent_id, changed)
    return changed


def replace_fragment(st: StreamManagerState, c: ReplaceFragment) -> Extent:
    extent = st.extent(c.extent_id)
    if extent.state != ERASURE_CODED:
        raise PreconditionFailed(f"extent {c.extent_id} is {extent.state}: it has no "
                                 f"fragments")
    if not 0 <= c.index < len(extent.fragments) or extent.fragments[c.index] != c.old:
        raise PreconditionFailed(f"fragment {c.index} of extent {c.extent_id} is not on "
                                 f"{c.old}")
    if c.new in extent.fragments:
        raise PreconditionFailed(f"{c.new} already holds a fragment of extent "
                                 f"{c.extent_id}")
    st.node(c.new)
    fragments = tuple(c.new if i == c.index else f for i, f in enumerate(extent.fragments))
    changed = dataclasses.replace(extent, fragments=fragments)
    st._put(st.extents, c.extent_id, changed)
    return changed
