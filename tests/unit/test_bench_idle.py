"""`stamp bench idle` counts wake-ups per process and CPU by kind of thread."""

from __future__ import annotations

import os
import time

from tools.bench.idle import wakeups


def test_every_sleep_of_a_thread_counts_as_a_wakeup() -> None:
    before = wakeups(os.getpid())
    for _ in range(5):
        time.sleep(0.001)  # each sleep gives up the CPU once: what is counted
    assert wakeups(os.getpid()) >= before + 5


def test_thread_cpu_counts_a_python_threads_work_as_python() -> None:
    import threading

    from tools.bench.idle import thread_cpu

    def spin() -> None:
        until = time.thread_time() + 0.05
        while time.thread_time() < until:
            pass
    before = thread_cpu(os.getpid()).get("python", 0.0)
    worker = threading.Thread(target=spin)
    worker.start()
    worker.join()
    # The thread ended: its time is gone from /proc, so the main thread spins too.
    spin()
    assert thread_cpu(os.getpid())["python"] >= before + 0.05
