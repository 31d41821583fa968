"""The geo nemesis's schedule (`stamp chaos --geo`, issue 30): which fault of a location of two
stamps, when and for how long — a pure function of the seed, the run's length and whether a
stamp runs on a lossy file system, so the same seed replays the same schedule. Its faults are
`schedule.Fault`s, so the run, its display and its report treat them as the one-stamp ones.

Kinds (tools/chaos/geo_nemesis.py applies them):
- cut_link: every partition server of each stamp cut off from the other stamp's front ends
  (the replication link, both ways) for the hold, then healed;
- kill_secondary: SIGKILL every process of the account's secondary stamp; after the hold,
  started again;
- power_cut: the power of the stamp on the lossy file system cut (whatever its role then),
  then started again;
- planned_failover: the account's roles swapped with nothing acknowledged lost;
- unplanned_failover: the link cut for UNPLANNED_CUT_S (so that writes are acknowledged that
  never reach the secondary), SIGKILL every process of the primary stamp, an unplanned
  failover (the `--yes` path), the old primary kept down for the hold, then started again:
  it demotes itself and sets its unshipped tail aside; then it is bootstrapped (`stamp
  location bootstrap`), a live secondary again, so that every kind can follow.

Contract:
- faults come one at a time, each undone before a quiet gap and the next;
- kinds are dealt from a shuffled deck, reshuffled when used up: every schedule holds every
  kind (a short one goes on past the run's length: with `--every-kind` the run waits for
  them, without it ends before its last faults);
- the first deck fits the run: when its drawn holds and gaps would end it after the run's
  length less END_QUIET_S, they are shortened in proportion (a hold not below half its
  kind's shortest, a gap not below MIN_GAP_S; what a fault takes beyond its hold, SETTLE_S,
  is what it is); later decks are dealt while they fit, at their drawn pace;
- `pick` is a seeded number for choices made on the running location (none yet).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from tools.chaos.schedule import Fault

GEO_KINDS = ("cut_link", "kill_secondary", "power_cut", "planned_failover",
             "unplanned_failover")

HOLD_S = {  # how long a fault lasts before it is undone, (min, max) seconds
    "cut_link": (4.0, 12.0),
    "kill_secondary": (2.0, 8.0),
    "power_cut": (0.0, 0.0),
    "planned_failover": (0.0, 0.0),
    # the old primary kept down after the failover: longer than the SDK's suspect delay
    # (1 s), so that every busy client has asked the location again before it is back
    "unplanned_failover": (3.0, 6.0),
}
SETTLE_S = {  # what a fault usually takes beyond its hold: a stamp's restart, a failover,
    # for an unplanned one the old primary's restart, its tail, the bootstrap
    "cut_link": 0.0, "kill_secondary": 7.0, "power_cut": 10.0, "planned_failover": 4.0,
    "unplanned_failover": 25.0,
}
UNPLANNED_CUT_S = 3.0  # the link cut before the primary is killed (part of the fault)
GAP_S = (2.0, 6.0)  # quiet time after a fault is undone, before the next
START_S = 5.0  # the workload runs alone this long first
END_QUIET_S = 5.0  # and at least this long after the last fault is expected to end
MIN_GAP_S = 1.0

_Draw = tuple[str, float, float, int]  # kind, hold, gap, pick


def make_geo_schedule(seed: int, duration_s: float, power_cut_site: str | None
                      ) -> list[Fault]:
    """The faults of a run of `duration_s` seconds (module docstring); `power_cut_site`: the
    stamp on a lossy file system, whose power can be cut (None: no power cut)."""
    rng = random.Random(seed)
    kinds = [k for k in GEO_KINDS if power_cut_site is not None or k != "power_cut"]
    deck = _deck(rng, kinds)
    end = duration_s - END_QUIET_S
    drawn = _fit([_draw(rng, next(deck)) for _ in kinds], end - START_S)
    at = START_S + sum(_span_s(d) for d in drawn)
    while True:
        more = _draw(rng, next(deck))
        if at + _span_s(more) > end:
            break
        drawn.append(more)
        at += _span_s(more)
    faults = []
    at = START_S
    for draw in drawn:
        kind, hold, _, pick = draw
        faults.append(Fault(round(at, 1), kind, _target(kind, power_cut_site), hold, pick,
                            _detail(kind)))
        at += _span_s(draw)
    return faults


def _draw(rng: random.Random, kind: str) -> _Draw:
    return (kind, round(rng.uniform(*HOLD_S[kind]), 1), round(rng.uniform(*GAP_S), 1),
            rng.randrange(1 << 30))


def _span_s(draw: _Draw) -> float:
    """From a fault's start to the next one's, as planned."""
    kind, hold, gap, _ = draw
    return hold + gap + _settle_s(kind)


def _settle_s(kind: str) -> float:
    return SETTLE_S[kind] + (UNPLANNED_CUT_S if kind == "unplanned_failover" else 0.0)


def _fit(deck: list[_Draw], budget_s: float) -> list[_Draw]:
    """`deck` with its holds and gaps shortened in proportion so that it takes `budget_s` at
    most (module docstring)."""
    settle = sum(_settle_s(kind) for kind, *_ in deck)
    paced = sum(hold + gap for _, hold, gap, _ in deck)
    if settle + paced <= budget_s or paced == 0:
        return deck
    scale = max(0.0, budget_s - settle) / paced
    return [(kind, round(max(HOLD_S[kind][0] / 2, hold * scale), 1) if hold else 0.0,
             round(max(MIN_GAP_S, gap * scale), 1), pick)
            for kind, hold, gap, pick in deck]


def _deck(rng: random.Random, items: list[str]) -> Iterator[str]:
    while True:
        cards = list(items)
        rng.shuffle(cards)
        yield from cards


def _target(kind: str, power_cut_site: str | None) -> str:
    return {"cut_link": "link", "kill_secondary": "secondary", "planned_failover": "account",
            "unplanned_failover": "primary"}.get(kind) or str(power_cut_site)


def _detail(kind: str) -> str:
    if kind == "unplanned_failover":
        return (f"link cut {UNPLANNED_CUT_S:g}s, primary SIGKILLed, failover, old primary "
                "back, bootstrapped")
    return ""
