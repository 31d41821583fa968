"""`stamp bench NAME`: benchmarks, printed as a table or, with --json, as one JSON object
`{"bench": NAME, "results": [{"params": {...}, "metrics": {...}}, ...]}` (DESIGN.md §9).
Unless told otherwise a bench starts its own stamp in a temporary directory and stops it."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from tools import cli_checks
from tools.bench.availability_cases import FAULTS, ROLES
from tools.progress import Progress

Rows = list[dict[str, Any]]
SCAN_ROWS = 1_000_000  # bench scan's default --rows
TRIALS = 20  # --trials unless said: each bench caps it as its own cost allows
SECONDS = 5.0  # --seconds unless said, for a bench without a default of its own


def _seconds(args: argparse.Namespace, default: float = SECONDS) -> float:
    """--seconds, or the bench's `default` when not given."""
    return default if args.seconds is None else args.seconds


def _trials(args: argparse.Namespace, cap: int | None = None) -> int:
    """--trials (TRIALS when not given), at most `cap`."""
    trials = TRIALS if args.trials is None else args.trials
    return trials if cap is None else min(trials, cap)


def _extent_append(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.extent_append import run

    return run(seconds=_seconds(args), progress=progress)


def _seal(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.stream import run_seal

    return run_seal(trials=_trials(args), progress=progress)


def _stream_append(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.stream import run_stream_append

    return run_stream_append(seconds=_seconds(args), progress=progress)


def _sm_failover(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.stream import run_sm_failover

    return run_sm_failover(trials=_trials(args), progress=progress)


def _lock(args: argparse.Namespace, progress: Progress) -> Rows:
    from lock_service.bench import bench_lock

    progress("3 lock replicas: acquire and renew latency, CAS/s, leader failover")
    return bench_lock()


def _ec(args: argparse.Namespace, progress: Progress) -> Rows:
    from erasure.bench import bench_codec
    from tools.bench.stream import run_ec_read

    progress("RS(6,3) encode and decode, ours and zfec's")
    return bench_codec() + run_ec_read(progress=progress)


def _log_append(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.metrics_cost import METRICS_OFF, run_metrics_compare
    from tools.bench.partition import run_log_append

    if args.metrics == "compare":
        return run_metrics_compare(seconds=_seconds(args), progress=progress)
    return run_log_append(seconds=_seconds(args), progress=progress,
                          config_text=METRICS_OFF if args.metrics == "off" else "")


def _partition_load(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.partition import run_partition_load

    return run_partition_load(sizes_mb=args.sizes_mb, tail_mb=args.tail_mb,
                              trials=_trials(args, 5), progress=progress)


def _ps_failover(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.partition import run_ps_failover

    return run_ps_failover(trials=_trials(args, 10), progress=progress)


def _fe_append(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.front_end import run_fe_append

    return run_fe_append(seconds=_seconds(args), progress=progress)


def _curp(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.curp import SECONDS_DEFAULT, run_curp

    return run_curp(seconds=_seconds(args, SECONDS_DEFAULT), progress=progress)


def _geo(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.geo import run_geo

    return run_geo(seconds=_seconds(args), progress=progress, ship_pace_ms=args.ship_pace_ms)


def _geo_migrate(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.geo_migrate import run_geo_migrate

    return run_geo_migrate(mb=args.mb, progress=progress)


def _fe_tls(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.front_end_tls import run_fe_tls

    return run_fe_tls(seconds=_seconds(args), progress=progress)


def _scan(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.front_end import run_scan

    return run_scan(rows=args.rows or SCAN_ROWS, trials=_trials(args, 5),
                    progress=progress)


def _spark_scan(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.spark_scan import SPARK_SCAN_ROWS, run_spark_scan

    return run_spark_scan(rows=args.rows or SPARK_SCAN_ROWS, trials=_trials(args, 5),
                          progress=progress)


def _split(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.split import run_split

    return run_split(sizes_mb=args.sizes_mb, trials=_trials(args, 5),
                     progress=progress)


def _balance(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.balance import run_balance

    return run_balance(progress=progress)


def _scrub(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.scrub import run_scrub

    return run_scrub(progress=progress)


def _gc(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.gc import run_gc

    return run_gc(progress=progress)


def _availability(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.availability import run_availability

    # One trial unless asked: every role and fault once is about 15 minutes.
    return run_availability(roles=args.roles, faults=args.faults,
                            trials=1 if args.trials is None else args.trials,
                            progress=progress)


def _idle(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.idle import IDLE_SECONDS_MIN, run_idle

    return run_idle(seconds=max(_seconds(args), IDLE_SECONDS_MIN), progress=progress)


def _blob_append(args: argparse.Namespace, progress: Progress) -> Rows:
    from tools.bench.azure import run_blob_append

    return run_blob_append(seconds=_seconds(args), progress=progress)


BLOB_APPEND = ("Azure's SDK appending 4 KiB blocks to append blobs through the front ends' "
               "Azure Blob endpoint and to Azurite (from npm, when npm is present), taking "
               "turns: 1 and 16 clients (targets: ratio >= 3 with 16, p50 no worse with 1)",
               _blob_append)
BENCHES: dict[str, tuple[str, Callable[[argparse.Namespace, Progress], Rows]]] = {
    "blob-append": BLOB_APPEND,
    "azure-append": BLOB_APPEND,  # the same bench, by the name it was asked for first
    "extent-append": ("3-way replicated appends to one extent: 4 KiB with 1/8/32 appenders, "
                      "1 MiB blocks, and the disk's own 4 KiB append+fsync rate",
                      _extent_append),
    "seal": ("seal and continue: SIGKILL (then SIGSTOP) of the primary extent node -> first "
             "acknowledged append on a new extent, detection included (p50/p99 over --trials "
             "of each)", _seal),
    "stream-append": ("appends through the stream client with small extents (many "
                      "rollovers), against one extent through the extent client",
                      _stream_append),
    "sm-failover": ("SIGKILL the stream manager leader -> next successful namespace change",
                    _sm_failover),
    "lock": ("lock service: acquire/renew latency, CAS/s, leader failover", _lock),
    "ec": ("Reed-Solomon RS(6,3) encode/decode throughput against zfec; read throughput of "
           "an extent replicated, erasure-coded, and coded with 3 fragments lost", _ec),
    "log-append": ("log appends of 1 KiB records through the partition layer: 1/8/32 "
                   "appenders, single records and batches of 100 (--metrics off: on a stamp "
                   "without metrics; --metrics compare: stamps with and without, taking "
                   "turns, target ratio >= 0.97)", _log_append),
    "partition-load": ("SIGKILL the PS of a partition of each of --sizes-mb, with a "
                       "--tail-mb commit log tail -> first read of a random old key answered "
                       "by the new owner (--trials, at most 5; target ratio <= 1.5, p50 <= "
                       "3 s)", _partition_load),
    "ps-failover": ("SIGKILL the partition server of a log -> first acknowledged append on "
                    "the new owner (--trials, at most 10)", _ps_failover),
    "fe-append": ("the log-append loads through the SDK and a front end and direct through "
                  "the partition client, taking turns (targets: ratio >= 0.8 for 32x1 and "
                  "32x100, added p50 <= 0.7 ms for 1x1)", _fe_append),
    "fe-tls": ("the fe-append loads through the SDK to a stamp with TLS and to one without, "
               "side by side, taking turns (targets: ratio >= 0.9 at 32x100, added p50 <= "
               "0.2 ms for 1x1)", _fe_tls),
    "curp": ("CURP on and off (issue 32): two stamps taking turns, through the SDK: one "
             "appender round robin over 64 logs, one client putting new 1 KiB rows, one "
             "appender on one log, 32x1 and 32x100 appenders (--seconds per load and side, "
             "default 12): rates, p50/p99, the fast path's share and the witnesses' disk "
             "bytes per write; ratio on/off and the p50 it adds", _curp),
    "geo": ("inter-stamp replication on a location of two small stamps: the log-append "
            "loads 32x1 and 32x100 through the SDK for a replicated account and a "
            "stand-alone one taking turns, with the replication lag p50/p99 (targets: "
            "ratio >= 0.85, lag p99 <= 1 s at 32x1); a planned failover under 8 writers: "
            "the longest pause (target <= 2 s); then the primary stamp SIGKILLed and an "
            "unplanned failover: the time to the first write at the new primary (target "
            "<= 5 s)", _geo),
    "geo-migrate": ("the migration of an account of --mb MB (default 1024) to another stamp "
                    "of a location of three small stamps, under 8 SDK writers: its time, the "
                    "bytes copied and their rate, the longest pause a writer saw (target "
                    "<= 2 s)", _geo_migrate),
    "scan": ("rows/s scanning --rows entities of 100 bytes over 4 range partitions through "
             "the SDK (--trials scans, at most 5; target >= 100,000 rows/s)", _scan),
    "spark-scan": ("entities/s and log records/s read through the Spark data source on "
                   "local[2] beside the SDK's scan and reads of the same data, taking turns "
                   "(--rows of each, default 200,000; --trials, at most 5; target ratio >= "
                   "0.5; Spark's start-up reported apart)", _spark_scan),
    "split": ("split then merge a partition of each of --sizes-mb under an appender load on "
              "it (--trials, at most 5): duration and unavailable time (targets: duration "
              "ratio largest/smallest <= 1.5, unavailable p50 <= 100 ms)", _split),
    "balance": ("2 PSs, one partition, 32 appenders over 256 logs, uniform then skewed: "
                "records/s before and after the PM balances, time until every PS is within "
                "25% of the mean (targets: <= 30 s, no appender error, after >= before); "
                "then the same load on one partition and on two PSs taking turns, with no "
                "balancing (the most balancing can reach here)", _balance),
    "scrub": ("stamp job scrub on local[2] over 256 MB of sealed 3-way replicated extents: "
              "MB/s verified (every replica) against the disk's sequential read rate, taking "
              "turns, page cache dropped (target ratio >= 0.5)", _scrub),
    "availability": ("8 SDK writers over two partitions; for each --roles and --faults, the "
                     "longest stall a writer sees and when every writer appends again after "
                     "the fault ends (p50/max over --trials, default 1), then every "
                     "acknowledged record read back (targets: stall <= 1 s, <= 3 s for the "
                     "partition server; appending again within 5 s; nothing lost)",
                     _availability),
    "idle": ("CPU of an idle stamp of the default shape (nothing running against it), "
             "by kind of process and in all, as a percentage of one core over --seconds "
             "(at least 20) after 10 s of settling (target: <= 5%)", _idle),
    "gc": ("stamp job gc over 32 streams of small extents, 31 of them deleted: extents "
           "examined per second (mark run), deleted per second and bytes reclaimed (sweep "
           "run)", _gc),
}


def register(commands: Any) -> None:
    bench = commands.add_parser(
        "bench", help="run a benchmark (table, or JSON with --json)",
        description="Benchmarks: " + "; ".join(f"{n}: {d}" for n, (d, _) in BENCHES.items()))
    bench.add_argument("name", choices=sorted(BENCHES), help="which benchmark")
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.add_argument("--seconds", type=float, default=None,
                       help="how long each measured phase runs (default 5; curp: each "
                            "side's time per load, default 12)")
    bench.add_argument("--trials", type=_positive, default=None,
                       help=f"trials of a kill-and-measure bench (default {TRIALS}; "
                            "availability: 1)")
    bench.add_argument("--sizes-mb", type=_sizes_mb, default=(10, 1000),
                       help="partition-load and split: partition sizes in MB, ascending, comma "
                            "separated; the ratio compares the last with the first "
                            "(default 10,1000)")
    bench.add_argument("--tail-mb", type=cli_checks.megabytes, default=4,
                       help="partition-load: MB written after the last checkpoint, replayed "
                            "by each new owner (default 4)")
    bench.add_argument("--rows", type=_rows, default=None,
                       help="scan: entities to write and scan (default 1,000,000); "
                            "spark-scan: entities and log records (default 200,000)")
    bench.add_argument("--metrics", choices=("on", "off", "compare"), default="on",
                       help="log-append: the stamp's Prometheus metrics on (default), off, "
                            "or compare both in one run, taking turns")
    bench.add_argument("--roles", type=_choices("roles", ROLES), default=ROLES,
                       help="availability: the processes to fault, comma separated (default "
                            f"all: {','.join(ROLES)})")
    bench.add_argument("--faults", type=_choices("faults", FAULTS), default=FAULTS,
                       help="availability: the faults to deal, comma separated (default all: "
                            f"{','.join(FAULTS)}; slow-disk only to extent nodes)")
    bench.add_argument("--mb", type=_positive, default=1024,
                       help="geo-migrate: the account's size in MB (default 1024)")
    bench.add_argument("--ship-pace-ms", type=_pace_ms, default=None,
                       help="geo: the stamps' partition.geo_ship_pace_ms, the least time "
                            "between two batches a partition ships (default: the config's)")
    bench.set_defaults(handler=cmd_bench)


def _pace_ms(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"whole milliseconds, not {text!r}") from None
    if not 0 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"0 to 10000, not {value}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1, not {value}")
    return value


def _choices(what: str, allowed: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        picked = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
        unknown = [p for p in picked if p not in allowed]
        if unknown or not picked:
            raise argparse.ArgumentTypeError(
                f"{', '.join(unknown) or 'none given'} not among "
                f"{', '.join(allowed)}")
        return picked
    return parse


def _rows(text: str) -> int:
    try:
        rows = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--rows is a whole number, not {text!r}") from None
    if not 1000 <= rows <= 100_000_000:
        raise argparse.ArgumentTypeError(f"--rows is 1,000 to 100,000,000, not {rows:,}")
    return rows


def _sizes_mb(text: str) -> tuple[int, ...]:
    sizes = tuple(cli_checks.megabytes(part.strip()) for part in text.split(","))
    if list(sizes) != sorted(set(sizes)):
        raise argparse.ArgumentTypeError(f"{text!r}: sizes must be ascending and distinct")
    return sizes


def cmd_bench(args: argparse.Namespace) -> int:
    # The bench's steps on stderr (tools/progress.py): a live line on a terminal, plain
    # `[bench NAME] ...` lines in a log; the table or JSON alone on stdout.
    with Progress(f"bench {args.name}") as progress:
        rows = BENCHES[args.name][1](args, progress)
    if args.json:
        print(json.dumps({"bench": args.name, "results": rows}))
    else:
        print_results(rows)
    return 0


def print_results(rows: Rows) -> None:
    """The rows as one table (tools/tables.py): a column per parameter, then per metric,
    each in name order; numbers right-aligned."""
    from tools import tables

    params = sorted({k for row in rows for k in row["params"]})
    metrics = sorted({k for row in rows for k in row["metrics"]})
    header = params + metrics
    tables.print_table(header, ([_cell(row["params"].get(k)) for k in params]
                                + [_cell(row["metrics"].get(k)) for k in metrics]
                                for row in rows),
                       right=header)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 1e6 else f"{value:,.0f}"
    return str(value)
