"""The job scheduler (issue 31, §7): runs gc, ec and scrub on Spark by themselves, on the
schedules of spark/schedule.py, one run at a time, through the same `run_job` as `stamp job`
(each run in a process of its own: spark/job_process.py). Several run (`stamp up` starts
two); the one holding the lock-service lease `jobs/scheduler` acts, the others stand by
(long-polling the lock) and take over when it lapses.

The guarantee — no two scheduled runs at once, even across a takeover:
- A run starts only under the lease: just before it, the scheduler writes the run's marker
  (`jobs/scheduler/running`) with the lease as fence, so the lock service itself refuses
  the start of a scheduler whose lease has ended, whatever that scheduler believes.
- A run lives only within the lease's claim: its process is handed claim deadlines no later
  than the lease's own (job_launch.py), and its watchdog SIGKILLs the whole run — the Spark
  JVM and the Python workers — when the claim runs out unrenewed or the scheduler dies
  (the claim pipe closes): lock_service/client.py makes the claim deadline come before the
  service can grant the lease to anyone else. A scheduler that loses its lease (frozen,
  cut off) thus has its run killed before another can lead.
- A new holder that finds an earlier holder's marker waits `jobs.scheduler_takeover_wait_s`
  more before it starts anything (the killed run's last RPCs may still land), then removes
  the marker (compare-and-set: it or the old holder records that run as failed, never
  both) and goes on.
Not covered: `stamp job` typed by an operator meanwhile (gc's marks refuse a concurrent gc),
and a run process frozen itself (SIGSTOP of the job process, not of the scheduler).

Idle, the active scheduler sleeps until the next due time or `jobs.scheduler_poll_s`
(re-reading the schedules `stamp job schedule --set` stores: one small read), the lease
renewed by its client every quarter of its time; a standby long-polls the lock. Neither
holds a Spark session between runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from common import background
from common.clock import Clock, SystemClock
from common.config import StampConfig
from common.errors import PreconditionFailed, StampError
from lock_service.client import Lease, LockClient
from spark import schedule
from spark.job_launch import RunOutcome, launch
from spark.schedule import EC, GC, JOBS, SCRUB, Observed, SchedulerState, Schedules

log = logging.getLogger("stamp.job_scheduler")

SCHEDULER_LOCK = "jobs/scheduler"
ADDRESS_KEY = "jobs/scheduler/address"      # the active one's name and address (its lease)
STATE_KEY = "jobs/scheduler/state"          # SchedulerState and what was last observed
RUNNING_KEY = "jobs/scheduler/running"      # the marker of the run in progress
SCHEDULES_KEY = "jobs/schedules"            # {JobLimits field: value}: `--set` overrides
# A standby waits this long for the lock per try: its stop is at most this late.
STANDBY_WAIT_S = 5.0
# After a step that failed, the next waits this long.
FAILED_STEP_WAIT_S = 5.0
# A run starts only with at least this much of the lease's claim left.
CLAIM_LEFT_MIN_FRACTION = 0.5

Launcher = Callable[..., RunOutcome]


@dataclass(frozen=True)
class Marker:
    """The run in progress, as written under the lease."""

    job: str
    holder: str
    token: int
    started_at: float

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Marker:
        return cls(**json.loads(raw))


def read_overrides(locks: LockClient) -> dict[str, float]:
    found = locks.get(SCHEDULES_KEY)
    return {} if found is None else {k: float(v) for k, v in json.loads(found[0]).items()}


def active_scheduler(locks: LockClient) -> dict[str, str] | None:
    """{"name", "address"} of the scheduler holding the lease (None: none holds it)."""
    found = locks.get(ADDRESS_KEY)
    return None if found is None else dict(json.loads(found[0]))


def read_state(locks: LockClient) -> tuple[SchedulerState, dict[str, Any]]:
    """The kept state and the rest of its record (observed, backlog, holder)."""
    found = locks.get(STATE_KEY)
    if found is None:
        return SchedulerState(), {}
    raw = json.loads(found[0])
    return SchedulerState.from_dict(raw.get("state", {})), raw


class JobScheduler:
    def __init__(self, name: str, address: str, data_dir: str, locks: LockClient,
                 sm_addresses: list[str], config: StampConfig, run_dir: Path,
                 clock: Clock | None = None, launcher: Launcher = launch) -> None:
        self.name = name
        self.sm_addresses = sm_addresses
        self.address = address
        self.data_dir = data_dir
        self.locks = locks
        self.config = config
        self.limits = config.jobs
        self.run_dir = run_dir
        self.clock = clock or SystemClock()
        self.launcher = launcher
        self.lease: Lease | None = None
        self.state = SchedulerState()
        self.overrides: dict[str, float] = {}
        self.observed = Observed()
        self.backlog: dict[str, int] = {job: 0 for job in JOBS}
        self.running: str | None = None
        self.lock_error: str | None = "not checked yet"
        self.stopping = threading.Event()
        self._polled_at = -float("inf")
        self._retry_at = -float("inf")
        self._marks_seen = False
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    # ---- leadership ---------------------------------------------------------------------------

    def is_active(self) -> bool:
        return self.lease is not None and self.lease.valid()

    def claim_until(self) -> float:
        """The lease's claim deadline (monotonic), 0 once it is lost."""
        lease = self.lease
        if lease is None or not lease.valid():
            return 0.0
        return time.monotonic() + lease.remaining_s()

    async def _try_lead(self) -> None:
        """Take the lease if free, or long-poll for it (STANDBY_WAIT_S); first one quick
        read, so health (the lock service answers) is known before the long poll ends."""
        await self._locked(active_scheduler, self.locks)
        ttl_s = self.limits.scheduler_lease_ttl_s
        lease = await self._locked(self.locks.acquire, SCHEDULER_LOCK, ttl_s, STANDBY_WAIT_S,
                                   self._lost)
        if lease is None:
            return
        try:
            await self._locked(self.locks.put, ADDRESS_KEY, json.dumps(
                {"name": self.name, "address": self.address}).encode(), lease=lease)
            state, _ = await self._locked(read_state, self.locks)
            await self._take_over_marker(lease)
        except BaseException:
            await asyncio.to_thread(lease.release)  # try again from the start
            raise
        self.state = schedule.started(state, self.clock.wall())
        self._polled_at = -float("inf")
        self._marks_seen = False
        self.lease = lease
        log.info("%s is the active job scheduler (token %d)", self.name, lease.token)
        await self._save()  # the schedule's start is kept, for whoever leads next

    def _lost(self, lease: Lease) -> None:
        log.warning("%s lost the scheduler lease (token %d)", self.name, lease.token)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def _take_over_marker(self, lease: Lease) -> None:
        """An earlier holder's run may have been going when it lost the lease: wait out the
        takeover time, then clear its marker and record that run (module docstring)."""
        found = await self._locked(self.locks.get, RUNNING_KEY)
        if found is None:
            return
        marker = Marker.decode(found[0])
        wait_s = self.limits.scheduler_takeover_wait_s
        log.info("%s found %s's %s run of token %d in progress: waiting %.1f s before any run",
                 self.name, marker.holder, marker.job, marker.token, wait_s)
        await asyncio.sleep(wait_s)
        if await self._locked(self.locks.delete, RUNNING_KEY, found[1], fence=lease):
            await self._record_run(marker.job, marker.started_at,
                                   self.clock.wall() - marker.started_at,
                                   f"failed: abandoned: {marker.holder} lost its lease "
                                   "during the run (its process was killed)")

    # ---- the loop -----------------------------------------------------------------------------

    async def run_forever(self) -> None:
        self._loop = asyncio.get_running_loop()
        await background.run_forever(f"{self.name}: job scheduler", self.step, 0.0,
                                     logger=log, sleep=self._pause)

    async def step(self) -> None:
        try:
            if not self.is_active():
                self.lease = None
                await self._try_lead()
                return
            now = self.clock.wall()
            if self.clock.monotonic() - self._polled_at >= self.limits.scheduler_poll_s:
                await self._poll()
            job = schedule.due_now(self.state, self.schedules(), self.observed, now)
            if job is not None:
                await self.run(job)
        except Exception:
            # Logged by common/background.py; the next step waits a while, so a job whose
            # look keeps failing (a stream manager away) is not tried in a tight loop.
            self._retry_at = self.clock.monotonic() + FAILED_STEP_WAIT_S
            raise

    async def _pause(self, _: float) -> None:
        """Until the next due time or poll (active), at once (standby: acquire long-polls);
        a lost lease or a stop wakes it; after a failed step, FAILED_STEP_WAIT_S."""
        backoff_s = self._retry_at - self.clock.monotonic()
        if backoff_s > 0:
            await asyncio.sleep(backoff_s)
        if not self.is_active():
            return
        now = self.clock.wall()
        until = schedule.wake_at(self.state, self.schedules(), self.observed, now,
                                 self.limits.scheduler_poll_s)
        self._wake.clear()
        if until > now and self.is_active():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), until - now)

    def schedules(self) -> Schedules:
        return Schedules.of(self.limits, self.overrides)

    async def _poll(self) -> None:
        """Re-read the schedules (one small read); gc's marks at the first poll of a term
        only (then after each gc run: they change only with gc runs, and a mark list may
        be a large value)."""
        self.overrides = await self._locked(read_overrides, self.locks)
        if not self._marks_seen:
            await self._observe_gc()
            self._marks_seen = True
        self._polled_at = self.clock.monotonic()

    async def _observe_gc(self) -> None:
        from spark.gc import pending

        marks = await self._locked(pending, self.locks, self.limits.gc_grace_s)
        copies = int(marks.get("copies", 0))
        self.backlog[GC] = copies
        self.observed = replace(self.observed,
                                gc_reclaim_at=marks.get("reclaim_from") if copies else None)

    # ---- one run --------------------------------------------------------------------------------

    async def run(self, job: str) -> None:
        """Run `job` now if it has work (ec and scrub look first), under the fence."""
        started_at = self.clock.wall()
        extent_range = None
        piece = None
        if job == EC:
            due = await self._observe_ec(started_at)
            if not due:
                self.state = schedule.recorded(self.state, EC, started_at,
                                               self.clock.wall() - started_at, schedule.OK,
                                               ran=False)
                await self._save()
                return
        elif job == SCRUB:
            piece = await self._scrub_slice(started_at)
            if piece is None:
                self.state = schedule.recorded(self.state, SCRUB, started_at, 0.0,
                                               schedule.OK, ran=False)
                await self._save()
                return
            extent_range = (piece.first, piece.last)
        outcome = await self._fenced_run(job, started_at, extent_range)
        if outcome is None:
            return
        self.state = schedule.recorded(self.state, job, started_at, outcome.seconds,
                                       outcome.result)
        if piece is not None and outcome.result == schedule.OK:
            self.state = replace(self.state, scrub=piece.cursor)
        if job == GC:
            await self._observe_gc()
        if job == EC:
            await self._observe_ec(self.clock.wall())
        await self._save()

    async def _fenced_run(self, job: str, started_at: float,
                          extent_range: tuple[int, int] | None) -> RunOutcome | None:
        """Start the run under the lease (module docstring) and wait for it; None when the
        lease did not allow it to start."""
        lease = self.lease
        ttl_s = self.limits.scheduler_lease_ttl_s
        if lease is None:
            return None
        if lease.remaining_s() < ttl_s * CLAIM_LEFT_MIN_FRACTION:
            await self._locked(lease.renew)  # a run starts with most of a lease ahead
            if lease.remaining_s() < ttl_s * CLAIM_LEFT_MIN_FRACTION:
                return None
        marker = Marker(job, self.name, lease.token, started_at)
        try:
            version = await self._locked(self.locks.compare_and_set, RUNNING_KEY, 0,
                                         marker.encode(), fence=lease)
        except PreconditionFailed as exc:
            log.warning("%s: not starting %s: %s", self.name, job, exc)
            return None
        if version is None:  # an earlier run's marker: the takeover clears it
            await self._take_over_marker(lease)
            return None
        log.info("%s: starting %s%s", self.name, job,
                 f" on extents {extent_range[0]}-{extent_range[1]}" if extent_range else "")
        self.running = job
        try:
            outcome = await asyncio.to_thread(
                self.launcher, job, self.data_dir, self.limits.spark_master, extent_range,
                self.claim_until, self.stopping, self.limits.scheduler_run_timeout_s,
                self.run_dir, ttl_s)
        finally:
            self.running = None
        log.info("%s: %s %s in %.1f s", self.name, job, outcome.result, outcome.seconds)
        # Our own marker: removed by version (a new holder may have cleared it already).
        deleted = await self._locked(self.locks.delete, RUNNING_KEY, version)
        if outcome.stopped and deleted:  # killed: run_job recorded nothing
            await self._record_run(job, started_at, outcome.seconds, outcome.result)
        return outcome

    async def _observe_ec(self, now: float) -> int:
        """List the extents and policies: how many are due now, and when the next is."""
        from spark.ec import default_policies, ec_candidates, views
        from stream_layer.sm_client import AsyncStreamManagerClient
        from stream_layer.stream_manager.records import StreamPolicy

        sm = AsyncStreamManagerClient(self.sm_addresses,
                                      self.config.stream_manager)
        try:
            extents = views(await sm.list_extents())
            policies = {**default_policies(self.limits),
                        **{p.pattern: StreamPolicy(p.pattern, p.ec_k, p.ec_m, p.after_s)
                           for p in await sm.list_stream_policies()}}
        finally:
            await sm.close()
        due = len(ec_candidates(extents, policies, now))
        self.backlog[EC] = due
        self.observed = replace(self.observed, ec_due=due,
                                ec_next_due_at=schedule.ec_next_due(extents, policies, now))
        return due

    async def _scrub_slice(self, now: float) -> schedule.ScrubSlice | None:
        from stream_layer.sm_client import AsyncStreamManagerClient

        sm = AsyncStreamManagerClient(self.sm_addresses,
                                      self.config.stream_manager)
        try:
            infos = await sm.list_extents()
        finally:
            await sm.close()
        extents = [schedule.ScrubExtent(e.extent_id, _copy_bytes(e), e.sealed_at)
                   for e in infos if e.state in ("sealed", "erasure_coded")]
        s = self.schedules()
        self.backlog[SCRUB] = schedule.scrub_overdue(extents, self.state.scrub,
                                                     s.scrub_period_s, now)
        return schedule.scrub_slice(extents, self.state.scrub, s, now)

    # ---- records ---------------------------------------------------------------------------------

    async def _save(self) -> None:
        """Keep the state, fenced by the lease (a lapsed holder's write is refused)."""
        lease = self.lease
        if lease is None:
            return
        record = {"state": self.state.to_dict(), "observed": asdict(self.observed),
                  "backlog": self.backlog, "holder": self.name,
                  "written_at": self.clock.wall()}
        try:
            await self._locked(self.locks.put, STATE_KEY, json.dumps(record).encode(),
                               fence=lease)
        except PreconditionFailed as exc:
            log.warning("%s: state not kept: %s", self.name, exc)

    async def _record_run(self, job: str, started_at: float, seconds: float, result: str
                          ) -> None:
        from spark.job_runs import JobRun, RunStore

        run = JobRun(job, started_at, round(seconds, 3), self.limits.spark_master or "local[*]",
                     False, result, {})
        await self._locked(RunStore(self.locks, self.limits).add, run)

    async def _locked(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A blocking lock-service call off the loop; its outcome feeds health."""
        try:
            result = await asyncio.to_thread(call, *args, **kwargs)
        except StampError as exc:
            if not isinstance(exc, PreconditionFailed):
                self.lock_error = f"the lock service does not answer: {exc}"
            raise
        self.lock_error = None
        return result

    async def check(self) -> str | None:
        """Health: None while its last lock-service call was answered."""
        return self.lock_error

    def close(self) -> None:
        self.stopping.set()
        if self.lease is not None:
            self.lease.release()

    # ---- metrics ---------------------------------------------------------------------------------

    def gauges(self) -> Iterable[tuple[str, str, dict[str, float]]]:
        """(name, help, {job: value}) of the scheduler's per-job gauges."""
        s = self.schedules()
        active = self.is_active()
        due = {job: schedule.next_due(job, self.state, s, self.observed) for job in JOBS}
        yield ("stamp_job_last_success_timestamp_seconds",
               "when the job's last successful run (or ec look) started, unix seconds (0: never)",
               {j: self.state.job(j).last_success_at for j in JOBS})
        yield ("stamp_job_last_run_timestamp_seconds",
               "when the job's last run (or ec look) started, unix seconds (0: never)",
               {j: self.state.job(j).last_run_at for j in JOBS})
        yield ("stamp_job_last_run_ok", "1 if the job's last run succeeded, 0 if it failed, "
               "-1 before any", {j: _outcome_value(self.state.job(j).last_result) for j in JOBS})
        yield ("stamp_job_next_due_timestamp_seconds",
               "when the job is next due, unix seconds (0: its schedule is off, or standby)",
               {j: (due[j] or 0.0) if active else 0.0 for j in JOBS})
        yield ("stamp_job_backlog", "work waiting: gc copies marked and not yet reclaimed, "
               "extents due for ec, extents not scrubbed within the period", dict(self.backlog))
        yield ("stamp_job_running", "1 while a run of the job is going",
               {j: 1.0 if self.running == j else 0.0 for j in JOBS})


def _copy_bytes(info: Any) -> int:
    """Bytes scrub reads of one extent: every replica, and the fragments (about length/k
    each)."""
    length = int(info.sealed_length)
    fragments = len(info.fragments)
    per_fragment = -(-length // info.ec_k) if info.ec_k else 0
    return length * len(info.replicas) + per_fragment * fragments


def _outcome_value(result: str) -> float:
    if not result:
        return -1.0
    return 1.0 if schedule.succeeded(result) else 0.0
