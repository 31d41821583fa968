"""The leader's view of when each lease expires, kept in memory (§3; etcd's lessor,
server/lease/lessor.go). Pure: no I/O, no clock, no threads; times are leader time
(lock_service/leader_time.py).

Grants, releases, expiries and renewals that change a lease's TTL go through Raft; a plain
renewal is answered from here, by the leader alone, without a Raft write. The replicated
state keeps each lease's expiry as of its grant (or last logged renewal) only; whether a
lease has run out is decided here, and the leader ends it with a logged `Expire` command
(lock_service/commands.py).

Why a holder can rely on its lease (the invariant of §8 for leases: a holder that believes
its lease valid until T can rely on nobody else being granted it before T). A holder claims
until `sent + ttl - margin`, `sent` being when it sent the renewal (lock_service/client.py).
1. A renewal answered by leader A from memory at leader time `at` sets the expiry here to
   `at + ttl`, reached no earlier than `ttl` after the holder sent it in real time (leader
   time runs at A's monotonic rate). A itself expires nothing earlier.
2. A answers from memory only while it holds a leader lease (server.py, `LEADER_LEASE_S`):
   at the check, A leads in term T and a majority acknowledged, in T, messages A sent at or
   after s, with the check before s + LEADER_LEASE_S (common/raft_lease.py). Then every
   later leader B was elected after s, or with A's own vote, cast only after the check. So
   the holder sent its renewal before t_B + LEADER_LEASE_S, where t_B is when B took office.
   A grant or renewal that went through the log was stored by a majority in term T before
   it was answered; a voter of B stored it before voting, so t_B is after the holder sent
   it, and B's log holds it.
3. B takes office (`promote`, after its Barrier is applied, so it holds every lease ever
   granted and not ended in the log) by giving every lease an expiry of at least
   `now + ttl + extend`, reached no earlier than t_B + ttl + extend in real time. With
   `extend >= LEADER_LEASE_S` (limits.py asserts it) that is after `sent + ttl`, so after
   the holder stopped claiming. The same holds between B and any leader after it.
4. A deposed leader cannot end a lease either: its Expire is refused once a newer term's
   Barrier is applied (state.py), and it cannot commit one without a majority.
Clocks: leader time never runs faster than the leader's monotonic clock; the client's
margin covers the bounded drift between hosts that DESIGN.md assumes.

Checkpoints: etcd logs each lease's remaining TTL now and then, so that a long lease is not
reset to its full TTL by every new leader. Here a new leader resets every lease to
`ttl + extend` anyway (3. needs it: renewals since any checkpoint are in no log), and
Stamp's leases are seconds long, so there is nothing for a checkpoint to save.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from sortedcontainers import SortedSet


class RenewOutcome(enum.Enum):
    RENEWED = "renewed"
    ENDED = "ended"  # ended, or its time is up here: the holder has lost it
    THROUGH_LOG = "through_log"  # not answerable from memory: unknown token, or a new TTL


class Lessor:
    """Expiry times of live leases, while this replica leads (`term` set by `promote`)."""

    def __init__(self) -> None:
        self.term: int | None = None
        self._expiry: dict[int, float] = {}
        self._ttl: dict[int, float] = {}
        self._order: SortedSet = SortedSet()  # (expires_at, token)
        self._last_token = 0  # every token up to this one was granted in a log seen here

    def promote(self, term: int, now: float, leases: Iterable[tuple[int, float, float]],
                last_token: int, extend_s: float) -> None:
        """Take office in `term` at state time `now`, given every live lease of the state
        as (token, ttl, expires_at): each expires no earlier than now + ttl + extend_s
        (module docstring, 3.)."""
        assert extend_s >= 0, "a new leader never shortens a lease"
        self.demote()
        self.term = term
        self._last_token = last_token
        for token, ttl_s, expires_at in leases:
            self._set(token, ttl_s, max(expires_at, now + ttl_s + extend_s))

    def demote(self) -> None:
        self.term = None
        self._expiry.clear()
        self._ttl.clear()
        self._order.clear()

    # --- what the log did (applied in log order, after promote) -----------------------------

    def granted(self, token: int, ttl_s: float, expires_at: float) -> None:
        if self.term is None:
            return
        self._last_token = max(self._last_token, token)
        self._set(token, ttl_s, expires_at)

    def renewed_in_log(self, token: int, ttl_s: float, expires_at: float) -> None:
        if self.term is None or token not in self._expiry:
            return
        self._set(token, ttl_s, max(expires_at, self._expiry[token]))

    def ended(self, token: int) -> None:
        if self.term is None or token not in self._expiry:
            return
        self._order.remove((self._expiry.pop(token), token))
        del self._ttl[token]

    # --- decisions ---------------------------------------------------------------------------

    def renew(self, token: int, ttl_s: float, now: float) -> RenewOutcome:
        """Renew `token` for `ttl_s` from leader time `now`, from memory, if that is right.
        The caller has checked that this replica holds its leader lease for `term`."""
        assert self.term is not None, "only a promoted lessor renews"
        expires_at = self._expiry.get(token)
        if expires_at is None:
            return RenewOutcome.ENDED if token <= self._last_token else RenewOutcome.THROUGH_LOG
        if expires_at <= now:
            return RenewOutcome.ENDED  # its time is up; the Expire is on its way
        if ttl_s != self._ttl[token]:
            return RenewOutcome.THROUGH_LOG  # a new TTL must survive a leader change
        self._set(token, ttl_s, max(expires_at, now + ttl_s))
        return RenewOutcome.RENEWED

    def due(self, now: float, limit: int) -> tuple[int, ...]:
        """Up to `limit` tokens whose time is up at leader time `now`, soonest first."""
        due: list[int] = []
        for expires_at, token in self._order:
            if expires_at > now or len(due) >= limit:
                break
            due.append(token)
        return tuple(due)

    def lapsed(self, token: int, now: float) -> bool:
        expires_at = self._expiry.get(token)
        return expires_at is not None and expires_at <= now

    def expires_at(self, token: int) -> float | None:
        return self._expiry.get(token)

    def next_expiry(self) -> float | None:
        return self._order[0][0] if self._order else None

    def _set(self, token: int, ttl_s: float, expires_at: float) -> None:
        known = self._expiry.get(token)
        if known is not None:
            self._order.remove((known, token))
        self._expiry[token] = expires_at
        self._ttl[token] = ttl_s
        self._order.add((expires_at, token))
