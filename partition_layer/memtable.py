"""The memtable: the rows written since the last checkpoint, in key order (§4).

Keys and values are bytes (encoded keys, encoded rows). `nbytes` estimates the memory held,
exact under overwrites, and is what the checkpoint threshold is compared with.

Contract: a checkpoint calls `freeze()` and then only reads the memtable (writes go to a
fresh one); `put` on a frozen memtable is a bug and asserts. Iterating a live memtable across
an `await` is unsafe (a put may reshape it): copy what you need first, or freeze it.
"""

from __future__ import annotations

from collections.abc import Iterator

from sortedcontainers import SortedDict

from partition_layer.rows import decode_row

# Python's per-entry cost beyond the bytes themselves: two bytes objects (~33 B each), the
# dict slot and the sorted-list slot. An estimate; only its order of magnitude matters.
ENTRY_OVERHEAD_BYTES = 100


class Memtable:
    __slots__ = ("_frozen", "_nbytes", "_rows")

    def __init__(self) -> None:
        self._rows: SortedDict = SortedDict()
        self._nbytes = 0
        self._frozen = False

    def put(self, key: bytes, row_bytes: bytes) -> None:
        assert not self._frozen, "put on a frozen memtable"
        old = self._rows.get(key)
        if old is None:
            self._nbytes += len(key) + len(row_bytes) + ENTRY_OVERHEAD_BYTES
        else:
            self._nbytes += len(row_bytes) - len(old)
        self._rows[key] = row_bytes

    def get(self, key: bytes) -> bytes | None:
        return self._rows.get(key)

    def items(self, start: bytes = b"", end: bytes | None = None
              ) -> Iterator[tuple[bytes, bytes]]:
        """(key, row bytes) for keys in [start, end), ascending; end None: to the end."""
        rows = self._rows
        if end is not None and end <= start:
            return
        for key in rows.irange(start, end, inclusive=(True, False)):
            yield key, rows[key]

    def live_prefix(self, start: bytes, end: bytes | None, live_max: int
                    ) -> list[tuple[bytes, bytes]]:
        """A copy of the entries from `start` until `live_max` live rows (tombstones included
        along the way): no merged result past them can be among the first live_max - 1."""
        copied: list[tuple[bytes, bytes]] = []
        live = 0
        for key, encoded in self.items(start, end):
            copied.append((key, encoded))
            if not decode_row(encoded).tombstone:
                live += 1
                if live >= live_max:
                    break
        return copied

    def keys_spread(self, count: int) -> list[bytes]:
        """Up to `count` keys spread evenly over the memtable by position, ascending: each
        stands for about len/count entries (size_split.py). O(count log n), no full walk."""
        n = len(self._rows)
        if n <= count:
            return list(self._rows.keys())
        keys = self._rows.keys()
        return [keys[i * n // count] for i in range(count)]

    def freeze(self) -> Memtable:
        """Mark read-only (for a checkpoint) and return self."""
        self._frozen = True
        return self

    @property
    def frozen(self) -> bool:
        return self._frozen

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: object) -> bool:
        return key in self._rows
