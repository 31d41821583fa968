"""The thin Spark driver of the maintenance jobs (§7): list the items (extent ids) from the
stream manager, spread them over Spark tasks (spark/tasks.py runs each job's per-item
function there), collect one small result per item, and record the run in the stamp
(spark/job_runs.py).

Contracts:
- No extent data travels through the driver or Spark: items and results are ids and counts;
  a task asks the extent node that holds a copy to verify, encode or delete it.
- `run_job` reports progress while Spark runs (`on_progress(done_tasks, total_tasks)`, from
  Spark's status tracker, polled every `jobs.progress_interval_ms`) and returns the run's
  report; it records the run in the lock service when the stamp has one (a run that fails
  is recorded too, as failed, and re-raised).
- A given `session` is used and left running (tests share one); otherwise the driver makes
  one on `master` (spark/session.py) and stops it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from common.config import StampConfig, load_config
from common.errors import InvalidArgument, StampError
from common.stamp_file import read_stamp
from spark.gc_release import KIND_PARTITION
from spark.job_result import ItemResult, summarize
from spark.job_runs import JobRun, RunStore
from spark.session import DEFAULT_MASTER, spark_session
from spark.tasks import GC_RELEASE, run_items
from stream_layer.sm_client import AsyncStreamManagerClient

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

JOBS = ("scrub", "ec", "gc")
RUN_HOLDER = "stamp-job"

Progress = Callable[[int, int], None]


@dataclass
class JobReport:
    job: str
    master: str
    dry_run: bool
    started_at: float
    seconds: float = 0.0
    results: list[ItemResult] = field(default_factory=list)
    recorded: bool = False  # kept in the stamp's lock service
    # gc: the copies marked and waiting out the grace period after the run (spark/gc.py
    # `pending`): a later run reclaims them.
    pending: dict[str, float] = field(default_factory=dict)

    @property
    def totals(self) -> dict[str, int]:
        return summarize(self.results)

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "master": self.master, "dry_run": self.dry_run,
                "started_at": self.started_at, "seconds": round(self.seconds, 3),
                "totals": self.totals, "recorded": self.recorded,
                **({"pending": self.pending} if self.pending else {}),
                "items": [r.to_dict() for r in self.results]}


@dataclass(frozen=True)
class StampAddresses:
    """What a job needs to find the stamp: from `<data dir>/stamp.json`."""

    stream_managers: list[str]
    lock_servers: list[str]
    config_path: str | None
    config: StampConfig
    partition_servers: list[str] = field(default_factory=list)
    tls_dir: str | None = None  # the stamp's TLS directory: tasks use its operator certificate

    @classmethod
    def load(cls, data_dir: str) -> StampAddresses:
        raw = read_stamp(data_dir)
        processes = sorted(raw.get("processes", {}).items())

        def of_kind(kind: str) -> list[str]:
            return [p["address"] for _, p in processes if p["kind"] == kind and p["address"]]
        sm = of_kind("stream-manager")
        if not sm:
            raise InvalidArgument(f"the stamp in {data_dir} has no stream manager: the jobs "
                                  f"list extents from it")
        return cls(sm, of_kind("lock"), raw.get("config"), load_config(raw.get("config")),
                   of_kind("partition-server"), raw.get("tls"))


async def list_items(job: str, sm: AsyncStreamManagerClient, now: float,
                     stamp: StampAddresses, dry_run: bool) -> list[Any]:
    """The items (extent ids, or tuples starting with one) `job` looks at, as the stream
    manager lists them now."""
    if job == "scrub":
        from spark.scrub import list_items as scrub_items

        return await scrub_items(sm, now)
    if job == "ec":
        from spark.ec import list_items as ec_items

        return await ec_items(sm, now, stamp.config.jobs)
    if job == "gc":
        return await _gc_items(sm, now, stamp, dry_run)
    if job == GC_RELEASE:
        from spark.gc_release import list_partitions

        return await list_partitions(stamp.partition_servers)
    raise InvalidArgument(f"unknown job {job!r} (jobs: {', '.join(JOBS)})")


def job_session(master: str = DEFAULT_MASTER, app_name: str = "stamp-jobs") -> SparkSession:
    """A session for the jobs (its Python workers run this interpreter: spark_session)."""
    return spark_session(master, app_name=app_name)


def run_job(job: str, data_dir: str, master: str = DEFAULT_MASTER, dry_run: bool = False,
            on_progress: Progress | None = None, session: SparkSession | None = None,
            extent_range: tuple[int, int] | None = None) -> JobReport:
    """Run `job` over the stamp in `data_dir` on Spark (see the module's contracts);
    `extent_range` (first, last): only the items of those extent ids (a scrub slice of the
    job scheduler, spark/schedule.py)."""
    stamp = StampAddresses.load(data_dir)
    report = JobReport(job, master, dry_run, time.time())
    started = time.monotonic()
    own = session is None
    try:
        settings = {"sm": stamp.stream_managers, "config": stamp.config_path,
                    "tls": stamp.tls_dir,
                    "dry_run": dry_run, "now": report.started_at}
        listed_at = report.started_at
        for stage, wait_s in _stages(job, stamp, dry_run):
            _wait_until(listed_at + wait_s)
            listed_at = max(time.time(), report.started_at)
            items = asyncio.run(_list(stage, stamp, listed_at, dry_run))
            if extent_range is not None:
                items = [i for i in items if _in_range(i, extent_range)]
            if items:
                if session is None:
                    session = job_session(master, app_name=f"stamp-{job}")
                rows = _spread(session.sparkContext, stage, settings, items, stamp.config,
                               on_progress)
                report.results += [ItemResult.from_dict(r) for r in rows]
            elif on_progress is not None:
                on_progress(0, 0)
            log.info("%s: %d items, %.1f s after the listing", stage, len(items),
                     time.time() - listed_at)
        report.results.sort(key=lambda r: (r.kind != KIND_PARTITION, r.item))
        if job == "gc":
            report.pending = _gc_pending(stamp)
        report.seconds = time.monotonic() - started
    except BaseException as exc:
        report.seconds = time.monotonic() - started
        _record(stamp, report, f"failed: {type(exc).__name__}: {exc}")
        raise
    finally:
        if own and session is not None:
            session.stop()
    report.recorded = _record(stamp, report, "ok")
    return report


def _in_range(item: Any, extent_range: tuple[int, int]) -> bool:
    """Whether an item (an extent id, or a tuple starting with one) is in the range."""
    extent_id = item if isinstance(item, int) else item[0]
    return extent_range[0] <= extent_id <= extent_range[1]


def _stages(job: str, stamp: StampAddresses, dry_run: bool) -> list[tuple[str, float]]:
    """(stage, seconds it waits after the previous stage listed its items) of `job`. gc:
    the partitions release the extents they no longer need (gc_release.py), then the orphan
    mark and sweep (gc.py); when the grace period is at most `jobs.gc_wait_grace_max_s`,
    the run waits it out after marking and sweeps again, so what it released and marked is
    reclaimed by this one run."""
    if job != "gc":
        return [(job, 0.0)]
    stages = [(GC_RELEASE, 0.0), ("gc", 0.0)]
    limits = stamp.config.jobs
    if not dry_run and limits.gc_wait_grace_max_s > 0 and (
            limits.gc_grace_s <= limits.gc_wait_grace_max_s):
        stages.append(("gc", limits.gc_grace_s))
    return stages


def _wait_until(wall: float) -> None:
    """Until the wall clock reaches `wall` (a grace period the gc job waits out)."""
    while (left := wall - time.time()) > 0:
        time.sleep(min(left, 1.0))


async def _gc_items(sm: AsyncStreamManagerClient, now: float, stamp: StampAddresses,
                    dry_run: bool) -> list[Any]:
    from lock_service.client import LockClient
    from spark.gc import list_items as gc_items
    from stream_layer.extent_client import AsyncExtentClient

    if not stamp.lock_servers:
        raise InvalidArgument("gc keeps its marks in the lock service: this stamp has none")
    extents = AsyncExtentClient(stamp.config.extent_node)
    try:
        with LockClient(stamp.lock_servers, RUN_HOLDER) as locks:
            return await gc_items(sm, now, extents, locks, stamp.config.jobs.gc_grace_s,
                                  stamp.config.jobs.gc_marks_max, dry_run)
    finally:
        await extents.close()


def _gc_pending(stamp: StampAddresses) -> dict[str, float]:
    from lock_service.client import LockClient
    from spark.gc import pending

    with LockClient(stamp.lock_servers, RUN_HOLDER) as locks:
        return pending(locks, stamp.config.jobs.gc_grace_s)


async def _list(job: str, stamp: StampAddresses, now: float, dry_run: bool) -> list[Any]:
    sm = AsyncStreamManagerClient(stamp.stream_managers, stamp.config.stream_manager)
    try:
        return await list_items(job, sm, now, stamp, dry_run)
    finally:
        await sm.close()


def _spread(sc: SparkContext, job: str, settings: dict[str, Any], items: list[Any],
            config: StampConfig, on_progress: Progress | None) -> list[dict[str, Any]]:
    """Run the items on Spark tasks; poll the status tracker for progress meanwhile."""
    limits = config.jobs
    slices = max(1, min(len(items), max(sc.defaultParallelism * 4,
                                        -(-len(items) // limits.items_per_task_max))))
    group = f"stamp-{job}-{uuid.uuid4().hex[:8]}"
    outcome: dict[str, Any] = {}

    def collect() -> None:
        try:
            sc.setJobGroup(group, f"stamp job {job}")
            outcome["rows"] = (sc.parallelize(items, slices)
                               .mapPartitions(partial(run_items, job, settings)).collect())
        except BaseException as exc:
            outcome["error"] = exc

    runner = threading.Thread(target=collect, name=f"stamp-job-{job}", daemon=True)
    runner.start()
    tracker = sc.statusTracker()
    while runner.is_alive():
        runner.join(limits.progress_interval_ms / 1000)
        if on_progress is not None:
            on_progress(*_tasks_done(tracker, group, slices))
    if "error" in outcome:
        error = outcome["error"]
        raise StampError(f"the Spark job failed: {str(error).splitlines()[0]}") from error
    if on_progress is not None:
        on_progress(slices, slices)
    return list(outcome["rows"])


def _tasks_done(tracker: Any, group: str, slices: int) -> tuple[int, int]:
    done = 0
    for job_id in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job_id)
        for stage_id in (info.stageIds if info is not None else ()):
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                done += stage.numCompletedTasks
    return min(done, slices), slices


def _record(stamp: StampAddresses, report: JobReport, result: str) -> bool:
    """Keep the run in the lock service; False when the stamp has none or it fails (the
    run's own outcome matters more than its record)."""
    if not stamp.lock_servers:
        return False
    from lock_service.client import LockClient

    run = JobRun(report.job, report.started_at, round(report.seconds, 3), report.master,
                 report.dry_run, result, report.totals)
    try:
        with LockClient(stamp.lock_servers, RUN_HOLDER) as locks:
            RunStore(locks, stamp.config.jobs).add(run)
        return True
    except StampError as exc:
        log.warning("could not record the %s run in the lock service: %s", report.job, exc)
        return False


def past_runs(data_dir: str) -> list[JobRun]:
    """The runs the stamp keeps, oldest first."""
    stamp = StampAddresses.load(data_dir)
    if not stamp.lock_servers:
        raise InvalidArgument("this stamp has no lock service: job runs are kept there")
    from lock_service.client import LockClient

    with LockClient(stamp.lock_servers, RUN_HOLDER) as locks:
        return RunStore(locks, stamp.config.jobs).read()
