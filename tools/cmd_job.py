"""`stamp job scrub|ec|gc [--master URL] [--dry-run] [--json]` and `stamp job ls`: the
maintenance jobs on Spark (spark/driver.py), with a progress bar fed by Spark's status
tracker and a summary table; `--json` prints one object for scripts. Past runs are kept in
the stamp's lock service (spark/job_runs.py)."""

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
    job = commands.add_parser("job", help="maintenance jobs on Spark: scrub, ec, gc; ls")
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
