"""A byte-bounded LRU cache (the partition's row cache and block cache, §4).

Contract: after every call, `nbytes <= max_bytes`, where an entry costs
`sizeof(value) + key bytes + ENTRY_OVERHEAD_BYTES`; an entry larger than the whole cache is
not kept. `get` counts hits and misses. Not thread-safe (one event loop owns it).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

# Per-entry cost beyond the value: the ordered dict's node and slot, the key object.
ENTRY_OVERHEAD_BYTES = 100


def _key_bytes(key: Hashable) -> int:
    return len(key) if isinstance(key, bytes | bytearray | str) else 0


class LruCache:
    def __init__(self, max_bytes: int, sizeof: Callable[[Any], int] = len) -> None:
        assert max_bytes >= 0
        self.max_bytes = max_bytes
        self._sizeof = sizeof
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._nbytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable, default: Any = None) -> Any:
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return default
        self._entries.move_to_end(key)
        self.hits += 1
        return entry[0]

    def peek(self, key: Hashable, default: Any = None) -> Any:
        """Like get, but neither counts nor refreshes the entry."""
        entry = self._entries.get(key)
        return default if entry is None else entry[0]

    def put(self, key: Hashable, value: Any) -> None:
        self.pop(key)
        cost = self._sizeof(value) + _key_bytes(key) + ENTRY_OVERHEAD_BYTES
        if cost > self.max_bytes:
            return
        self._entries[key] = (value, cost)
        self._nbytes += cost
        while self._nbytes > self.max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self._nbytes -= evicted

    def pop(self, key: Hashable, default: Any = None) -> Any:
        entry = self._entries.pop(key, None)
        if entry is None:
            return default
        self._nbytes -= entry[1]
        return entry[0]

    def clear(self) -> None:
        self._entries.clear()
        self._nbytes = 0

    @property
    def nbytes(self) -> int:
        return self._nbytes

    @property
    def hit_ratio(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def items(self) -> list[tuple[Hashable, Any]]:
        """(key, value) of every entry, least recently used first (a copy: `put`ting them
        into another cache in this order keeps their recency there)."""
        return [(key, value) for key, (value, _) in self._entries.items()]
