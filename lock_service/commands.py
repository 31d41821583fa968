"""The commands the lock service's Raft log carries, and the results applying them returns.

Commands are what the leader appends; every replica applies them in log order to its
`LockState` (lock_service/state.py). Commands that change the state carry `at`, the
leader-stamped time (lock_service/leader_time.py): expiry is decided from it, never from a
replica's own clock (§3; which leases ran out, the leader decides from its memory and logs
as Expire: lock_service/lessor.py), and `term`, the term of the leader that stamped it: once
a newer leader's Barrier is applied, a command stamped by an older leader (pysyncobj
forwards the queue of a leader that just lost office) is refused, so a deposed leader's
clock never moves the state's time. Term 0 means unchecked (tests). Commands a client may
retry carry `request_id`, so a retry whose first attempt was applied gets the first result
instead of being applied twice.

These are NamedTuples: immutable, cheap to pickle into the log, and compared by value.
Renaming one breaks journals written before the rename: add new ones instead.
"""

from __future__ import annotations

from typing import NamedTuple

# --- commands ------------------------------------------------------------------------------


class Acquire(NamedTuple):
    """Grant lock `name` to `holder` for `ttl_s`, unless a live lease holds it."""

    at: float
    request_id: str
    name: str
    holder: str
    ttl_s: float
    term: int = 0


class OpenSession(NamedTuple):
    """A lease that holds no lock: keys bound to it vanish when it ends (membership)."""

    at: float
    request_id: str
    holder: str
    ttl_s: float
    term: int = 0


class Renew(NamedTuple):
    """Extend live lease `token` to `ttl_s` from now. The token does not change."""

    at: float
    token: int
    ttl_s: float
    term: int = 0


class Release(NamedTuple):
    at: float
    token: int
    term: int = 0


class Write(NamedTuple):
    """Put `value` at `key`; with `expected_version` a compare-and-set (0: must not exist).

    `lease`: bind the key to that live lease; it is deleted when the lease ends.
    `fence`: refuse the write unless that lease is live (a deposed holder cannot write).
    """

    at: float
    request_id: str
    key: str
    value: bytes
    expected_version: int | None = None
    lease: int = 0
    fence: int = 0
    term: int = 0


class Delete(NamedTuple):
    at: float
    request_id: str
    key: str
    expected_version: int | None = None
    fence: int = 0
    term: int = 0


class Get(NamedTuple):
    """A read through the log: linearizable because it is ordered with every write."""

    key: str


class ListKeys(NamedTuple):
    """The keys under `prefix` in order, at most `limit`; with `with_values` also the values
    and versions of the first ones (`Keys`). (A field with a default: entries logged before
    it replay unchanged.)"""

    prefix: str
    limit: int
    with_values: bool = False


class Tick(NamedTuple):
    """Only moves time forward. (Leaders once proposed it to expire leases by the state's
    time; they propose Expire now. Kept so that journals written before still replay.)"""

    at: float
    term: int = 0


class Expire(NamedTuple):
    """End the leases `tokens`, whose time is up in the leader's memory (lock_service/
    lessor.py: renewals are answered from there, not logged). A lease whose logged expiry
    is still ahead of the state's time is kept: a logged renewal the leader had not yet
    seen applied when it decided."""

    at: float
    tokens: tuple[int, ...]
    term: int = 0


class Barrier(NamedTuple):
    """Opens a leader's term: from now on commands stamped in older terms are refused.
    When the new leader sees it applied, every command of its predecessors is applied too;
    the result's `now` anchors the new leader's clock."""

    term: int = 0


class Announce(NamedTuple):
    """A replica tells the group the gRPC address behind its Raft address (leader hints)."""

    raft_address: str
    grpc_address: str


Command = (Acquire | OpenSession | Renew | Release | Write | Delete | Get | ListKeys | Tick
           | Expire | Barrier | Announce)

# --- results -------------------------------------------------------------------------------


class Granted(NamedTuple):
    token: int
    expires_at: float


class Held(NamedTuple):
    """Not granted: a live lease holds the lock."""

    holder: str
    token: int
    expires_at: float


class Renewed(NamedTuple):
    expires_at: float


class Released(NamedTuple):
    existed: bool


class Written(NamedTuple):
    version: int


class Mismatch(NamedTuple):
    """A compare-and-set (or conditional delete) found another version (0: no such key)."""

    version: int


class Deleted(NamedTuple):
    existed: bool


class Value(NamedTuple):
    value: bytes
    version: int


class Keys(NamedTuple):
    """`values[i]` (value, version) belongs to `keys[i]`, for the first keys whose values fit
    in LIST_VALUE_BYTES_MAX (all of them, as a rule); only when asked `with_values`."""

    keys: tuple[str, ...]
    values: tuple[tuple[bytes, int], ...] = ()


class Now(NamedTuple):
    now: float


class Rejected(NamedTuple):
    """The command was invalid here; `error` names a class of common.errors."""

    error: str
    message: str


Result = (Granted | Held | Renewed | Released | Written | Mismatch | Deleted | Value | Keys
          | Now | Rejected | None)
