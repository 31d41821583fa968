"""The nemesis's schedule: which fault, where, when and for how long — a pure function of the
seed, the run's length and the stamp's shape, so the same seed replays the same schedule
(`stamp chaos --seed S` prints it; the report keeps it).

Contract:
- faults come one at a time: each is undone (process restarted, thawed, healed, fault point
  disarmed) before a quiet gap and the next one. The stamp promises to survive the loss of
  any one node at any moment (DESIGN §8), not of several at once;
- kinds are dealt from a shuffled deck, reshuffled when used up: every schedule of at least
  `len(KINDS)` faults holds every kind, and a short one holds as many kinds as faults;
- the first deck fits the run: when its holds and gaps, at their drawn lengths, would start
  its last fault after FIRST_DECK_SHARE of the time faults may start in, they are shortened
  in proportion (not below MIN_HOLD_S, MIN_GAP_S) so that it starts by then, leaving the
  rest for what the schedule cannot know (restarts take longer on a loaded machine). A run
  of FIRST_DECK_RUN_S or more therefore deals every kind; later decks keep their pace;
- process faults (kill, freeze, isolate) deal the roles from a deck of their own, so every
  role (lock, SM, EN, PM, PS, FE) is hit as soon as there are six of them;
- `pick` is a seeded number for choices only the running stamp can make (which sealed extent
  to flip, which partition to merge), so even those replay the same way on the same state.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass

PROCESS_KINDS = ("kill", "freeze", "isolate")
DISK_KINDS = ("slow_disk", "failing_disk", "torn_write", "flip_disk")  # on extent nodes
PARTITION_KINDS = ("split", "merge", "move")
KINDS = (*PROCESS_KINDS, *DISK_KINDS, "flip_read", "power_cut", *PARTITION_KINDS)
ROLES = ("lock", "sm", "en", "pm", "ps", "fe")

HOLD_S = {  # how long a fault lasts before it is undone, (min, max) seconds
    "kill": (1.0, 6.0), "freeze": (1.0, 6.0), "isolate": (2.0, 8.0),
    "slow_disk": (3.0, 10.0), "failing_disk": (3.0, 8.0), "torn_write": (2.0, 6.0),
    "flip_read": (3.0, 8.0), "flip_disk": (0.0, 0.0), "power_cut": (0.0, 0.0),
    "split": (0.0, 0.0), "merge": (0.0, 0.0), "move": (0.0, 0.0),
}
GAP_S = (1.5, 5.0)  # quiet time after a fault is undone, before the next
START_S = 3.0  # the workload runs alone this long first
END_QUIET_S = 5.0  # and this long at the end: no fault starts after duration - END_QUIET_S
SLOW_FSYNC_MS = (50, 300)
FIRST_DECK_SHARE = 0.5
MIN_HOLD_S = 0.5  # a held fault shortened to fit the first deck lasts at least this
MIN_GAP_S = 0.5
FIRST_DECK_RUN_S = 60.0  # a run this long deals every kind (schedule's time)

_Draw = tuple[str, float, float, str, str, int]  # kind, hold, gap, target, detail, pick


@dataclass(frozen=True)
class Fault:
    """One fault of the schedule (module docstring)."""

    at_s: float  # when it starts, seconds from the start of the run
    kind: str  # one of KINDS
    target: str  # a process; "ps-*": every PS; "stamp": all (power cut); a log (partitions)
    hold_s: float  # how long it lasts before it is undone (0: an instant fault)
    pick: int  # a seeded number for choices made on the running stamp
    detail: str = ""  # e.g. the fault point spec armed

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def describe(self) -> str:
        hold = f" for {self.hold_s:.1f}s" if self.hold_s else ""
        detail = f" ({self.detail})" if self.detail else ""
        return f"t={self.at_s:7.1f}s {self.kind:<12} {self.target}{hold}{detail}"


def make_schedule(seed: int, duration_s: float, roles: Mapping[str, Sequence[str]],
                  logs: Sequence[str], power_cuts: bool) -> list[Fault]:
    """The faults of a run of `duration_s` seconds on a stamp whose processes are `roles`
    (role -> process names, e.g. {"en": ["en-1", ...]}), whose workload writes `logs`;
    `power_cuts`: whether the stamp runs where power can be cut (a lossy file system)."""
    rng = random.Random(seed)
    kinds = [k for k in KINDS if power_cuts or k != "power_cut"]
    kinds = [k for k in kinds if _possible(k, roles)]
    kind_deck = _deck(rng, kinds)
    role_deck = _deck(rng, [r for r in ROLES if roles.get(r)])
    drawn: list[_Draw] = []  # in the order dealt
    at = START_S
    while at < duration_s - END_QUIET_S or len(drawn) < len(kinds):
        kind = next(kind_deck)
        hold = round(rng.uniform(*HOLD_S[kind]), 1)
        target, detail = _target(kind, rng, roles, role_deck, logs)
        drawn.append((kind, hold, rng.uniform(*GAP_S), target, detail,
                      rng.randrange(1 << 30)))
        at += drawn[-1][1] + drawn[-1][2] + _settle_s(kind)
    drawn[:len(kinds)] = _fit_first_deck(drawn[:len(kinds)], duration_s)
    faults = []
    at = START_S
    for kind, hold, gap, target, detail, pick in drawn:
        if at >= duration_s - END_QUIET_S:
            break
        faults.append(Fault(round(at, 1), kind, target, hold, pick, detail))
        at += hold + gap + _settle_s(kind)
    return faults


def _fit_first_deck(deck: list[_Draw], duration_s: float) -> list[_Draw]:
    """The first deck with its holds and gaps shortened in proportion so that its last
    fault starts by FIRST_DECK_SHARE of the time faults may start in (module docstring)."""
    if len(deck) < 2:
        return deck
    budget = (duration_s - END_QUIET_S - START_S) * FIRST_DECK_SHARE
    before_last = deck[:-1]
    settle = sum(_settle_s(kind) for kind, *_ in before_last)
    paced = sum(hold + gap for _, hold, gap, *_ in before_last)
    if settle + paced <= budget or paced == 0:
        return deck
    scale = max(0.0, budget - settle) / paced
    return [(kind, round(max(MIN_HOLD_S, hold * scale), 1) if hold else 0.0,
             max(MIN_GAP_S, gap * scale), target, detail, pick)
            for kind, hold, gap, target, detail, pick in deck]


def _possible(kind: str, roles: Mapping[str, Sequence[str]]) -> bool:
    if kind in DISK_KINDS:
        return bool(roles.get("en"))
    if kind == "flip_read":
        return bool(roles.get("ps"))
    if kind == "move":
        return len(roles.get("ps", ())) >= 2
    return True


def _settle_s(kind: str) -> float:
    """Time a fault usually takes beyond its hold (a restart, a whole stamp coming back), so
    that the schedule's times stay near what happens."""
    return {"power_cut": 10.0, "kill": 2.0, "torn_write": 2.0, "failing_disk": 1.0,
            "split": 2.0, "merge": 2.0, "move": 2.0}.get(kind, 0.0)


def _deck(rng: random.Random, items: list[str]) -> Iterator[str]:
    while True:
        cards = list(items)
        rng.shuffle(cards)
        yield from cards


def _target(kind: str, rng: random.Random, roles: Mapping[str, Sequence[str]],
            role_deck: Iterator[str], logs: Sequence[str]) -> tuple[str, str]:
    if kind in PROCESS_KINDS:
        return rng.choice(list(roles[next(role_deck)])), ""
    if kind == "slow_disk":
        return rng.choice(list(roles["en"])), \
            f"journal.before_fsync=delay:{rng.randint(*SLOW_FSYNC_MS)}"
    if kind == "failing_disk":
        # Either its reads fail for the hold (readers pass the node over), or its next
        # journal write fails: an extent node whose journal cannot write stops (fail-stop,
        # recovery replays the journal) and the nemesis starts it again.
        return rng.choice(list(roles["en"])), rng.choice(
            ["en.read=fail", "journal.before_write=fail,times=1"])
    if kind == "torn_write":
        return rng.choice(list(roles["en"])), "journal.torn_write=torn,times=1"
    if kind == "flip_disk":
        return rng.choice(list(roles["en"])), "a byte of a sealed replica, at rest"
    if kind == "flip_read":
        # On every partition server: whichever serves what is read now flips it.
        return "ps-*", "ps.read.flip_record=flip; ps.read.flip_value=flip"
    if kind == "power_cut":
        return "stamp", ""
    return rng.choice(list(logs)), ""  # split / merge / move at the partition of this log
