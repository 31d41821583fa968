"""The replica state machine as a table (stream_layer/extent_node/replica_state.py)."""

from __future__ import annotations

import pytest

from common.errors import NotFound, ReplicationFailed, Sealed
from stream_layer.extent_node.replica_state import (
    ACCEPTS,
    TRANSITIONS,
    Event,
    State,
    Write,
    next_state,
    refusal,
)

EXTENT = 7


@pytest.mark.parametrize(("state", "write", "refused"), [
    (State.OPEN, Write.APPEND, None),
    (State.OPEN, Write.FORWARD, None),
    (State.OPEN, Write.SYNC, Sealed),
    # Restarted: not as the primary (it may lack what it forwarded), still as a secondary.
    (State.UNPROVEN, Write.APPEND, ReplicationFailed),
    (State.UNPROVEN, Write.FORWARD, None),
    (State.UNPROVEN, Write.SYNC, ReplicationFailed),
    (State.FENCED, Write.APPEND, Sealed),
    (State.FENCED, Write.FORWARD, Sealed),
    (State.FENCED, Write.SYNC, None),
    (State.SEALED, Write.APPEND, Sealed),
    (State.SEALED, Write.FORWARD, Sealed),
    (State.SEALED, Write.SYNC, Sealed),
    (State.DELETED, Write.FORWARD, NotFound),
])
def test_what_each_state_takes(state: State, write: Write, refused: type | None) -> None:
    error = refusal(state, write, EXTENT)
    if refused is None:
        assert error is None
    else:
        assert type(error) is refused


@pytest.mark.parametrize(("state", "event", "after"), [
    (State.OPEN, Event.RESTART, State.UNPROVEN),
    (State.OPEN, Event.FENCE, State.FENCED),
    (State.UNPROVEN, Event.RESTART, State.UNPROVEN),
    (State.UNPROVEN, Event.FENCE, State.FENCED),
    (State.UNPROVEN, Event.SEAL, State.SEALED),
    (State.FENCED, Event.RESTART, State.FENCED),  # a fence outlives a restart
    (State.FENCED, Event.SEAL, State.SEALED),
    (State.SEALED, Event.RESTART, State.SEALED),
    (State.SEALED, Event.FENCE, State.SEALED),  # a seal's probe of a sealed replica
    (State.SEALED, Event.DELETE, State.DELETED),
])
def test_transitions(state: State, event: Event, after: State) -> None:
    assert next_state(state, event) is after


def test_nothing_leaves_deleted_and_no_path_reopens_a_replica() -> None:
    for event in Event:
        if event is not Event.DELETE:
            with pytest.raises(NotFound):  # a seal that raced a delete
                next_state(State.DELETED, event)
    # Only a new replica is OPEN: no event leads back to it, so nothing fenced, sealed or
    # restarted ever takes an append as the primary again.
    assert State.OPEN not in TRANSITIONS.values()
    assert [s for s in State if Write.APPEND in ACCEPTS[s]] == [State.OPEN]
