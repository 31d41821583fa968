"""`stamp bench idle` (issue 29): what an idle stamp costs. A stamp of the default shape is
started and left alone (nothing runs against it) for --seconds after a settling time; the CPU
each process spent meanwhile (/proc utime + stime) is reported as a percentage of one core,
by kind of process and in all. Target: at most 5% of a core.

Beside it, how often the kind's threads woke (`wakeups_per_s`: voluntary context switches of
every thread, /proc/PID/task/*/status): an idle process spends its CPU mostly on waking up
(a timer, a heartbeat, a poll), so this says where to look, and it does not depend on the
machine's speed the way CPU time does.

And by kind of thread, over every process (`threads` rows, from /proc/PID/task/*/schedstat,
exact to the nanosecond): the Python interpreter's threads (`python`: Raft ticks, event
loops, renewals, handlers), gRPC core's (`grpc`: its EventEngine pool and timers) and the
rest (`other`: uvloop's workers): what is left to win, and where."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.bench.fresh_stamp import with_fresh_stamp
from tools.bench.front_end import cpu_seconds
from tools.bench.measure import row
from tools.local_stamp import LocalStamp

Progress = Callable[[str], None]
# After `stamp up` returns, leaders settle, first checkpoints and heartbeats pass: not idle yet.
SETTLE_S = 10.0
IDLE_SECONDS_MIN = 20.0
TARGET_PERCENT = 5.0


def run_idle(seconds: float = IDLE_SECONDS_MIN, progress: Progress = lambda _: None
             ) -> list[dict[str, Any]]:
    # The job schedulers too: an idle stamp has them, idling (no job is due so soon).
    return with_fresh_stamp("", lambda stamp: _measure(stamp, seconds, progress), progress,
                            stream_layer_only=False, job_schedulers=True)


def _measure(stamp: LocalStamp, seconds: float, progress: Progress) -> list[dict[str, Any]]:
    progress(f"letting the stamp settle for {SETTLE_S:g} s")
    time.sleep(SETTLE_S)  # the schedule of the measurement, not a wait for a condition
    kinds = {rec.name: rec.kind for rec in stamp.records.values() if rec.pid}
    before = {name: cpu_seconds(stamp.record(name).pid) for name in kinds}
    woken = {name: wakeups(stamp.record(name).pid) for name in kinds}
    threads_before = {name: thread_cpu(stamp.record(name).pid) for name in kinds}
    progress(f"measuring {len(kinds)} idle processes for {seconds:g} s")
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    spent: dict[str, float] = {}
    woke: dict[str, int] = {}
    for name, kind in kinds.items():
        used = cpu_seconds(stamp.record(name).pid) - before[name]
        spent[kind] = spent.get(kind, 0.0) + used
        woke[kind] = woke.get(kind, 0) + wakeups(stamp.record(name).pid) - woken[name]
    total = sum(spent.values())
    by_thread: dict[str, float] = {}
    for name in kinds:
        for group, used in thread_cpu(stamp.record(name).pid).items():
            by_thread[group] = (by_thread.get(group, 0.0) + used
                                - threads_before[name].get(group, 0.0))
    return ([row({"kind": kind, "processes": list(kinds.values()).count(kind)},
                 {"core_percent": round(100 * used / elapsed, 2),
                  "wakeups_per_s": round(woke[kind] / elapsed, 1)})
             for kind, used in sorted(spent.items())]
            + [row({"threads": group}, {"core_percent": round(100 * used / elapsed, 2)})
               for group, used in sorted(by_thread.items())]
            + [row({"kind": "all", "processes": len(kinds), "seconds": round(elapsed, 1)},
                   {"core_percent": round(100 * total / elapsed, 2),
                    "wakeups_per_s": round(sum(woke.values()) / elapsed, 1),
                    "target_percent": TARGET_PERCENT,
                    "met": 100 * total / elapsed <= TARGET_PERCENT})])


def wakeups(pid: int) -> int:
    """Voluntary context switches of every thread of `pid` so far: how often its threads
    went to sleep, each to be woken again (a thread that ended meanwhile is not counted)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


GRPC_THREADS = ("event_engine", "grpc_global_tim", "lifeguard")
OTHER_THREADS = ("libuv-worker",)  # uvloop's


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds the threads of `pid` spent so far, by kind of thread: `grpc` (gRPC core's,
    by their OS names), `other` (uvloop's workers) and `python` (the rest: the interpreter's
    threads keep the process's name). A thread that ended meanwhile is not counted."""
    spent: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            name = (task / "comm").read_text().strip()
            ns = int((task / "schedstat").read_text().split()[0])
            group = ("grpc" if name.startswith(GRPC_THREADS) else
                     "other" if name.startswith(OTHER_THREADS) else "python")
            spent[group] = spent.get(group, 0.0) + ns / 1e9
    return spent
