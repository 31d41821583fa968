"""The lock service's replicated state machine (§3): locks with leases and fencing tokens,
sessions, and a small versioned key/value store. Pure: no I/O, no clock, no threads.

Contract:
- Every replica applies the same commands in the same order and so holds the same state and
  returns the same results. `apply` is deterministic and never raises for a bad command (a
  raising apply would stall the Raft log); bad input yields a `Rejected` result. An
  AssertionError means the state machine itself is broken.
- Time is the leader's, carried in each command (`at`). The state's clock `now` is the
  largest `at` applied so far: it never goes back, whatever a new leader's clock says.
- A lease lives until a Release or an Expire ends it. Its `expires_at` here is as of its
  grant or last logged renewal only: renewals are answered from the leader's memory
  (lock_service/lessor.py), and the leader logs Expire when its time is up there. So no
  replica ever decides expiry from its own clock; an Expire of a lease whose logged expiry
  is still ahead of `now` is ignored.
- Fencing tokens come from one counter: a grant's token is larger than every token issued
  before it, for this lock or any other. A renewal keeps the token.
- At most one live lease holds a lock. Keys bound to a lease are deleted when it ends.
- Versions come from one revision counter: a key's version strictly increases, even across
  delete and re-create, so a compare-and-set cannot be fooled by a key that came back (ABA).
- A command with a request id is applied at most once: a retry arriving within
  DEDUP_WINDOW_S of state time gets the result of the first application.
- `epoch` is the highest term whose leader has opened office (Barrier). A command stamped in
  an older term is refused with no effect at all (not even on time, not remembered for
  dedup): its stamp comes from a deposed leader's clock.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sortedcontainers import SortedDict, SortedSet

from lock_service import commands as c
from lock_service import limits


@dataclass
class LeaseRecord:
    token: int
    holder: str
    lock: str | None  # None: a session
    ttl_s: float
    expires_at: float
    request_id: str
    keys: set[str] = field(default_factory=set)


class LeaseEvent(NamedTuple):
    """What happened to a lease, for the leader's lessor (not replicated state)."""

    kind: str  # "granted" | "renewed" (through the log) | "ended"
    token: int
    ttl_s: float
    expires_at: float


class KeyRecord(NamedTuple):
    value: bytes
    version: int
    lease: int  # 0: not bound to a lease


class LockState:
    def __init__(self) -> None:
        self.now = 0.0
        self.epoch = 0
        self.revision = 0
        self.last_token = 0
        self.applied = 0
        self.leases: dict[int, LeaseRecord] = {}
        self.locks: dict[str, int] = {}
        self.kv: SortedDict = SortedDict()  # key -> KeyRecord
        self.expiry: SortedSet = SortedSet()  # (expires_at, token)
        self.dedup: OrderedDict[str, tuple[float, c.Result]] = OrderedDict()
        self.members: dict[str, str] = {}  # raft address -> gRPC address
        # Not replicated state: lock names freed since `take_freed`, to wake waiters, and
        # lease events since `take_lease_events`, for the leader's lessor.
        self._freed: list[str] = []
        self._lease_events: list[LeaseEvent] = []
        self._handlers: dict[type, Callable[[Any], c.Result]] = {
            c.Acquire: self._acquire, c.OpenSession: self._open_session, c.Renew: self._renew,
            c.Release: self._release, c.Write: self._write, c.Delete: self._delete,
            c.Get: self._get, c.ListKeys: self._list, c.Tick: self._now, c.Expire: self._expire,
            c.Barrier: self._now, c.Announce: self._announce,
        }

    # --- applying -------------------------------------------------------------------------

    def apply(self, command: c.Command) -> c.Result:
        handler = self._handlers.get(type(command))
        if handler is None:
            return c.Rejected("InvalidArgument", f"unknown command {type(command).__name__}")
        self.applied += 1
        problem = problem_with(command)
        if problem:
            return c.Rejected("InvalidArgument", problem)
        term = getattr(command, "term", 0)
        if isinstance(command, c.Barrier):
            self.epoch = max(self.epoch, term)
        elif term and term < self.epoch:
            return c.Rejected("NotLeader", f"stamped in term {term}, after term {self.epoch} "
                                           "began")
        at = getattr(command, "at", None)
        if isinstance(at, float | int) and math.isfinite(at):
            self._advance(float(at))
        request_id = getattr(command, "request_id", "")
        if request_id:
            seen = self.dedup.get(request_id)
            if seen is not None:
                return seen[1]
        result = handler(command)
        if request_id:
            self.dedup[request_id] = (self.now, result)
            while len(self.dedup) > limits.DEDUP_ENTRIES_MAX:
                self.dedup.popitem(last=False)
        return result

    def _advance(self, at: float) -> None:
        self.now = max(self.now, at)
        horizon = self.now - limits.DEDUP_WINDOW_S
        while self.dedup:
            first = next(iter(self.dedup.values()))
            if first[0] > horizon:
                break
            self.dedup.popitem(last=False)

    # --- locks and sessions ---------------------------------------------------------------

    def _acquire(self, cmd: c.Acquire) -> c.Result:
        token = self.locks.get(cmd.name)
        if token is not None:
            lease = self.leases[token]
            return c.Held(lease.holder, lease.token, lease.expires_at)
        if len(self.leases) >= limits.LEASES_MAX:
            return c.Rejected("Throttled", f"{len(self.leases)} leases: at the limit")
        lease = self._new_lease(cmd.holder, cmd.name, cmd.ttl_s, cmd.request_id)
        self.locks[cmd.name] = lease.token
        return c.Granted(lease.token, lease.expires_at)

    def _open_session(self, cmd: c.OpenSession) -> c.Result:
        if len(self.leases) >= limits.LEASES_MAX:
            return c.Rejected("Throttled", f"{len(self.leases)} leases: at the limit")
        lease = self._new_lease(cmd.holder, None, cmd.ttl_s, cmd.request_id)
        return c.Granted(lease.token, lease.expires_at)

    def _new_lease(self, holder: str, lock: str | None, ttl_s: float,
                   request_id: str) -> LeaseRecord:
        token = self.last_token + 1
        assert token > self.last_token, "a fencing token never goes down"
        self.last_token = token
        lease = LeaseRecord(token, holder, lock, ttl_s, self.now + ttl_s, request_id)
        self.leases[token] = lease
        self.expiry.add((lease.expires_at, token))
        self._lease_events.append(LeaseEvent("granted", token, ttl_s, lease.expires_at))
        return lease

    def _renew(self, cmd: c.Renew) -> c.Result:
        lease = self.leases.get(cmd.token)
        if lease is None:
            return c.Rejected("NotFound", f"lease {cmd.token} has ended")
        self.expiry.remove((lease.expires_at, lease.token))
        lease.ttl_s = cmd.ttl_s
        lease.expires_at = self.now + cmd.ttl_s
        self.expiry.add((lease.expires_at, lease.token))
        self._lease_events.append(LeaseEvent("renewed", lease.token, lease.ttl_s,
                                             lease.expires_at))
        return c.Renewed(lease.expires_at)

    def _release(self, cmd: c.Release) -> c.Result:
        if cmd.token not in self.leases:
            return c.Released(False)
        self._end_lease(cmd.token)
        return c.Released(True)

    def _expire(self, cmd: c.Expire) -> c.Result:
        for token in cmd.tokens:
            lease = self.leases.get(token)
            if lease is not None and lease.expires_at <= self.now:
                self._end_lease(token)
        return c.Now(self.now)

    def _end_lease(self, token: int) -> None:
        lease = self.leases.pop(token)
        self.expiry.remove((lease.expires_at, token))
        self._lease_events.append(LeaseEvent("ended", token, lease.ttl_s, lease.expires_at))
        if lease.lock is not None:
            assert self.locks.get(lease.lock) == token, f"lock {lease.lock} lost its holder"
            del self.locks[lease.lock]
            self._freed.append(lease.lock)
        for key in lease.keys:
            record = self.kv.pop(key)
            assert record.lease == token, f"key {key} bound to {record.lease}, not {token}"

    # --- key/value store --------------------------------------------------------------------

    def _write(self, cmd: c.Write) -> c.Result:
        if cmd.fence and cmd.fence not in self.leases:
            return c.Rejected("PreconditionFailed", f"fencing lease {cmd.fence} has ended")
        if cmd.lease and cmd.lease not in self.leases:
            return c.Rejected("PreconditionFailed", f"lease {cmd.lease} has ended")
        current = self.kv.get(cmd.key)
        current_version = current.version if current is not None else 0
        if cmd.expected_version is not None and cmd.expected_version != current_version:
            return c.Mismatch(current_version)
        if current is None and len(self.kv) >= limits.KEYS_MAX:
            return c.Rejected("Throttled", f"{len(self.kv)} keys: at the limit")
        if current is not None and current.lease:
            self.leases[current.lease].keys.discard(cmd.key)
        self.revision += 1
        assert self.revision > current_version, "a key's version never goes down"
        self.kv[cmd.key] = KeyRecord(cmd.value, self.revision, cmd.lease)
        if cmd.lease:
            self.leases[cmd.lease].keys.add(cmd.key)
        return c.Written(self.revision)

    def _delete(self, cmd: c.Delete) -> c.Result:
        if cmd.fence and cmd.fence not in self.leases:
            return c.Rejected("PreconditionFailed", f"fencing lease {cmd.fence} has ended")
        current = self.kv.get(cmd.key)
        current_version = current.version if current is not None else 0
        if cmd.expected_version is not None and cmd.expected_version != current_version:
            return c.Mismatch(current_version)
        if current is None:
            return c.Deleted(False)
        if current.lease:
            self.leases[current.lease].keys.discard(cmd.key)
        del self.kv[cmd.key]
        return c.Deleted(True)

    def look(self, cmd: c.Get | c.ListKeys) -> c.Result:
        """What a Get or ListKeys would answer, without applying it (a lease read:
        lock_service/replica.py `read_leased`); the command is checked as `apply` checks it."""
        problem = problem_with(cmd)
        if problem:
            return c.Rejected("InvalidArgument", problem)
        return self._get(cmd) if isinstance(cmd, c.Get) else self._list(cmd)

    def _get(self, cmd: c.Get) -> c.Result:
        record = self.kv.get(cmd.key)
        return None if record is None else c.Value(record.value, record.version)

    def _list(self, cmd: c.ListKeys) -> c.Result:
        limit = min(cmd.limit, limits.LIST_KEYS_MAX)
        keys: list[str] = []
        for key in self.kv.irange(minimum=cmd.prefix):
            if not key.startswith(cmd.prefix) or len(keys) >= limit:
                break
            keys.append(key)
        if not cmd.with_values:
            return c.Keys(tuple(keys))
        values: list[tuple[bytes, int]] = []
        budget = limits.LIST_VALUE_BYTES_MAX
        for key in keys:
            record = self.kv[key]
            budget -= len(record.value)
            if budget < 0:
                break  # the reply stays within its size: the caller Gets the rest
            values.append((record.value, record.version))
        return c.Keys(tuple(keys), tuple(values))

    def _now(self, cmd: c.Tick | c.Barrier) -> c.Result:
        return c.Now(self.now)

    def _announce(self, cmd: c.Announce) -> c.Result:
        self.members[cmd.raft_address] = cmd.grpc_address
        return c.Now(self.now)

    # --- queries (local reads; not linearizable on their own) --------------------------------

    def holder_of(self, name: str) -> LeaseRecord | None:
        token = self.locks.get(name)
        return None if token is None else self.leases[token]

    def next_expiry(self) -> float | None:
        return self.expiry[0][0] if self.expiry else None

    def take_lease_events(self) -> list[LeaseEvent]:
        """Leases granted, renewed through the log, or ended since the last call."""
        events, self._lease_events = self._lease_events, []
        return events

    def take_freed(self) -> list[str]:
        """Lock names freed (released or expired) since the last call."""
        freed, self._freed = self._freed, []
        return freed

    # --- snapshots, digests, invariants ------------------------------------------------------

    def to_snapshot(self) -> dict[str, Any]:
        """Plain data (picklable) from which `from_snapshot` rebuilds an equal state."""
        return {
            "now": self.now, "epoch": self.epoch, "revision": self.revision,
            "last_token": self.last_token, "applied": self.applied,
            "leases": [(lease.token, lease.holder, lease.lock, lease.ttl_s, lease.expires_at,
                        lease.request_id, sorted(lease.keys)) for lease in self.leases.values()],
            "kv": [(key, tuple(record)) for key, record in self.kv.items()],
            "dedup": list(self.dedup.items()),
            "members": dict(self.members),
        }

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> LockState:
        state = cls()
        state.now, state.epoch, state.revision = data["now"], data["epoch"], data["revision"]
        state.last_token, state.applied = data["last_token"], data["applied"]
        for token, holder, lock, ttl_s, expires_at, request_id, keys in data["leases"]:
            state.leases[token] = LeaseRecord(token, holder, lock, ttl_s, expires_at,
                                              request_id, set(keys))
            state.expiry.add((expires_at, token))
            if lock is not None:
                state.locks[lock] = token
        for key, record in data["kv"]:
            state.kv[key] = KeyRecord(*record)
        state.dedup = OrderedDict(data["dedup"])
        state.members = dict(data["members"])
        state.check_invariants()
        return state

    def digest(self) -> str:
        """A hash of the whole replicated state: equal on replicas that applied the same log."""
        canonical = (self.now, self.epoch, self.revision, self.last_token, self.applied,
                     sorted((lease.token, lease.holder, lease.lock, lease.ttl_s,
                             lease.expires_at, lease.request_id, tuple(sorted(lease.keys)))
                            for lease in self.leases.values()),
                     list(self.kv.items()), list(self.dedup.items()), sorted(self.members.items()))
        return hashlib.sha256(repr(canonical).encode()).hexdigest()

    def check_invariants(self) -> None:
        """Assert everything that must hold between commands (tests call it after each one)."""
        assert set(self.expiry) == {(lease.expires_at, t) for t, lease in self.leases.items()}
        for token, lease in self.leases.items():
            assert lease.token == token <= self.last_token
            if lease.lock is not None:
                assert self.locks.get(lease.lock) == token, f"{lease.lock}: two holders?"
            for key in lease.keys:
                assert self.kv[key].lease == token
        for name, token in self.locks.items():
            assert self.leases[token].lock == name
        for key, record in self.kv.items():
            assert 0 < record.version <= self.revision
            if record.lease:
                assert key in self.leases[record.lease].keys


def problem_with(cmd: c.Command) -> str | None:
    """What is wrong with a command's fields on their own (None: nothing). Pure, so the
    servicer refuses a bad request before it reaches the log, with the same verdict."""
    if _bad_term(cmd):
        return _bad_term(cmd)
    if isinstance(cmd, c.Acquire):
        return (_bad_text("lock name", cmd.name, limits.NAME_BYTES_MAX)
                or _bad_text("holder", cmd.holder, limits.HOLDER_BYTES_MAX)
                or _bad_ttl(cmd.ttl_s))
    if isinstance(cmd, c.OpenSession):
        return _bad_text("holder", cmd.holder, limits.HOLDER_BYTES_MAX) or _bad_ttl(cmd.ttl_s)
    if isinstance(cmd, c.Renew):
        return _bad_ttl(cmd.ttl_s) or _bad_token(cmd.token)
    if isinstance(cmd, c.Release):
        return _bad_token(cmd.token)
    if isinstance(cmd, c.Expire) and (
            not isinstance(cmd.tokens, tuple) or len(cmd.tokens) > limits.EXPIRE_TOKENS_MAX
            or any(_bad_token(token) for token in cmd.tokens)):
        return f"tokens must be a tuple of at most {limits.EXPIRE_TOKENS_MAX} tokens"
    if isinstance(cmd, c.Write):
        if not isinstance(cmd.value, bytes) or len(cmd.value) > limits.VALUE_BYTES_MAX:
            return f"value must be bytes, at most {limits.VALUE_BYTES_MAX}"
        return (_bad_text("key", cmd.key, limits.KEY_BYTES_MAX)
                or _bad_version(cmd.expected_version) or _bad_token(cmd.lease)
                or _bad_token(cmd.fence))
    if isinstance(cmd, c.Delete):
        return (_bad_text("key", cmd.key, limits.KEY_BYTES_MAX)
                or _bad_version(cmd.expected_version) or _bad_token(cmd.fence))
    if isinstance(cmd, c.Get):
        return _bad_text("key", cmd.key, limits.KEY_BYTES_MAX)
    if isinstance(cmd, c.ListKeys):
        if not isinstance(cmd.prefix, str) or len(cmd.prefix.encode()) > limits.KEY_BYTES_MAX:
            return f"prefix must be a string of at most {limits.KEY_BYTES_MAX} bytes"
        if not isinstance(cmd.limit, int) or cmd.limit < 0:
            return "limit must be a non-negative integer"
        if not isinstance(cmd.with_values, bool):
            return "with_values must be a boolean"
    return None


def _bad_term(cmd: c.Command) -> str | None:
    term = getattr(cmd, "term", 0)
    return None if isinstance(term, int) and term >= 0 else "term must be a non-negative int"


def _bad_token(token: object) -> str | None:
    if not isinstance(token, int) or token < 0:
        return "a token is a non-negative integer"
    return None


def _bad_text(what: str, text: object, bytes_max: int) -> str | None:
    if not isinstance(text, str) or not text:
        return f"{what} must be a non-empty string"
    if len(text.encode()) > bytes_max:
        return f"{what} is longer than {bytes_max} bytes"
    return None


def _bad_ttl(ttl_s: object) -> str | None:
    if (not isinstance(ttl_s, float | int) or not math.isfinite(ttl_s)
            or not limits.TTL_MIN_S <= ttl_s <= limits.TTL_MAX_S):
        return f"ttl must be between {limits.TTL_MIN_S} and {limits.TTL_MAX_S} seconds"
    return None


def _bad_version(version: object) -> str | None:
    if version is not None and (not isinstance(version, int) or version < 0):
        return "expected version must be a non-negative integer"
    return None
