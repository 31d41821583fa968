"""The load split finder (partition_layer/load_finder.py) on an injected clock: the candidates
it keeps, the key it picks (or why it refuses), its windows; its counters against a dumb
reference that counts every request against every candidate, as CockroachDB's finder does."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.clock import ManualClock
from partition_layer.load_finder import (
    SAMPLES_MAX,
    LoadFinder,
    Sample,
    best_key,
    scores,
)
from partition_layer.operations import meta_key

NAMES = 256


def name(i: int) -> bytes:
    return meta_key("acct", f"log-{i:04d}")


def fed(requests: list[bytes], seed: int = 0) -> tuple[Sample, ...]:
    finder = LoadFinder(ManualClock(), seed=seed)
    for key in requests:
        finder.record(key)
    samples, counted = finder.report()
    assert counted == len(requests)
    return samples


def test_uniform_load_over_names_splits_near_the_middle() -> None:
    rng = random.Random(7)
    samples = fed([name(rng.randrange(NAMES)) for _ in range(20_000)])
    assert len(samples) == SAMPLES_MAX
    key, why = best_key(samples, b"", None)
    assert key is not None, why
    index = int(key.decode("latin-1").split("log-")[1][:4])
    assert NAMES * 3 // 8 <= index <= NAMES * 5 // 8, (index, why)
    _, left, right, _ = next(s for s in samples if s[0] == key)
    assert abs(left - right) / (left + right) < 0.25


def test_all_load_on_one_name_gives_no_key() -> None:
    samples = fed([name(42)] * 5000)
    assert {s[0] for s in samples} == {name(42)}
    assert all(left == 0 and right > 0 for _, left, right, _ in samples)  # at the key: right
    key, why = best_key(samples, b"", None)
    assert key is None and "unbalanced" in why


def test_scans_spanning_everything_are_refused_as_contained() -> None:
    finder = LoadFinder(ManualClock())
    rng = random.Random(1)
    for _ in range(5000):
        candidate = name(rng.randrange(NAMES))
        finder.record_span(b"", None, candidate)  # every scan covers every candidate
    samples, _ = finder.report()
    assert all(c > 0 and left == right == 0 for _, left, right, c in samples)
    key, why = best_key(samples, b"", None)
    assert key is None and "contained" in why


@pytest.mark.parametrize(("sample", "low", "high", "found", "why"), [
    ((name(5), 60, 40, 0), b"", None, True, "balance 0.20"),
    ((name(5), 99, 0, 0), b"", None, False, "too few requests"),      # 99 < 100
    ((name(5), 70, 30, 0), b"", None, False, "unbalanced"),          # 0.4 >= 0.25
    ((name(5), 50, 50, 100), b"", None, False, "contained"),          # 0.5 >= 0.5
    ((name(5), 50, 50, 99), b"", None, True, "contained 0.50"),        # 99/199 < 0.5
    ((name(5), 50, 50, 0), name(5), None, False, "outside the range"),  # the low key itself
    ((name(5), 50, 50, 0), b"", name(5), False, "outside the range"),
])
def test_a_candidate_is_refused_for_each_rule(sample: Sample, low: bytes, high: bytes | None,
                                              found: bool, why: str) -> None:
    key, reason = best_key([sample], low, high)
    assert (key is not None) == found and why in reason


def test_the_best_candidate_has_the_lowest_sum_of_scores() -> None:
    samples = [(name(1), 110, 90, 0), (name(2), 100, 100, 20), (name(3), 101, 99, 0)]
    assert [round(scores(s).balance + scores(s).contained, 3) for s in samples] == \
        [0.1, 0.091, 0.01]
    assert best_key(samples, b"", None)[0] == name(3)


def test_old_load_fades_with_the_windows() -> None:
    clock = ManualClock()
    finder = LoadFinder(clock, window_s=10.0)
    for _ in range(1000):
        finder.record(name(1))
    clock.advance(10.0)  # a new window: the old one is reported until this one is half done
    for _ in range(10):
        finder.record(name(200))
    samples, counted = finder.report()
    assert counted == 1000 and {s[0] for s in samples} == {name(1)}
    clock.advance(5.0)
    samples, counted = finder.report()
    assert counted == 10 and {s[0] for s in samples} == {name(200)}
    clock.advance(15.0)  # two windows with nothing: nothing is reported
    assert finder.report() == ((), 0)


def test_a_window_that_counted_more_is_reported_at_once() -> None:
    clock = ManualClock()
    finder = LoadFinder(clock, window_s=10.0)
    for _ in range(10):
        finder.record(name(1))
    clock.advance(10.0)
    for _ in range(11):
        finder.record(name(2))
    assert finder.report()[1] == 11


def reference(requests: list[tuple[bytes, bytes | None, bytes]], seed: int) -> list[Sample]:
    """CockroachDB's Finder.Record, one request at a time against every candidate."""
    rng = random.Random(seed)
    slots: list[list] = []  # [key, left, right, contained] in reservoir order
    for count, (start, end, candidate) in enumerate(requests):
        slot = count if count < SAMPLES_MAX else int(rng.random() * (count + 1))
        if slot < SAMPLES_MAX:
            # Ours keeps the slots in key order; replace the slot-th in that order likewise.
            slots.sort(key=lambda s: s[0])
            if slot < len(slots):
                del slots[slot]
            slots.append([candidate, 0, 0, 0])
            continue
        for s in slots:
            if start < s[0] and (end is None or s[0] < end):
                s[3] += 1
            elif s[0] <= start:
                s[2] += 1
            else:
                s[1] += 1
    return sorted(tuple(s) for s in slots)  # type: ignore[misc]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 15), st.integers(0, 15), st.booleans()),
                min_size=SAMPLES_MAX + 10, max_size=300), st.integers(0, 2**32))
def test_counters_match_counting_every_request(ops: list[tuple[int, int, bool]],
                                               seed: int) -> None:
    finder = LoadFinder(ManualClock(), seed=seed)
    requests: list[tuple[bytes, bytes | None, bytes]] = []
    for a, b, is_span in ops:
        if is_span:
            start, end = name(min(a, b)), (name(max(a, b) + 1) if a != b else None)
            finder.record_span(start, end, start)
            requests.append((start, end, start))
        else:
            finder.record(name(a))
            requests.append((name(a), name(a), name(a)))
    samples, counted = finder.report()
    assert counted == len(requests)
    assert sorted(samples) == reference(requests, seed)


@pytest.mark.parametrize(("share", "expected"), [(0.5, name(3)), (0.2, name(1)), (0.1, None)])
def test_a_cut_for_a_share_of_the_load(share: float, expected: bytes | None) -> None:
    # Left shares 0.2, 0.35 and 0.5: a half is name(3)'s; a fifth is name(1)'s (or the right
    # of a 0.8 left); a tenth is nobody's within 25% of it.
    samples = [(name(1), 200, 800, 0), (name(2), 350, 650, 0), (name(3), 500, 500, 0)]
    assert best_key(samples, b"", None, share=share)[0] == expected
    mirrored = [(key, right, left, c) for key, left, right, c in samples]
    assert best_key(mirrored, b"", None, share=share)[0] == expected
