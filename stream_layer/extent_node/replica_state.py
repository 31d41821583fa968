"""The life of one extent replica on one extent node, as data (h11's transition tables): which
state follows which event, and which writes each state takes. Pure: no I/O, no clock.

    OPEN ──fence/seal──▶ FENCED ──seal──▶ SEALED
     │                     ▲
     └──restart──▶ UNPROVEN ┘ (fence/seal)          any ──delete──▶ DELETED

- OPEN takes appends as the primary and forwarded writes as a secondary.
- UNPROVEN is an open replica after its node restarted (§2, issue 15 hole 3). Its node may have
  died after forwarding an append to the secondaries and before its own journal had it: the
  secondaries then hold bytes it lacks. An append placed at its shorter end would be refused by
  them, and the seal at the smallest length would leave replicas whose bytes differ (invariant
  2). So it takes no append as the primary until the extent is sealed; as a secondary it still
  takes forwarded writes, whose offset check (a write not at this replica's end is refused)
  already keeps a short replica from journaling at the wrong place. A restart is not
  journaled: recovery makes every open replica UNPROVEN again.
- FENCED is a replica whose seal has begun (durable: a FENCE record): it takes only the bytes a
  seal fetches from its peers, and keeps doing so across restarts.
- SEALED takes nothing; DELETED is gone (in-flight callers see it refuse).
"""

from __future__ import annotations

import enum

from common.errors import Internal, NotFound, ReplicationFailed, Sealed, StampError


class State(enum.Enum):
    OPEN = "open"
    UNPROVEN = "unproven"
    FENCED = "fenced"
    SEALED = "sealed"
    DELETED = "deleted"


class Event(enum.Enum):
    RESTART = "restart"  # recovery rebuilt the replica
    FENCE = "fence"  # a seal's probe, or the seal itself, began
    SEAL = "seal"  # the sealed length is recorded
    DELETE = "delete"


class Write(enum.Enum):
    APPEND = "append"  # placed by this node as the extent's primary
    FORWARD = "forward"  # sent by the primary to this secondary
    SYNC = "sync"  # fetched from a peer while sealing


TRANSITIONS: dict[tuple[State, Event], State] = {
    (State.OPEN, Event.RESTART): State.UNPROVEN,
    (State.OPEN, Event.FENCE): State.FENCED,
    (State.OPEN, Event.SEAL): State.SEALED,
    (State.UNPROVEN, Event.RESTART): State.UNPROVEN,
    (State.UNPROVEN, Event.FENCE): State.FENCED,
    (State.UNPROVEN, Event.SEAL): State.SEALED,
    (State.FENCED, Event.RESTART): State.FENCED,
    (State.FENCED, Event.FENCE): State.FENCED,
    (State.FENCED, Event.SEAL): State.SEALED,
    (State.SEALED, Event.RESTART): State.SEALED,
    (State.SEALED, Event.FENCE): State.SEALED,
    (State.SEALED, Event.SEAL): State.SEALED,
    **{(state, Event.DELETE): State.DELETED for state in State},
}

ACCEPTS: dict[State, frozenset[Write]] = {
    State.OPEN: frozenset({Write.APPEND, Write.FORWARD}),
    State.UNPROVEN: frozenset({Write.FORWARD}),
    State.FENCED: frozenset({Write.SYNC}),
    State.SEALED: frozenset(),
    State.DELETED: frozenset(),
}


def next_state(state: State, event: Event, extent_id: int = 0) -> State:
    """The state after `event`. On a deleted replica it raises NotFound (a seal or fence can
    race a delete); any other event the table does not allow is a bug (Internal)."""
    after = TRANSITIONS.get((state, event))
    if after is None:
        if state is State.DELETED:
            raise NotFound(f"extent {extent_id} has no replica here")
        raise Internal(f"replica state {state.value}: {event.value} is not allowed")
    return after


def refusal(state: State, write: Write, extent_id: int) -> StampError | None:
    """Why a replica in `state` refuses `write`, or None when it takes it. The errors are ones
    the stream client cures by sealing the extent and moving to a new one."""
    if write in ACCEPTS[state]:
        return None
    if state is State.UNPROVEN:
        return ReplicationFailed(f"extent {extent_id}: its primary restarted while it was open "
                                 f"and cannot prove it holds what its secondaries do; seal it")
    if state is State.DELETED:
        return NotFound(f"extent {extent_id} has no replica here")
    return Sealed(f"extent {extent_id} is sealed")
