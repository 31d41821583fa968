"""The front end's AccountThrottle on a manual clock, and a load to run through it."""

from __future__ import annotations

import random
from collections import defaultdict

from common.clock import ManualClock
from common.config import FrontEndLimits
from frontend.throttle import AccountThrottle, Reason

# Rates so high that only overload refuses anything.
UNLIMITED = FrontEndLimits(account_requests_per_s_max=1e9, account_burst_requests_max=10**9,
                           account_bytes_per_s_max=10**12, account_burst_bytes_max=10**12)


def make(limits: FrontEndLimits, seed: int = 1) -> tuple[AccountThrottle, ManualClock]:
    clock = ManualClock()
    return AccountThrottle(limits, clock, random.Random(seed)), clock


def run_load(throttle: AccountThrottle, clock: ManualClock, steps: int,
             per_step: dict[str, int], server: str = "ps-1",
             report: tuple[int, float] | None = None) -> dict[str, tuple[int, int]]:
    """Each step (10 ms) every account sends its requests, interleaved; a report, if given,
    is repeated every 100 steps. Returns (offered, refused) per account."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    order = [a for a, n in per_step.items() for _ in range(n)]
    rng = random.Random(7)
    for step in range(steps):
        if report is not None and step % 100 == 0:
            throttle.observe_server(server, *report)
        rng.shuffle(order)
        for account in order:
            decision = throttle.admit(account, server, 100)
            counts[account][0] += 1
            if not decision.admitted:
                assert decision.reason is Reason.SERVER_OVERLOAD
                counts[account][1] += 1
        clock.advance(0.01)
    return {a: (c[0], c[1]) for a, c in counts.items()}
