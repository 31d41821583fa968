"""`stamp chaos --minutes N --seed S [--geo] [--every-kind] [--json] [--plot FILE]`: torture a
stamp of its own in the open (issue 19; tools/chaos/run.py), or with --geo a location of two
(issue 30; tools/chaos/geo.py), and report operations, faults, violations and availability.
Exit status 1 when the checker found a violation, so CI can run it as is."""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

from common.errors import InvalidArgument
from tools import cli_checks

PLAIN_LINE_S = 30  # off a terminal, a line with the counts this often

DESCRIPTION = """\
Start a fresh stamp in a temporary directory (3 lock, 3 SM, 6 EN in 3 fault domains, 2 PM,
2 PS, 2 FE) and run a mixed workload through the SDK against it: writers appending with
tokens (a failed append is retried with its token), putting entities, putting on ETag
conditions (current and stale), atomic batches; two readers reading the same logs and rows
while they are written; two subscribers following logs; a scanner.
Meanwhile a nemesis plays a schedule drawn from --seed, one fault at a time: SIGKILL and
restart, SIGSTOP/SIGCONT and isolation from all peers of processes of every role; slow,
failing and torn journal writes; bytes flipped on the read path and on disk; power cuts of
the whole stamp (on a lossy FUSE file system, when this machine has FUSE); and splits,
merges and moves of partitions. Then every acknowledged operation is checked: nothing lost,
changed, reordered or applied twice, every ETag condition respected, every subscriber fed
each record once, in order, from the first to the last; and the history of every write and
read, with its real-time bounds, linearizable per log and per row. A process that died
without being asked, too, is a violation. The same seed replays the same schedule.

With --geo, a location of two stamps in two regions instead, as `stamp location up` starts
it (each stamp 3 lock, 3 SM, 3 EN, 1 PM, 1 PS, 1 FE), the `chaos` account placed in it, and
the same workload through a `Location=` connection string, following the account across
failovers. The geo nemesis cuts the link between the stamps and heals it, SIGKILLs the whole
secondary stamp and brings it back, cuts the power of one stamp (on a lossy FUSE file
system, when this machine has FUSE), makes planned failovers, and SIGKILLs the whole primary
stamp under a cut link, fails the account over unplanned (as --yes would) and brings the old
primary back, which demotes itself and sets its unshipped writes aside; it is then
bootstrapped, a live secondary again. Besides every check above, the geo rules: nothing
acknowledged is lost, except writes acknowledged after the last sync time the location
reported before an unplanned failover, and each of those the final primary lacks must be
in the old primary's tail (`stamp location tail`); linearizability is relaxed for those
writes alone (they may have happened or not; what the old primary answered from them is
left out); a tail at a stamp no unplanned failover deposed is a violation; and after the
run, replication drained, the two stamps hold the same logs and entities.

The global --data-dir is not used: the stamp (or location) lives in a temporary directory,
removed afterwards (--keep DIR keeps it). Exit status: 0 when no violation was found, 1
otherwise (or on an error)."""


def register(commands: Any) -> None:
    chaos = commands.add_parser(
        "chaos", help="run a workload under a seeded nemesis on a fresh stamp and check it",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    chaos.add_argument("--minutes", type=_minutes, required=True, metavar="N",
                       help="how long the workload and the nemesis run (e.g. 1, 0.5, 30)")
    chaos.add_argument("--seed", type=cli_checks.seed, default=None, metavar="S",
                       help="the schedule's seed (default: a random one, printed)")
    chaos.add_argument("--writers", type=cli_checks.writer_count, default=8, metavar="N",
                       help="writer threads, each with two logs and an entity group "
                            "(default 8)")
    chaos.add_argument("--geo", action="store_true",
                       help="run a location of two stamps instead of one stamp: geo faults "
                            "(cut link, a whole stamp killed or its power cut, planned and "
                            "unplanned failovers) and the checker's geo rules (issue 30)")
    chaos.add_argument("--power-cuts", choices=("auto", "on", "off"), default="auto",
                       help="cut the whole stamp's power now and then (with --geo: one "
                            "stamp's); needs FUSE (auto: when this machine has it)")
    chaos.add_argument("--config", default=None, metavar="FILE",
                       help="a stamp config (TOML) to run instead of chaos's own (not with "
                            "--geo)")
    chaos.add_argument("--curp", action="store_true",
                       help="run the stamp with CURP's fast path on (issue 32): writes that "
                            "commute acknowledged on their owner's early answer and three "
                            "witnesses; the report counts how the front ends answered them "
                            "(not with --config or --geo)")
    chaos.add_argument("--keep", default=None, metavar="DIR",
                       help="run the stamp in DIR (new or empty) and keep it afterwards: "
                            "every process's server.log, for a post-mortem (with power "
                            "cuts the files are under DIR/backing)")
    chaos.add_argument("--every-kind", action="store_true",
                       help="go on past --minutes (2 minutes more at most) until every kind "
                            "of fault of the schedule was applied; a kind never applied is "
                            "a violation (CI: prove the run dealt them all)")
    chaos.add_argument("--json", action="store_true",
                       help="print the report as one JSON object (progress stays on stderr)")
    chaos.add_argument("--plot", default=None, metavar="FILE",
                       help="draw the availability timeline (ops/s, faults shaded) as a PNG")
    chaos.set_defaults(handler=cmd_chaos)


def _minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of minutes, not {text!r}") from None
    if not 0.1 <= value <= 24 * 60:
        raise argparse.ArgumentTypeError(f"between 0.1 and 1440 minutes, not {text}")
    return value


def cmd_chaos(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tools.chaos.geo import run_geo_chaos
    from tools.chaos.report import print_report
    from tools.chaos.run import ChaosOptions, run_chaos
    from tools.progress import Progress

    if args.plot is not None:
        plot_dir = Path(args.plot).resolve().parent
        if not plot_dir.is_dir():
            raise FileNotFoundError(f"--plot: no directory {plot_dir}")
    if args.config is not None and args.geo:
        raise InvalidArgument("--config does not go with --geo: a location's stamps have "
                              "their own shape")
    if args.curp and (args.config is not None or args.geo):
        raise InvalidArgument("--curp goes with chaos's own stamp: not with --config (set "
                              "[partition] curp and [front_end] curp there) nor --geo")
    if args.config is not None and not Path(args.config).is_file():
        raise FileNotFoundError(f"--config: no file {args.config}")
    if args.keep is not None and Path(args.keep).is_dir() and any(Path(args.keep).iterdir()):
        raise InvalidArgument(f"--keep {args.keep}: the directory is not empty")
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    # The seed first, alone on its line: a failure is replayed from it.
    print(f"stamp chaos --minutes {args.minutes:g} --seed {seed}{' --geo' * args.geo}",
          file=sys.stderr, flush=True)
    options = ChaosOptions(args.minutes, seed, args.writers, args.power_cuts, args.config,
                           args.keep, args.every_kind, args.curp)
    run = run_geo_chaos if args.geo else run_chaos
    with Progress("chaos") as progress:
        report = run(options, _Display(progress, starts=args.geo).show, progress)
    if args.plot is not None:
        from tools.chaos.plot import plot_timeline

        plot_timeline(report, args.plot)
        print(f"availability timeline: {args.plot}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report, Console())
    return 1 if report["violations"] else 0


class _Display:
    """Progress on stderr through tools/progress.py (a live line on a terminal, plain lines
    elsewhere): each step; while the chaos runs, seconds done of the run's length with the
    ops acknowledged and the fault under way; the schedule, and each fault as it ends (with
    `starts`, as it starts too: a geo fault lasts up to half a minute), as lines of their
    own (above the live line on a terminal)."""

    def __init__(self, progress: Any, starts: bool = False) -> None:
        self.progress = progress
        self.starts = starts
        self._phase = ""

    def show(self, status: Any) -> None:
        if status.phase == "schedule":
            lines = status.current.splitlines()
            self._line("\n".join([f"schedule ({len(lines)} faults):", *lines]))
            return
        if status.event is not None:
            record = status.event
            if record.outcome != "running":
                self._line(f"t={record.start_s:7.1f}s {record.kind:<12} {record.target:<6} "
                           f"{record.outcome} in {record.end_s - record.start_s:.1f}s: "
                           f"{record.detail}")
            elif self.starts:
                self._line(f"t={record.start_s:7.1f}s {record.kind:<12} {record.target:<6} "
                           f"starts{f' ({record.detail})' if record.detail else ''}")
            return
        if status.phase != self._phase:
            self._phase = status.phase
            if status.phase == "chaos":
                self.progress.phase(f"workload and nemesis for {status.total_s:.0f} s",
                                    int(status.total_s))
            else:
                self.progress.phase(status.phase)
        if status.phase == "chaos":
            text = (f"{status.ops:,} ops acknowledged, {status.faults} faults"
                    + (f", now {status.current}" if status.current else ""))
            seconds = int(status.elapsed_s)
            if seconds // PLAIN_LINE_S > self.progress.done // PLAIN_LINE_S:
                self.progress.advance(seconds - self.progress.done)
                self.progress.status(text)  # a line now and then in a CI log
            else:
                self.progress.advance(max(0, seconds - self.progress.done), text)

    def _line(self, text: str) -> None:
        # On a terminal tools/progress.py draws writes to sys.stderr above its live line.
        print(text, file=sys.stderr, flush=True)
