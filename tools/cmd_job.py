"""`stamp job scrub|ec|gc [--master URL] [--dry-run] [--json]`, `stamp job ls` and `stamp
job schedule`: the maintenance jobs on Spark (spark/driver.py), with a progress bar fed by
Spark's status tracker and a summary table; `--json` prints one object for scripts. Past
runs are kept in the stamp's lock service (spark/job_runs.py); the job scheduler runs them
by itself (spark/scheduler.py), on schedules `schedule` shows and changes."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

JOB_HELP = {
    "scrub": "verify every block checksum of every sealed replica and fragment where it lies, "
             "compare replicas, repair bad copies from good ones",
    "ec": "erasure-code the sealed extents of streams whose policy asks for it "
          "('stamp stream policy'), then drop their replicas",
    "gc": "have every partition release the extents of its streams it no longer needs "
          "(commit log below the replay point, merged-away runs, values of trimmed or "
          "deleted rows), then delete extents no stream holds and copies the stream "
          "manager does not count on (marked by one run, swept by a later one after "
          "jobs.gc_grace_s)",
}


def register(commands: Any) -> None:
    job = commands.add_parser("job", help="maintenance jobs on Spark: scrub, ec, gc; ls; "
                                          "schedule (when they run by themselves)")
    sub = job.add_subparsers(dest="job_command", metavar="JOB", required=True)
    for name, text in JOB_HELP.items():
        run = sub.add_parser(name, help=text)
        run.add_argument("--master", default=None,
                         help="Spark master URL (default local[*]; e.g. spark://HOST:PORT)")
        run.add_argument("--dry-run", action="store_true",
                         help="look and report, change nothing")
        run.add_argument("--json", action="store_true", help="print one JSON object")
        run.set_defaults(handler=cmd_run, job=name)
    ls = sub.add_parser("ls", help="past job runs and their results (kept in the stamp)")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(handler=cmd_ls)
    sched = sub.add_parser(
        "schedule", help="show or change when the job scheduler runs the jobs by itself",
        description="Show each job's schedule, last run, last success, next due time and "
                    "backlog, as the active job scheduler ('stamp up' starts two: jobs-1, "
                    "jobs-2) keeps them. --set changes a schedule for the whole stamp (kept "
                    "in its lock service; the active scheduler picks it up within "
                    "jobs.scheduler_poll_s); --reset returns it to the config's value.")
    sched.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                       help="gc=30m (how often gc runs), ec=5m (how often it looks for "
                            "extents whose policy is due), scrub=1h (a scrub slice this "
                            "often), scrub-period=7d (every extent verified within it), "
                            "scrub-rate=16MiB (bytes a second a slice averages at most; 0: "
                            "no bound). Durations take s, m, h, d, w; 'off' stops a job's "
                            "schedule. Repeat for several")
    sched.add_argument("--reset", action="append", default=[], metavar="NAME",
                       help="back to the config's value (NAME as for --set, or 'all')")
    sched.add_argument("--json", action="store_true", help="print JSON")
    sched.set_defaults(handler=cmd_schedule)


def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from spark.driver import run_job
    from spark.session import DEFAULT_MASTER

    master = args.master or DEFAULT_MASTER
    if args.json:
        report = run_job(args.job, args.data_dir, master, args.dry_run)
        print(json.dumps(report.to_dict(), indent=2))
        return _exit_code(report.totals)
    err = Console(stderr=True)
    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=err,
                  transient=True) as bar:
        task = bar.add_task(f"{args.job} on {master}: starting Spark", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None,
                       description=f"{args.job} on {master}: Spark tasks")
        report = run_job(args.job, args.data_dir, master, args.dry_run, progress)
    from tools import tables

    # tables.console(): not a terminal, no wrapping at 80 columns (tools/tables.py).
    _print_summary(tables.console(), report)
    return _exit_code(report.totals)


def _exit_code(totals: dict[str, int]) -> int:
    """1 when something was left failed or damaged: scripts see it without parsing."""
    return 1 if totals.get("failed") or totals.get("damaged") else 0


def _print_summary(console: Any, report: Any) -> None:
    from rich.table import Table

    totals = report.totals
    notable = [r for r in report.results if r.status != "ok"]
    if notable:
        items = Table(title=f"{report.job}: items that were not simply ok")
        for column in ("ITEM", "STATUS", "COPIES", "BYTES", "FOUND", "FIXED", "DETAIL"):
            items.add_column(column, overflow="fold")
        for r in notable:
            bytes_ = r.released_bytes if r.kind == "partition" else r.bytes
            items.add_row(f"{r.kind} {r.item}", r.status, str(r.copies), str(bytes_),
                          str(r.found), str(r.fixed), r.detail)
        console.print(items)
    console.print(f"stamp job {report.job}{' (dry run)' if report.dry_run else ''} on "
                  f"{report.master}: {report.seconds:.1f} s"
                  + ("" if report.recorded else " (not recorded: no lock service)"))
    if report.job == "gc":
        for line in gc_outcome(totals, report.pending, report.dry_run):
            console.print(line)
    summary = Table()
    summary.add_column("TOTAL")
    summary.add_column("VALUE", justify="right")
    for key, value in totals.items():
        if value or key in ("items", "found", "fixed"):
            summary.add_row(key, f"{value:,}")
    console.print(summary)


def gc_outcome(totals: dict[str, int], pending: dict[str, float], dry_run: bool
               ) -> list[str]:
    """What a gc run did to disk space, in words: what partitions released, what was
    deleted (and freed), and what waits for its grace period and when a later run
    reclaims it (released bytes stay on disk until then)."""
    would = "would be " if dry_run else ""
    lines = []
    if totals.get("released"):
        lines.append(f"released: {totals['released']:,} extents "
                     f"({totals['released_bytes']:,} bytes, one replica's worth) "
                     f"{would}dropped from partitions' streams; they stay on disk until a "
                     "sweep deletes them once no stream holds them")
    if dry_run:
        lines.append(f"would delete: {totals.get('would', 0):,} extents and copies")
    else:
        lines.append(f"deleted: {totals.get('done', 0):,} extents and copies, "
                     f"{totals.get('bytes', 0):,} bytes freed on disk")
    copies = int(pending.get("copies", 0))
    if copies:
        first, last = (time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(pending[key]))
                       for key in ("reclaim_from", "reclaim_by"))
        lines.append(f"waiting: {copies:,} unused copies marked, kept for the grace period "
                     f"(jobs.gc_grace_s = {pending['grace_s']:g} s); a later 'stamp job gc' "
                     f"reclaims them from {first} to {last} UTC")
    return lines


def cmd_ls(args: argparse.Namespace) -> int:
    from spark.driver import past_runs

    runs = past_runs(args.data_dir)
    if args.json:
        print(json.dumps([r.to_dict() for r in runs], indent=2))
        return 0
    if not runs:
        print("no job runs recorded")
        return 0
    from tools import tables

    counts = ("items", "found", "fixed", "done", "failed")
    tables.print_table(
        ["STARTED (UTC)", "JOB", "SECONDS", *(c.upper() for c in counts), "RESULT"],
        ([time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r.started_at)), r.job,
          f"{r.seconds:.1f}", *(r.totals.get(c, 0) for c in counts),
          r.result + (" (dry run)" if r.dry_run else "")] for r in runs),
        right=["SECONDS", *(c.upper() for c in counts)])
    return 0


def cmd_schedule(args: argparse.Namespace) -> int:
    from tools.job_schedule_view import change_schedules, schedule_view

    changes = [_parsed(text) for text in args.set]
    if changes or args.reset:
        change_schedules(args.data_dir, dict(changes), args.reset)
    view = schedule_view(args.data_dir)
    if args.json:
        print(json.dumps(view, indent=2))
        return 0
    _print_schedule(view)
    return 0


def _parsed(text: str) -> tuple[str, float]:
    from spark.schedule import parse_setting

    return parse_setting(text)


def _print_schedule(view: dict[str, Any]) -> None:
    from spark.schedule import format_duration
    from tools import tables

    def when(at: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) if at else "-"

    tables.print_table(
        ["JOB", "EVERY", "LAST RUN (UTC)", "RESULT", "LAST SUCCESS (UTC)", "NEXT DUE (UTC)",
         "BACKLOG"],
        ([job["job"], format_duration(job["every_s"]), when(job["last_run_at"]),
          job["last_result"] or "-", when(job["last_success_at"]),
          when(job["next_due_at"]) if job["next_due_at"] is not None else "off",
          f"{job['backlog']:,} {job['backlog_what']}"] for job in view["jobs"]),
        right=["BACKLOG"])
    active = view["active"]
    print(f"active scheduler: {active['name']} ({active['address']})" if active else
          "active scheduler: none (no job scheduler holds the lease: is the stamp up?)")
    print(f"scrub: every extent within {format_duration(view['scrub_period_s'])}, at most "
          f"{view['scrub_bytes_per_s_max'] / 2**20:g} MiB/s on average"
          if view["scrub_bytes_per_s_max"] else
          f"scrub: every extent within {format_duration(view['scrub_period_s'])}, no rate "
          f"bound")
    print(f"gc: trimmed space comes back within "
          f"{format_duration(view['gc_reclaim_within_s'])} (the gc interval + the grace, "
          f"jobs.gc_grace_s = {format_duration(view['gc_grace_s'])})"
          if view["gc_reclaim_within_s"] else "gc: off (trimmed space waits for 'stamp job gc')")
    if view["overrides"]:
        from spark.schedule import SETTABLE

        names = {field: name for name, field in SETTABLE.items()}
        print("set with --set (else the config's): " + ", ".join(
            f"{names.get(field, field)}={value:g}"
            for field, value in sorted(view["overrides"].items())))
