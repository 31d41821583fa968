"""Sample-and-hold of a partition server's top talkers (frontend/talkers.py; WAS §8): the
shares it estimates against the true shares of a seeded workload, a top talker that a crowd
of quiet accounts cannot displace, the bound on held accounts, and the decay of old load."""

from __future__ import annotations

import random

import pytest

from frontend.talkers import TopTalkers


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_shares_of_the_top_talkers_are_estimated_within_a_few_percent(seed: int) -> None:
    rng = random.Random(seed)
    talkers = TopTalkers(0.01, held_max=16, window_s=1000.0, rng=random.Random(seed + 100),
                         now=0.0)
    # Two talkers with 50% and 20% of the requests; 300 quiet accounts share the rest.
    weights = {"big": 0.5, "mid": 0.2}
    for _ in range(100_000):
        draw = rng.random()
        if draw < 0.5:
            account = "big"
        elif draw < 0.7:
            account = "mid"
        else:
            account = f"quiet-{rng.randrange(300)}"
        talkers.count(account, 1.0)
    for account, true_share in weights.items():
        assert talkers.share(account, 1.0) == pytest.approx(true_share, abs=0.02), seed
    # A quiet account sent ~0.1% of the load: if held at all, its share says so.
    assert all(talkers.share(f"quiet-{i}", 1.0) < 0.01 for i in range(300))
    assert len(talkers.held()) <= 16


def test_a_crowd_of_newcomers_does_not_displace_the_top_talker() -> None:
    talkers = TopTalkers(1.0, held_max=4, window_s=1000.0, rng=random.Random(1), now=0.0)
    for _ in range(100):
        talkers.count("noisy", 0.0)
    for i in range(10_000):
        talkers.count(f"newcomer-{i}", 0.0)
        talkers.count("noisy", 0.0)
    assert len(talkers.held()) == 4
    assert talkers.held()["noisy"] == 10_100
    assert talkers.share("noisy", 0.0) == pytest.approx(10_100 / 20_100)


def test_old_load_fades_and_a_talker_gone_quiet_is_let_go() -> None:
    talkers = TopTalkers(1.0, held_max=4, window_s=1.0, rng=random.Random(1), now=0.0)
    for _ in range(64):
        talkers.count("was-noisy", 0.0)
    talkers.count("steady", 0.5)
    # Each window halves every count: 64 → 1 after 6 windows, below 1 (gone) after 7.
    assert talkers.held()["was-noisy"] == 64
    talkers.count("steady", 6.5)
    assert talkers.held()["was-noisy"] == 1.0
    assert talkers.share("was-noisy", 6.5) == pytest.approx(1.0 / (65 / 64 + 1))
    talkers.count("steady", 7.5)
    assert "was-noisy" not in talkers.held()
    assert talkers.share("was-noisy", 7.5) == 0.0
    # Long silence (windows beyond what a float halves to anything): nothing is left.
    assert talkers.share("steady", 10_000.0) == 0.0
    assert talkers.held() == {}


def test_an_unsampled_account_has_no_share() -> None:
    class Never:
        def random(self) -> float:
            return 0.999

    talkers = TopTalkers(0.5, held_max=4, window_s=1.0, rng=Never(), now=0.0)
    for _ in range(100):
        talkers.count("a", 0.0)
    assert talkers.share("a", 0.0) == 0.0 and talkers.held() == {}
    assert TopTalkers(0.5, 4, 1.0, Never(), 0.0).share("a", 0.0) == 0.0


def test_a_top_talker_arriving_at_a_full_table_is_held() -> None:
    talkers = TopTalkers(1.0, held_max=4, window_s=1000.0, rng=random.Random(1), now=0.0)
    for i in range(4):
        talkers.count(f"early-quiet-{i}", 0.0)
    for i in range(1000):
        talkers.count("noisy", 0.0)
        talkers.count(f"early-quiet-{i % 4}", 0.0)
    assert talkers.held()["noisy"] == 1000
    assert talkers.share("noisy", 0.0) == pytest.approx(1000 / 2004)
