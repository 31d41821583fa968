"""Bloom filter: no false negatives, ~1% false positives at 10 bits per key, fast builds."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import Internal
from partition_layer.bloom import BloomFilter


@given(st.lists(st.binary(max_size=20), max_size=200))
def test_no_false_negatives_and_round_trip(keys: list[bytes]) -> None:
    bf = BloomFilter.build(keys)
    again = BloomFilter.from_bytes(bf.to_bytes())
    assert (again.k, again.m) == (bf.k, bf.m)
    for key in keys:
        assert bf.may_contain(key) and again.may_contain(key)


def test_false_positive_rate_near_one_percent() -> None:
    rng = random.Random(7)
    keys = [rng.randbytes(16) for _ in range(50_000)]
    bf = BloomFilter.build(keys, bits_per_key=10)
    probes = [b"x" + rng.randbytes(16) for _ in range(50_000)]
    rate = sum(bf.may_contain(p) for p in probes) / len(probes)
    assert 0.002 < rate < 0.015, rate
    tight = BloomFilter.build(keys, bits_per_key=4)
    assert sum(tight.may_contain(p) for p in probes) / len(probes) > rate


def test_empty_filter_rejects_almost_everything() -> None:
    bf = BloomFilter.build([])
    assert not any(bf.may_contain(bytes([i])) for i in range(256))


def test_malformed_filters_raise_internal() -> None:
    raw = BloomFilter.build([b"a", b"b"]).to_bytes()
    for bad in [b"", raw[:5], b"XXXX" + raw[4:], raw[:-1], raw + b"\x00"]:
        with pytest.raises(Internal):
            BloomFilter.from_bytes(bad)


@pytest.mark.slow
def test_a_million_keys_no_false_negative_and_few_false_positives() -> None:
    """At the scale of a big run. (How fast it builds is a benchmark's business, not a
    test's: a timed assertion here failed on a loaded machine.)"""
    rng = random.Random(1)
    keys = [rng.randbytes(24) for _ in range(1_000_000)]
    bf = BloomFilter.build(keys)
    assert all(bf.may_contain(k) for k in keys[::100])
    absent = [rng.randbytes(23) for _ in range(20_000)]
    false_positives = sum(bf.may_contain(k) for k in absent)
    assert false_positives < 0.03 * len(absent), false_positives
