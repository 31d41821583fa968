"""Sample-and-hold of the accounts that send the most requests to one partition server
(Estan and Varghese, "New directions in traffic measurement", 2002; WAS §8). Pure: the times
and the random source are passed in.

How it works: every request counts towards the total with its weight (what it costs the
server: the throttle weighs a request by its bytes, as Estan and Varghese sample by the byte).
A request of an account already held counts towards that account; a request of an account not
held is sampled with probability 1 - (1 - p)**weight (p per unit of weight), and a sampled
account is held from then on. An account sending n units is held after about 1/p of them, so
a top talker is held early and its count is exact from then on, while quiet accounts are
rarely held at all. Its share of the load is its count over the total.

Bounds: at most `held_max` accounts are held. A newly sampled account takes the place of the
held account with the smallest count when the table is full (as Space-Saving does): a top
talker's count grows far beyond a newcomer's, so it is not displaced, while the quiet
accounts churn among themselves. Counts and the total halve every `window_s` (an old load
fades) and an account whose count falls below one is let go.
"""

from __future__ import annotations

from typing import Protocol


class RandomSource(Protocol):
    def random(self) -> float:
        """A float uniformly drawn from [0, 1): `random.Random` with a seed, in tests."""
        ...


class TopTalkers:
    def __init__(self, sample_probability: float, held_max: int, window_s: float,
                 rng: RandomSource, now: float) -> None:
        assert 0.0 < sample_probability <= 1.0 and held_max > 0 and window_s > 0
        self._p = sample_probability
        self._held_max = held_max
        self._window_s = window_s
        self._rng = rng
        self._window_start = now
        self._held: dict[str, float] = {}
        self._total = 0.0

    def count(self, account: str, now: float, weight: float = 1.0) -> None:
        """One request of `account` to this server, costing it `weight` units (> 0)."""
        self._age(now)
        self._total += weight
        if account in self._held:
            self._held[account] += weight
        elif self._rng.random() < 1.0 - (1.0 - self._p) ** weight:
            if len(self._held) >= self._held_max:
                smallest = min(self._held, key=self._held.__getitem__)
                del self._held[smallest]
            self._held[account] = weight

    def share(self, account: str, now: float) -> float:
        """The fraction of this server's recent requests that `account` sent (0 if not held)."""
        self._age(now)
        if self._total <= 0.0:
            return 0.0
        return min(1.0, self._held.get(account, 0.0) / self._total)

    def held_count(self) -> int:
        """How many accounts are held (an equal share of the load is 1 / this)."""
        return len(self._held)

    def held(self) -> dict[str, float]:
        """The held accounts and their (decayed) counts: for status and tests."""
        return dict(self._held)

    def _age(self, now: float) -> None:
        windows = int((now - self._window_start) / self._window_s)
        if windows <= 0:
            return
        self._window_start += windows * self._window_s
        # 2**-64 makes anything we could hold vanish; it also keeps the exponent small.
        factor = 0.5 ** min(windows, 64)
        self._total *= factor
        self._held = {a: c * factor for a, c in self._held.items() if c * factor >= 1.0}
