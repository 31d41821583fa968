"""`stamp bench idle` counts wake-ups per process (tools/bench/idle.py `wakeups`)."""

from __future__ import annotations

import os
import time

from tools.bench.idle import wakeups


def test_every_sleep_of_a_thread_counts_as_a_wakeup() -> None:
    before = wakeups(os.getpid())
    for _ in range(5):
        time.sleep(0.001)  # each sleep gives up the CPU once: what is counted
    assert wakeups(os.getpid()) >= before + 5
