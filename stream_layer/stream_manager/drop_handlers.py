"""The garbage-collection handler of the stream manager's state machine (state.py): a stream's
writer drops sealed extents it no longer needs from the stream (DropExtents, §7 "gc").

Shared extents (a split's children hold their parent's extents): which streams hold an extent
is not a counter kept beside the streams but read off them (`StreamManagerState.references`),
so the accounting cannot drift — an extent is unreferenced exactly when the last stream that
held it has dropped it (or was deleted), and only then does the orphan sweep see it.

A plain function of the state and its command, called by `StreamManagerState.apply` inside its
undo scope (like erasure_handlers.py): a refusal leaves nothing behind."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from common.errors import InvalidArgument, PreconditionFailed
from stream_layer.stream_manager.commands import DropExtents
from stream_layer.stream_manager.records import OPEN, Stream, check_epoch

if TYPE_CHECKING:
    from stream_layer.stream_manager.state import StreamManagerState

# One command names at most this many extents (the Raft entry stays small).
DROP_EXTENTS_MAX = 10_000


@dataclasses.dataclass(frozen=True)
class Dropped:
    """What a DropExtents did: the stream as it is now, the extents taken out of it, and
    those of them no stream holds any more (the orphan sweep's from now on)."""

    stream: Stream
    dropped: tuple[int, ...]
    unreferenced: tuple[int, ...]


def drop_extents(st: StreamManagerState, c: DropExtents) -> Dropped:
    stream = st.stream(c.stream)
    check_epoch(stream, c.epoch)
    if len(c.extents) > DROP_EXTENTS_MAX:
        raise InvalidArgument(f"drop at most {DROP_EXTENTS_MAX} extents at once")
    if len(set(c.extents)) != len(c.extents):
        raise InvalidArgument(f"stream {c.stream!r}: extents {list(c.extents)} repeat")
    held = set(stream.extents)
    named = [e for e in c.extents if e in held]  # the others went already: stale, skipped
    last = stream.extents[-1] if stream.extents else 0
    for extent_id in named:
        if extent_id == last:
            raise PreconditionFailed(f"extent {extent_id} is the last of stream {c.stream!r}: "
                                     f"a stream never drops its last extent")
        if st.extent(extent_id).state == OPEN:
            raise PreconditionFailed(f"extent {extent_id} of stream {c.stream!r} is open: "
                                     f"only sealed extents are dropped")
    if not named:
        return Dropped(stream, (), ())
    gone = set(named)
    kept = dataclasses.replace(stream, extents=tuple(e for e in stream.extents
                                                     if e not in gone))
    st._put(st.streams, stream.name, kept)
    references = st.references()
    unreferenced = tuple(e for e in named if not references.get(e))
    return Dropped(kept, tuple(named), unreferenced)
