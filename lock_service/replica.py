"""One replica of the lock service: the pure `LockState` behind a durable pysyncobj replica.

Contract:
- Commands are applied on pysyncobj's tick thread, in log order, one at a time, under
  `_state_mutex`; other threads look at the state only through `read`.
- `propose(command, callback)` may be called from any thread; `callback(result, error)` runs
  on the tick thread once the command is applied here (error is a pysyncobj FAIL_REASON,
  0 on success) — after its entry is durable on a majority (common/raft.py).
- Listeners added with `on_freed` hear, on the tick thread, the names of locks that became
  free (released or expired), to wake long-polls; those added with `on_lease_granted` hear
  of each applied command that granted a lease, to wake the leader's expiry pass.
- The lessor (lock_service/lessor.py) is kept under the same mutex as the state and hears
  every lease event in log order, so `promote` (after a Barrier) sees a state and the lessor
  follows it from there without a gap. `renew_in_memory` answers a renewal only while this
  replica holds its leader lease for the lessor's term (`leader_lease_holds`).
- If applying a command raises, the state machine is broken (a bug, not bad input: bad input
  yields `Rejected`). The replica stops at once rather than diverge from its peers.
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pysyncobj import replicated

from common.raft import DurableReplica, RaftTuning
from lock_service import commands as c
from lock_service import limits
from lock_service.lessor import Lessor, RenewOutcome
from lock_service.state import LockState

log = logging.getLogger(__name__)

T = TypeVar("T")
EX_SOFTWARE = 70


class LockReplica(DurableReplica):
    def __init__(self, raft_address: str, peers: Sequence[str], raft_dir: str | Path,
                 tuning: RaftTuning | None = None, *, secret: bytes | None = None) -> None:
        """`secret`: the stamp secret its Raft peers authenticate with (common/raft.py)."""
        # Before the base constructor: pysyncobj may apply commands from inside it.
        self._lock_state = LockState()
        self._lessor = Lessor()
        self._state_mutex = threading.Lock()
        self._freed_listeners: list[Callable[[list[str]], None]] = []
        self._granted_listeners: list[Callable[[], None]] = []
        self.raft_address = raft_address
        super().__init__(raft_address, peers, raft_dir, tuning, secret=secret)

    @replicated
    def _apply_command(self, command: c.Command) -> c.Result:
        try:
            with self._state_mutex:
                result = self._lock_state.apply(command)
                freed = self._lock_state.take_freed()
                granted = self._follow_lease_events()
        except Exception:
            log.critical("applying %r broke the lock state machine: stopping", command,
                         exc_info=True)
            logging.shutdown()
            os._exit(EX_SOFTWARE)
        if freed:
            for listener in self._freed_listeners:
                listener(freed)
        if granted:
            for on_granted in self._granted_listeners:
                on_granted()
        return result

    def propose(self, command: c.Command, callback: Callable[[Any, int], None]) -> None:
        self._apply_command(command, callback=callback)

    def read(self, look: Callable[[LockState], T]) -> T:
        with self._state_mutex:
            return look(self._lock_state)

    def _follow_lease_events(self) -> bool:
        """Hand the lessor what the command did to leases; True if it granted one (the only
        event that can bring the lessor's next expiry nearer)."""
        granted = False
        for event in self._lock_state.take_lease_events():
            if event.kind == "granted":
                granted = True
                self._lessor.granted(event.token, event.ttl_s, event.expires_at)
            elif event.kind == "renewed":
                self._lessor.renewed_in_log(event.token, event.ttl_s, event.expires_at)
            else:
                self._lessor.ended(event.token)
        return granted

    # --- the leader's lessor (lock_service/lessor.py) ----------------------------------------

    def promote(self, term: int, extend_s: float) -> None:
        """Take office in `term`: every live lease expires no earlier than ttl + extend_s
        from the state's time. Call once the term's Barrier is applied."""
        with self._state_mutex:
            state = self._lock_state
            self._lessor.promote(
                term, state.now,
                [(lease.token, lease.ttl_s, lease.expires_at) for lease in state.leases.values()],
                state.last_token, extend_s)

    def demote(self) -> None:
        with self._state_mutex:
            self._lessor.demote()

    def leader_lease_holds(self, term: int) -> bool:
        """True if no other replica can have taken office in a later term more than
        LEADER_LEASE_S before now (common/raft_lease.py): a majority acknowledged, in `term`,
        what this replica sent less than LEADER_LEASE_S ago, and it still leads in `term`.
        The leadership is read last: see lock_service/lessor.py, 2."""
        contact = self.majority_contact_at(term)
        if contact is None or time.monotonic() >= contact + limits.LEADER_LEASE_S:
            return False
        return self.raftCurrentTerm == term and self.is_leader() and self.raftCurrentTerm == term

    def read_leased(self, term: int, look: Callable[[LockState], T]) -> T | None:
        """`look` at the state as leader of `term` without a Raft write, or None when this
        replica cannot prove now that no other replica leads (then read through the log).

        Why no other replica can lead when this returns a value: with PreVote (common/
        raft_lease.py) a follower grants no pre-vote until it has heard no leader for the
        minimum election timeout, and no replica stands for election without a majority of
        pre-votes. A majority acknowledged in `term` what this leader sent at `s`, so each of
        them heard it at or after `s`; every majority that could elect a successor holds one
        of them, and none of those says yes before `s` plus the minimum election timeout.
        The lease ends well before that (READ_LEASE_FRACTION of it), and it is checked after
        the look: a replica frozen between the two answers nothing it looked at before a
        successor could exist. Everything committed before the read is applied here: this
        leader applies a write before it acknowledges it, and the caller waits for its
        Barrier (`_leader_now`) first, so its predecessors' writes are applied too."""
        if not self._tuning.pre_vote:
            return None
        with self._state_mutex:
            found = look(self._lock_state)
        contact = self.majority_contact_at(term)
        lease_s = limits.READ_LEASE_FRACTION * self._tuning.election_timeout_min_s
        if contact is None or time.monotonic() >= contact + lease_s:
            return None
        if not (self.is_leader() and self.raftCurrentTerm == term):
            return None
        return found

    def held_leased(self, term: int, name: str, request_id: str, now: float
                    ) -> tuple[str, int] | None:
        """(holder, token) of lock `name` when an Acquire of it by `request_id` at leader
        time `now` would be answered Held, read without a Raft write (`read_leased`), as
        leader of `term` (promoted); None when the Acquire must go through the log: the lock
        is free, or its lease's time is up here (an Expire comes first, then a grant), or
        `request_id` was seen before (the log's answer to it stands), or no read lease.
        A standby that asks for a held lock over and over (issue 29: a partition manager
        every 2 s) then costs the group no Raft write; what it is told is what the log
        would have answered at that moment."""
        def look(state: LockState) -> tuple[str, int] | None:
            token = state.locks.get(name)
            if token is None or request_id in state.dedup or self._lessor.term != term:
                return None
            if self._lessor.expires_at(token) is None or self._lessor.lapsed(token, now):
                return None
            return state.leases[token].holder, token
        found = self.read_leased(term, lambda state: (look(state),))
        return None if found is None else found[0]

    def renew_in_memory(self, term: int, token: int, ttl_s: float, now: float) -> RenewOutcome:
        """A renewal answered by the lessor of `term` at leader time `now`, if this replica
        holds its leader lease; THROUGH_LOG when it must go through Raft instead."""
        with self._state_mutex:
            if self._lessor.term != term or not self.leader_lease_holds(term):
                return RenewOutcome.THROUGH_LOG
            return self._lessor.renew(token, ttl_s, now)

    def due_leases(self, term: int, now: float) -> tuple[int, ...]:
        """Leases whose time is up at leader time `now` (none unless promoted in `term`)."""
        with self._state_mutex:
            if self._lessor.term != term:
                return ()
            return self._lessor.due(now, limits.EXPIRE_TOKENS_MAX)

    def next_expiry(self, term: int) -> float | None:
        """The earliest leader-time expiry in the lessor of `term`, or None (no lease, or
        not promoted in `term`)."""
        with self._state_mutex:
            if self._lessor.term != term:
                return None
            return self._lessor.next_expiry()

    def lease_expiries(self, term: int) -> dict[int, float] | None:
        """Leader-time expiry of every lease as the lessor of `term` sees it, or None."""
        with self._state_mutex:
            if self._lessor.term != term:
                return None
            return {token: self._lessor.expires_at(token) or lease.expires_at
                    for token, lease in self._lock_state.leases.items()}

    def on_freed(self, listener: Callable[[list[str]], None]) -> None:
        self._freed_listeners.append(listener)

    def on_lease_granted(self, listener: Callable[[], None]) -> None:
        """`listener()` runs on the tick thread after a command that granted a lease is
        applied (the lessor may then have an expiry nearer than any before)."""
        self._granted_listeners.append(listener)

    def grpc_address_of(self, raft_address: str | None) -> str | None:
        if not raft_address:
            return None
        return self.read(lambda state: state.members.get(raft_address))

    def snapshot_state(self) -> bytes:
        with self._state_mutex:
            return pickle.dumps(self._lock_state.to_snapshot(), protocol=5)

    def restore_state(self, blob: bytes) -> None:
        state = LockState.from_snapshot(pickle.loads(blob))
        with self._state_mutex:
            self._lock_state = state
