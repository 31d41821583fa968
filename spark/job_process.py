"""One run of a maintenance job for the job scheduler (spark/scheduler.py), in a process of
its own: `python -m spark.job_process --data-dir DIR --job JOB --claim-fd FD --claim-until T
--report FILE [--master URL] [--extents FIRST-LAST]`. It runs the same `run_job` as
`stamp job` (spark/driver.py records the run in the lock service, ok or failed), so its
Spark session (a JVM of some 400 MB) lives only as long as the run: an idle scheduler holds
none.

Contract (the child's half of the scheduler's fence):
- The scheduler writes lines "UNTIL\\n" to the pipe `--claim-fd`, UNTIL a CLOCK_MONOTONIC
  reading (one host: the same clock in both processes): the run may go on until then. It
  extends the claim as its lease is renewed, never past the lease's claim deadline, which
  comes before the lock service could grant the lease to another scheduler
  (lock_service/client.py).
- When the claim runs out without an extension, or the pipe closes (the scheduler died,
  or stopped the run), a watchdog thread SIGKILLs every process of the run — its Spark JVM
  and PySpark's Python workers, which put themselves in a process group of their own — and
  then this process: nothing of the run acts past its claim but RPCs already sent.
- On success the run's report (JSON, spark/driver.py `JobReport.to_dict` without items) is
  written to `--report` and the exit code is 0 (1 when some item failed or stayed damaged,
  as `stamp job` exits); an error exits 2 with one line on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import select
import signal
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger("stamp.job_process")

EXIT_STOPPED = 3  # the watchdog ended the run


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m spark.job_process",
                                description="One run of a maintenance job for the scheduler.")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--job", required=True, choices=("gc", "ec", "scrub"))
    p.add_argument("--master", default="")
    p.add_argument("--extents", default="", help="FIRST-LAST: only these extent ids")
    p.add_argument("--claim-fd", type=int, required=True)
    p.add_argument("--claim-until", type=float, required=True)
    p.add_argument("--report", type=Path, required=True)
    return p


def descendants(root: int) -> list[int]:
    """Every live process below `root` (from /proc), parents before children."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        for child in children.get(pid, ()):
            found.append(child)
            frontier.append(child)
    return found


def kill_tree(root: int, spare_group: int) -> None:
    """SIGKILL every process below `root` and the process groups they are in (so a Python
    worker forked meanwhile goes too), never the group `spare_group` (the scheduler's)."""
    pids = descendants(root)
    groups = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(pid))
    own = -1
    with contextlib.suppress(OSError):
        own = os.getpgid(root)
    # The root's own group last: it may be the caller's (the run's process ending itself).
    for group in sorted(groups - {spare_group, own, 0, 1}) + (
            [own] if own not in (spare_group, -1, 0, 1) else []):
        if group == own:
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def watch_claim(fd: int, until: float, spare_group: int) -> None:
    """The watchdog (module contract): returns never; ends the process when the claim runs
    out or the pipe closes."""
    pending = b""
    while True:
        left = until - time.monotonic()
        if left <= 0:
            _stop("its claim ran out (the scheduler's lease was not renewed)", spare_group)
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        data = os.read(fd, 4096)
        if not data:
            _stop("the scheduler closed its claim", spare_group)
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            with contextlib.suppress(ValueError):
                until = float(line)


def _stop(why: str, spare_group: int) -> None:
    log.warning("stopping the run: %s", why)
    kill_tree(os.getpid(), spare_group)
    os._exit(EXIT_STOPPED)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s job-{args.job} %(levelname)s %(name)s: "
                               "%(message)s")
    spare_group = os.getpgid(os.getppid())
    if spare_group == os.getpgid(0):
        sys.exit("spark.job_process must run in a process group of its own")
    threading.Thread(target=watch_claim, args=(args.claim_fd, args.claim_until, spare_group),
                     name="claim-watchdog", daemon=True).start()
    from common.errors import StampError
    from spark.driver import run_job
    from spark.session import DEFAULT_MASTER

    extent_range = None
    if args.extents:
        first, _, last = args.extents.partition("-")
        extent_range = (int(first), int(last))
    try:
        report = run_job(args.job, args.data_dir, args.master or DEFAULT_MASTER,
                         extent_range=extent_range)
    except StampError as exc:
        print(f"{args.job}: {exc}", file=sys.stderr)
        sys.exit(2)
    summary = {k: v for k, v in report.to_dict().items() if k != "items"}
    tmp = args.report.with_name(args.report.name + ".tmp")
    tmp.write_text(json.dumps(summary))
    os.replace(tmp, args.report)
    totals = report.totals
    sys.exit(1 if totals.get("failed") or totals.get("damaged") else 0)


if __name__ == "__main__":
    main()
