"""The partition map as the leading partition manager keeps it in the lock service (§4:
`pm/map`, JSON, one compare-and-set per change, fenced by the leader lease).

Contract: the leader is the map's only writer. Every write is fenced by its leader lease
(the lock service refuses a write whose fencing lease has ended) and only one leader lease
exists at a time, so while a lease lives nobody but its holder changes the map. What a
holder read or wrote under that lease is therefore still the stored map, and `current`
answers it from memory: the assignment pass, every `assign_interval_ms`, costs the lock
service nothing while nothing changes (issue 29: an idle stamp spent ~20% of a core, a
fifth of the lock leader's Gets the pass's map reads). Under another lease (a new term:
another manager may have written meanwhile), after a failed or unanswered write (its
outcome is unknown), and without a lease, it reads the lock service again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from common.errors import Unavailable
from lock_service.client import Lease, LockClient
from partition_layer.partition_map import PartitionMap, bootstrap_split_keys

log = logging.getLogger(__name__)

MAP_KEY = "pm/map"


def read_map(locks: LockClient) -> tuple[PartitionMap, int] | None:
    """The stored map and its lock-service version, or None before the first leader wrote
    one."""
    found = locks.get(MAP_KEY)
    return None if found is None else (PartitionMap.from_json(found[0]), found[1])


@dataclass(frozen=True)
class _Known:
    map: PartitionMap
    version: int  # the lock-service version of MAP_KEY holding `map`
    token: int    # the leader lease it was read or written under


class MapStore:
    """The stored partition map, read and written by one manager (blocking calls: run them
    on a thread). `last` is the map as last read or written here, for answers that must not
    wait on the lock service (heartbeats)."""

    def __init__(self, locks: LockClient, bootstrap_keys: Sequence[str]) -> None:
        self.locks = locks
        self.bootstrap_keys = bootstrap_keys
        self._known: _Known | None = None
        self.last: PartitionMap | None = None

    def current(self, lease: Lease | None) -> tuple[PartitionMap, int]:
        """The stored map and its version: from memory when this manager read or wrote it
        under `lease` (module docstring), else from the lock service — bootstrapped, fenced
        by `lease`, when there is none yet."""
        known = self.known(lease)
        if known is not None:
            return known
        found = read_map(self.locks)
        if found is None:
            return self._bootstrap(lease)
        self._remember(found[0], found[1], lease)
        return found

    def known(self, lease: Lease | None) -> tuple[PartitionMap, int] | None:
        """What `current` answers from memory under `lease`, or None (it would read). Only
        while `lease` is valid: past its claim another manager may lead and have written."""
        known = self._known
        if known is None or lease is None or known.token != lease.token or not lease.valid():
            return None
        return known.map, known.version

    def write(self, new: PartitionMap, version: int, lease: Lease | None) -> PartitionMap:
        """Store `new` if the stored map is still at `version` (fenced by `lease`)."""
        new.validate()  # invariant 4 at every version written
        self._known = None  # until the write's outcome is known
        written = self.locks.compare_and_set(MAP_KEY, version, new.to_json(), fence=lease)
        if written is None:
            raise Unavailable("the partition map changed under this pass; trying again")
        self._remember(new, written, lease)
        return new

    def forget(self) -> None:
        """Read the lock service next time (the lease ended, or a test changed the map)."""
        self._known = None

    def _bootstrap(self, lease: Lease | None) -> tuple[PartitionMap, int]:
        fresh = PartitionMap.bootstrap(bootstrap_split_keys(self.bootstrap_keys))
        written = self.locks.compare_and_set(MAP_KEY, 0, fresh.to_json(), fence=lease)
        if written is None:
            raise Unavailable("the partition map changed while bootstrapping it")
        log.info("bootstrapped the partition map: %d partition(s) for the key space",
                 len(fresh.partitions))
        self._remember(fresh, written, lease)
        return fresh, written

    def _remember(self, current: PartitionMap, version: int, lease: Lease | None) -> None:
        self.last = current
        self._known = None if lease is None else _Known(current, version, lease.token)


class LeaderMap:
    """The map as the leading manager's parts read and change it — the assignment pass, the
    split and merge coordinator (manager_ops.py), the balancer, an operator's move — rather
    than each through the manager. Every change reads the map and writes it holding `lock`:
    one writer at a time in this process (the store's compare-and-set refuses any other)."""

    def __init__(self, store: MapStore, lease: Callable[[], Lease | None]) -> None:
        self.store = store
        self._lease = lease
        self.lock = asyncio.Lock()

    @property
    def last(self) -> PartitionMap | None:
        """The map as last read or written here, without a lock-service call."""
        return self.store.last

    @property
    def version(self) -> int:
        """The version of `last` (0 before any)."""
        return 0 if self.store.last is None else self.store.last.version

    async def current(self) -> tuple[PartitionMap, int]:
        """The stored map and its lock-service version (MapStore.current; no thread when it
        answers from memory)."""
        lease = self._lease()
        known = self.store.known(lease)
        if known is not None:
            return known
        return await asyncio.to_thread(self.store.current, lease)

    async def write(self, new: PartitionMap, version: int) -> PartitionMap:
        """Store `new` if the stored map is still at `version` (MapStore.write)."""
        return await asyncio.to_thread(self.store.write, new, version, self._lease())
