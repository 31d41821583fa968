"""Memtable (ordered view, exact size accounting, freezing) and the byte-bounded LRU cache."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partition_layer import cache as cache_mod
from partition_layer import memtable as memtable_mod
from partition_layer.cache import LruCache
from partition_layer.memtable import Memtable

small = st.binary(max_size=4)


@given(st.lists(st.tuples(small, small), max_size=60), small, st.none() | small)
def test_memtable_against_a_dict(puts: list[tuple[bytes, bytes]], start: bytes,
                                 end: bytes | None) -> None:
    table = Memtable()
    ref: dict[bytes, bytes] = {}
    for key, value in puts:
        table.put(key, value)
        ref[key] = value
    assert len(table) == len(ref)
    assert table.nbytes == sum(len(k) + len(v) + memtable_mod.ENTRY_OVERHEAD_BYTES
                               for k, v in ref.items())
    for key in ref:
        assert table.get(key) == ref[key] and key in table
    expected = sorted((k, v) for k, v in ref.items()
                      if start <= k and (end is None or k < end))
    assert list(table.items(start, end)) == expected
    assert list(table.items()) == sorted(ref.items())


def test_frozen_memtable_refuses_puts() -> None:
    table = Memtable()
    table.put(b"a", b"1")
    assert table.freeze() is table and table.frozen
    with pytest.raises(AssertionError):
        table.put(b"b", b"2")
    assert table.get(b"a") == b"1"


def cost(key: bytes, value: bytes) -> int:
    return len(key) + len(value) + cache_mod.ENTRY_OVERHEAD_BYTES


def test_cache_evicts_least_recently_used_within_its_bytes() -> None:
    c = LruCache(3 * cost(b"k1", b"x" * 10))
    for i in range(3):
        c.put(f"k{i}".encode(), b"x" * 10)
    assert c.get(b"k0") == b"x" * 10  # k0 is now the most recent
    c.put(b"k3", b"x" * 10)
    assert b"k1" not in c and b"k0" in c and b"k2" in c and b"k3" in c
    assert c.nbytes == 3 * cost(b"k1", b"x" * 10) <= c.max_bytes
    assert c.get(b"k1") is None
    assert (c.hits, c.misses) == (1, 1) and c.hit_ratio == 0.5


def test_cache_replaces_pops_and_refuses_oversized_entries() -> None:
    c = LruCache(1000)
    c.put(b"a", b"1" * 10)
    c.put(b"a", b"2" * 20)
    assert c.nbytes == cost(b"a", b"2" * 20) and len(c) == 1
    assert c.peek(b"a") == b"2" * 20 and c.hits == 0
    c.put(b"big", b"x" * 2000)
    assert b"big" not in c and c.get(b"a") is not None
    c.put(b"a", b"x" * 2000)  # an oversized replacement drops the old entry
    assert b"a" not in c and c.nbytes == 0
    c.put(b"b", b"")
    assert c.pop(b"b") == b"" and c.pop(b"b", "gone") == "gone" and c.nbytes == 0
    c.put(b"c", b"1")
    c.clear()
    assert len(c) == 0 and c.nbytes == 0


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 300)), max_size=200))
def test_cache_stays_within_bounds(ops: list[tuple[int, int]]) -> None:
    c = LruCache(1000, sizeof=lambda v: v)
    for key, size in ops:
        c.put(key, size)
        assert c.nbytes <= 1000
        assert c.nbytes == sum(v + cache_mod.ENTRY_OVERHEAD_BYTES
                               for v in (c.peek(k) for k in range(21) if k in c))
