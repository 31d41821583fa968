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
    "gc": "delete extents no stream holds and copies the stream manager does not count on "
          "(marked by one run, swept by a later one after jobs.gc_grace_s)",
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
        items = Table(title=f"{report.job}: extents that were not simply ok")
        for column in ("EXTENT", "STATUS", "COPIES", "BYTES", "FOUND", "FIXED", "DETAIL"):
            items.add_column(column, overflow="fold")
        for r in notable:
            items.add_row(str(r.item), r.status, str(r.copies), str(r.bytes), str(r.found),
                          str(r.fixed), r.detail)
        console.print(items)
    console.print(f"stamp job {report.job}{' (dry run)' if report.dry_run else ''} on "
                  f"{report.master}: {report.seconds:.1f} s"
                  + ("" if report.recorded else " (not recorded: no lock service)"))
    summary = Table()
    summary.add_column("TOTAL")
    summary.add_column("VALUE", justify="right")
    for key, value in totals.items():
        if value or key in ("items", "found", "fixed"):
            summary.add_row(key, f"{value:,}")
    console.print(summary)


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
