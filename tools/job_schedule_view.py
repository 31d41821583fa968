"""`stamp job schedule`'s reading and writing (tools/cmd_job.py): the schedules as the stamp
keeps them (the config's, with the overrides `--set` stored in the lock service), each job's
record as the active scheduler kept it (spark/scheduler.py), and its next due time by the
scheduler's own rules (spark/schedule.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from common.errors import InvalidArgument, Unavailable
from lock_service.client import LockClient
from spark import schedule
from spark.driver import RUN_HOLDER, StampAddresses
from spark.schedule import EC, GC, JOBS, SCRUB, SETTABLE, Observed, Schedules
from spark.scheduler import SCHEDULES_KEY, active_scheduler, read_overrides, read_state

WRITE_ATTEMPTS_MAX = 8
BACKLOG_WHAT = {GC: "copies waiting for their grace", EC: "extents due",
                SCRUB: "extents not verified within the period"}


def _locks(data_dir: str) -> tuple[StampAddresses, LockClient]:
    stamp = StampAddresses.load(data_dir)
    if not stamp.lock_servers:
        raise InvalidArgument("this stamp has no lock service: the schedules are kept there")
    return stamp, LockClient(stamp.lock_servers, RUN_HOLDER)


def change_schedules(data_dir: str, changes: Mapping[str, float], resets: Sequence[str]
                     ) -> dict[str, float]:
    """Store the overrides with `changes` ({JobLimits field: value}) made and `resets`
    (--set names, or "all") removed; return them."""
    unknown = [name for name in resets if name != "all" and name not in SETTABLE]
    if unknown:
        raise InvalidArgument(f"no schedule named {unknown[0]!r}; the names are "
                              f"{', '.join(SETTABLE)}, or all")
    _, locks = _locks(data_dir)
    with locks:
        for _ in range(WRITE_ATTEMPTS_MAX):
            found = locks.get(SCHEDULES_KEY)
            current, version = ({}, 0) if found is None else (json.loads(found[0]), found[1])
            wanted = {} if "all" in resets else {
                field: value for field, value in current.items()
                if field not in {SETTABLE[name] for name in resets}}
            wanted.update(changes)
            if locks.compare_and_set(SCHEDULES_KEY, version,
                                     json.dumps(wanted).encode()) is not None:
                return wanted
    raise Unavailable("the schedules changed while this change was made: try again")


def schedule_view(data_dir: str) -> dict[str, Any]:
    """Everything `stamp job schedule` shows, as plain data (its --json)."""
    from spark.gc import pending

    stamp, locks = _locks(data_dir)
    with locks:
        overrides = read_overrides(locks)
        state, record = read_state(locks)
        marks = pending(locks, stamp.config.jobs.gc_grace_s)
        active = active_scheduler(locks)
    s = Schedules.of(stamp.config.jobs, overrides)
    kept = record.get("observed", {})
    observed = Observed(
        gc_reclaim_at=marks.get("reclaim_from") if marks.get("copies") else None,
        ec_next_due_at=kept.get("ec_next_due_at"), ec_due=int(kept.get("ec_due", 0)))
    if not state.kept_since:  # no scheduler kept it yet: as a fresh one would from now
        state = schedule.started(state, time.time())
    backlog = {**record.get("backlog", {}), GC: int(marks.get("copies", 0))}
    every = {GC: s.gc_interval_s, EC: s.ec_interval_s, SCRUB: s.scrub_interval_s}
    return {
        "active": active,
        "overrides": overrides,
        "scrub_period_s": s.scrub_period_s,
        "scrub_bytes_per_s_max": s.scrub_bytes_per_s_max,
        "gc_grace_s": s.gc_grace_s,
        "gc_reclaim_within_s": s.gc_interval_s + s.gc_grace_s if s.gc_interval_s else 0.0,
        "jobs": [{"job": job, "every_s": every[job],
                  **asdict(state.job(job)),
                  "next_due_at": schedule.next_due(job, state, s, observed),
                  "backlog": int(backlog.get(job, 0)), "backlog_what": BACKLOG_WHAT[job]}
                 for job in JOBS],
    }
