"""When the maintenance jobs run by themselves (issue 31, §7): the job scheduler's decisions,
pure — given the schedules, what the scheduler recorded of earlier runs, what it observed of
the stamp, and the time (injected: `now`, wall seconds), say which job is due, when the next
one will be, and what a scrub slice covers. No I/O here (spark/scheduler.py does that).

The schedules (`Schedules`: jobs.schedule_* in the config, changed at run time by
`stamp job schedule --set`, stored in the lock service):
- gc: every `gc_interval_s` after the last run started, and also as soon as the earliest
  copy a run marked is past its grace (`Observed.gc_reclaim_at`): trimmed space, released
  and marked by the next run, is reclaimed within interval + grace.
- ec: a check (a stream-manager listing, no Spark) every `ec_interval_s`, and as soon as the
  next sealed extent's policy comes due (`Observed.ec_next_due_at`); a Spark run only while
  some extent is due (`Observed.ec_due`).
- scrub: passes over every sealed or coded extent in id order, one per `scrub_period_s`; a
  slice every `scrub_interval_s`, paced so a pass ends an interval before its period does,
  and at most `scrub_bytes_per_s_max` x the interval bytes (every copy counted) a slice.
  Extent ids only grow, so extents made during a pass come after the cursor: a pass covers
  every extent that exists when it ends.
- An interval of 0 turns that schedule off. A fresh scheduler (no record) runs nothing at
  once: its first gc and scrub are an interval after it first kept the schedule.
- One job at a time: of the jobs due, the one due first runs first (so a job that is due
  again at once, a gc behind on its reclaims, cannot starve the others).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from common.config import JobLimits
from common.errors import InvalidArgument

GC, EC, SCRUB = "gc", "ec", "scrub"
JOBS = (GC, EC, SCRUB)
OK = "ok"
NOTHING_DUE = "ok: nothing due"

# The schedule fields `stamp job schedule --set NAME=VALUE` changes: NAME -> JobLimits field.
SETTABLE = {
    "gc": "schedule_gc_interval_s",
    "ec": "schedule_ec_interval_s",
    "scrub": "schedule_scrub_interval_s",
    "scrub-period": "schedule_scrub_period_s",
    "scrub-rate": "scrub_bytes_per_s_max",
}
DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
RATE_UNITS = {"": 1.0, "b": 1.0, "k": 1024.0, "kb": 1024.0, "kib": 1024.0,
              "m": 1024.0 ** 2, "mb": 1024.0 ** 2, "mib": 1024.0 ** 2,
              "g": 1024.0 ** 3, "gb": 1024.0 ** 3, "gib": 1024.0 ** 3}


@dataclass(frozen=True)
class Schedules:
    gc_interval_s: float
    ec_interval_s: float
    scrub_interval_s: float
    scrub_period_s: float
    scrub_bytes_per_s_max: float
    gc_grace_s: float

    @classmethod
    def of(cls, limits: JobLimits, overrides: Mapping[str, float] | None = None
           ) -> Schedules:
        """The config's schedules with `overrides` ({JobLimits field: value}, as stored by
        `stamp job schedule --set`) applied; unknown fields are ignored (a newer CLI)."""
        values = {f: float(v) for f, v in (overrides or {}).items() if f in SETTABLE.values()}

        def get(name: str) -> float:
            return values.get(name, float(getattr(limits, name)))
        return cls(get("schedule_gc_interval_s"), get("schedule_ec_interval_s"),
                   get("schedule_scrub_interval_s"), get("schedule_scrub_period_s"),
                   get("scrub_bytes_per_s_max"), float(limits.gc_grace_s))


@dataclass(frozen=True)
class JobRecord:
    """What the scheduler keeps of one job's runs (wall seconds; 0: never)."""

    last_run_at: float = 0.0      # when its last run (or, for ec, its last check) started
    last_result: str = ""         # "ok", "failed: why", or "" before any run
    last_success_at: float = 0.0  # when its last successful run started
    last_seconds: float = 0.0
    runs: int = 0                 # Spark runs started (an ec check without work is none)


@dataclass(frozen=True)
class ScrubCursor:
    """Where scrub's pass stands: extents with ids up to `cursor` were verified in the pass
    that began at `pass_started_at`; those above it in the one before (if it reached them:
    ids up to `prev_pass_end`), which began at `prev_pass_started_at` (0: none)."""

    cursor: int = 0
    pass_started_at: float = 0.0
    prev_pass_started_at: float = 0.0
    prev_pass_end: int = 0


@dataclass(frozen=True)
class SchedulerState:
    """The schedule's record, kept in the lock service (`to_dict` / `from_dict`)."""

    kept_since: float = 0.0   # when a scheduler first kept this schedule
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    scrub: ScrubCursor = field(default_factory=ScrubCursor)

    def job(self, name: str) -> JobRecord:
        return self.jobs.get(name, JobRecord())

    def with_job(self, name: str, record: JobRecord) -> SchedulerState:
        return replace(self, jobs={**self.jobs, name: record})

    def to_dict(self) -> dict[str, Any]:
        return {"kept_since": self.kept_since,
                "jobs": {name: asdict(r) for name, r in self.jobs.items()},
                "scrub": asdict(self.scrub)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> SchedulerState:
        def known(kind: type, values: Mapping[str, Any]) -> dict[str, Any]:
            names = {f.name for f in fields(kind)}
            return {k: v for k, v in values.items() if k in names}
        return cls(float(raw.get("kept_since", 0.0)),
                   {name: JobRecord(**known(JobRecord, r))
                    for name, r in raw.get("jobs", {}).items()},
                   ScrubCursor(**known(ScrubCursor, raw.get("scrub", {}))))


@dataclass(frozen=True)
class Observed:
    """What the scheduler last saw of the stamp (None: not looked yet / nothing pending)."""

    gc_reclaim_at: float | None = None   # the earliest marked copy's end of grace
    ec_next_due_at: float | None = None  # when the next sealed extent's policy comes due
    ec_due: int = 0                      # extents due for ec now


def started(state: SchedulerState, now: float) -> SchedulerState:
    """The state a scheduler keeps from `now` on (a fresh record starts its clock now)."""
    return state if state.kept_since else replace(state, kept_since=now)


def next_due(job: str, state: SchedulerState, schedules: Schedules, observed: Observed
             ) -> float | None:
    """When `job` is next due (wall seconds; maybe in the past), or None while its schedule
    is off. For ec this is the next check (a run follows only when something is due)."""
    record = state.job(job)
    base = record.last_run_at or state.kept_since
    if job == GC:
        if schedules.gc_interval_s <= 0:
            return None
        due = base + schedules.gc_interval_s
        if observed.gc_reclaim_at is not None and observed.gc_reclaim_at > record.last_run_at:
            # Marks that come due after the last run started wait for no interval (one due
            # before it was that run's to sweep: left marked, it waits for the interval).
            due = min(due, observed.gc_reclaim_at)
        return due
    if job == EC:
        if schedules.ec_interval_s <= 0:
            return None
        due = base + schedules.ec_interval_s
        if observed.ec_next_due_at is not None and observed.ec_next_due_at > record.last_run_at:
            due = min(due, observed.ec_next_due_at)
        return due
    if job == SCRUB:
        if schedules.scrub_interval_s <= 0:
            return None
        return base + schedules.scrub_interval_s
    raise InvalidArgument(f"unknown job {job!r} (jobs: {', '.join(JOBS)})")


def due_now(state: SchedulerState, schedules: Schedules, observed: Observed, now: float
            ) -> str | None:
    """The job to run now: of those due at `now`, the one due first (ties: JOBS order)."""
    due = [(at, JOBS.index(job), job) for job in JOBS
           if (at := next_due(job, state, schedules, observed)) is not None and at <= now]
    return min(due)[2] if due else None


def wake_at(state: SchedulerState, schedules: Schedules, observed: Observed, now: float,
            poll_s: float) -> float:
    """When an idle scheduler should look again: the next due time, but no later than
    `poll_s` from now (it re-reads the schedules then: a change may move a job earlier)."""
    times = [at for job in JOBS
             if (at := next_due(job, state, schedules, observed)) is not None]
    return min([now + poll_s, *times])


def recorded(state: SchedulerState, job: str, started_at: float, seconds: float,
             result: str, ran: bool = True) -> SchedulerState:
    """`state` after a run of `job` that started at `started_at`; with `ran` False, an ec
    check that found nothing due: a successful look (the job is up to date), not a run."""
    before = state.job(job)
    ok = succeeded(result)
    return state.with_job(job, JobRecord(
        last_run_at=started_at,
        last_result=result if ran or not ok else NOTHING_DUE,
        last_success_at=started_at if ok else before.last_success_at,
        last_seconds=seconds if ran else before.last_seconds,
        runs=before.runs + (1 if ran else 0)))


def succeeded(result: str) -> bool:
    return result in (OK, NOTHING_DUE)


def ec_next_due(extents: Iterable[Any], policies: Mapping[str, Any], now: float
                ) -> float | None:
    """When the next sealed extent's policy comes due after `now` (spark/ec.py's rule: due
    `after_s` past its seal, by the policy of any holder), or None when none will without a
    new seal or policy. `extents` are spark.ec.ExtentView, `policies` StreamPolicy by
    pattern."""
    from stream_layer.stream_manager.policies import policy_for

    soonest: float | None = None
    for e in extents:
        if e.state != "sealed":
            continue
        for stream in e.streams:
            policy = policy_for(stream, policies)
            if policy is not None:
                at = e.sealed_at + policy.after_s
                if at > now and (soonest is None or at < soonest):
                    soonest = at
    return soonest


# ---- scrub slices -------------------------------------------------------------------------

@dataclass(frozen=True)
class ScrubExtent:
    """A sealed or coded extent as scrub sees it: its id, the bytes scrub reads (every
    copy), and when it was sealed (wall seconds; 0: unknown)."""

    extent_id: int
    bytes: int
    sealed_at: float = 0.0


@dataclass(frozen=True)
class ScrubSlice:
    first: int    # extent ids first..last (inclusive) are verified by this run
    last: int
    extents: int
    bytes: int
    cursor: ScrubCursor  # the cursor once the run succeeds


def scrub_slice(extents: Sequence[ScrubExtent], cursor: ScrubCursor,
                schedules: Schedules, now: float) -> ScrubSlice | None:
    """The next slice of scrub's pass (see the module), or None when there is nothing to
    verify now (no extents, or this pass is done and its period not over yet)."""
    ordered = sorted(extents, key=lambda e: e.extent_id)
    if not ordered:
        return None
    if not cursor.pass_started_at:
        cursor = ScrubCursor(pass_started_at=now)
    remaining = [e for e in ordered if e.extent_id > cursor.cursor]
    if not remaining:
        if now < cursor.pass_started_at + schedules.scrub_period_s - schedules.scrub_interval_s:
            return None  # this pass is done early: the next begins with its period
        cursor = ScrubCursor(0, now, cursor.pass_started_at, cursor.cursor)
        remaining = ordered
    time_left_s = cursor.pass_started_at + schedules.scrub_period_s - now
    runs_left = max(1, int(time_left_s // schedules.scrub_interval_s))
    count = math.ceil(len(remaining) / runs_left)
    taken = _within_bytes(remaining[:count], schedules.scrub_bytes_per_s_max
                          * schedules.scrub_interval_s)
    last = taken[-1].extent_id
    return ScrubSlice(taken[0].extent_id, last, len(taken), sum(e.bytes for e in taken),
                      replace(cursor, cursor=last))


def _within_bytes(extents: Sequence[ScrubExtent], bytes_max: float) -> list[ScrubExtent]:
    """The first extents whose bytes add up to at most `bytes_max` (0: no bound), one at
    least: a rate bound slows scrub down, it never stops it."""
    if bytes_max <= 0:
        return list(extents)
    taken: list[ScrubExtent] = []
    total = 0
    for e in extents:
        if taken and total + e.bytes > bytes_max:
            break
        taken.append(e)
        total += e.bytes
    return taken


def scrub_overdue(extents: Sequence[ScrubExtent], cursor: ScrubCursor, period_s: float,
                  now: float) -> int:
    """Extents not verified within the period, as far as the record proves (scrub's backlog):
    one whose last verification the cursor vouches for (this pass, or the one before) is
    overdue once that pass began a period ago; one no pass reached, once it was sealed a
    period ago (unknown seal time: once the schedule was kept that long)."""
    overdue = 0
    for e in extents:
        if cursor.pass_started_at and e.extent_id <= cursor.cursor:
            since = cursor.pass_started_at
        elif cursor.prev_pass_started_at and e.extent_id <= cursor.prev_pass_end:
            since = cursor.prev_pass_started_at
        else:
            since = e.sealed_at or cursor.pass_started_at or now
        if now - since > period_s:
            overdue += 1
    return overdue


# ---- `stamp job schedule --set` -------------------------------------------------------------

def parse_setting(text: str) -> tuple[str, float]:
    """`NAME=VALUE` of `stamp job schedule --set` as (JobLimits field, value): gc, ec, scrub
    and scrub-period take a duration (`90s`, `10m`, `2h`, `7d`, `1w`, plain seconds, or
    `off` = 0 but for scrub-period), scrub-rate bytes per second (`16MiB`, `512k`, `0`:
    unbounded). Raises InvalidArgument with a one-line reason."""
    name, sep, value = text.partition("=")
    name, value = name.strip().lower(), value.strip().lower()
    if not sep or not value:
        raise InvalidArgument(f"--set takes NAME=VALUE (e.g. gc=30m), not {text!r}")
    if name not in SETTABLE:
        raise InvalidArgument(f"no schedule named {name!r}; the names are "
                              f"{', '.join(SETTABLE)}")
    if name == "scrub-rate":
        return SETTABLE[name], _parse_rate(value, text)
    seconds = 0.0 if value == "off" else _parse_duration(value, text)
    if name == "scrub-period" and seconds <= 0:
        raise InvalidArgument(f"{text!r}: the scrub period must be a positive duration")
    return SETTABLE[name], seconds


def _parse_duration(value: str, text: str) -> float:
    number, unit = _split_unit(value)
    if unit not in DURATION_UNITS and unit != "":
        raise InvalidArgument(f"{text!r}: a duration is a number with s, m, h, d or w "
                              f"(e.g. 10m), or off")
    seconds = _number(number, text) * DURATION_UNITS.get(unit, 1.0)
    return seconds


def _parse_rate(value: str, text: str) -> float:
    number, unit = _split_unit(value.removesuffix("/s"))
    if unit not in RATE_UNITS:
        raise InvalidArgument(f"{text!r}: a rate is bytes per second, e.g. 16MiB, 512k, "
                              f"or 0 for none")
    return _number(number, text) * RATE_UNITS[unit]


def _split_unit(value: str) -> tuple[str, str]:
    at = len(value)
    while at and not (value[at - 1].isdigit() or value[at - 1] == "."):
        at -= 1
    return value[:at], value[at:]


def _number(number: str, text: str) -> float:
    try:
        found = float(number)
    except ValueError:
        raise InvalidArgument(f"{text!r}: {number or 'nothing'!r} is not a number") from None
    if not math.isfinite(found) or found < 0:
        raise InvalidArgument(f"{text!r}: the value must be a finite number at least 0")
    return found


def format_duration(seconds: float) -> str:
    """`90s`, `10m`, `1.5h`, `7d`: the largest unit that keeps it short."""
    if seconds <= 0:
        return "off"
    for unit, size in (("w", 7 * 86400.0), ("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and (seconds / size) * 10 == int((seconds / size) * 10):
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
