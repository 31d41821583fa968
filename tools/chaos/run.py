"""`stamp chaos`: a stamp of its own, a mixed workload through the SDK, the nemesis, then the
checker (tools/chaos/__init__.py has the map).

The run: start a fresh stamp in a temporary directory (on a lossy file system when power
cuts are on, tools/lossyfs); make the `chaos` account; start the writers, readers of the
same logs and rows, two subscribers and a scanner; let the nemesis play the seeded schedule
for the run's length; stop it (its fault under way undone), stop the workload, start
whatever is down and wait until the stamp is healthy and the subscribers caught up with
their logs; then check every writer's history, the subscribers and the scans, and the
history of every write and read for linearizability. The stamp is stopped whatever
happens. The report (tools/chaos/report.py) is a plain dict.

Its pieces — the load (`Load`), playing a nemesis beside it (`play`), and the checks
(`stop_subscribers`, `check_load`) — are the two-stamp run's too (tools/chaos/geo.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stampsdk import Client
from stampsdk.errors import StampError

from common.config import load_config
from tools import local_front_ends
from tools.chaos.check import Followed, Verdict, find_violations, linearizability_violations
from tools.chaos.followers import Reader, Scanner, Subscriber
from tools.chaos.history import OpLog, WriterHistory
from tools.chaos.nemesis import FaultRecord, Nemesis, restore
from tools.chaos.report import make_report
from tools.chaos.schedule import Fault, make_schedule
from tools.chaos.workload import MixedWorkload, Tally
from tools.local_stamp import LocalStamp
from tools.lossyfs.mount import LossyMount, available
from tools.progress import SILENT, Progress
from tools.scrape import scrape_many

ACCOUNT = "chaos"
SDK_TIMEOUT_S = 20.0  # one SDK call, its own retries included; then the op is in doubt
TOKEN_RETRIES = 2  # an append that failed is sent again with its token this many times
SUBSCRIBED_LOGS = 2
READERS = 2
CATCH_UP_S = 60.0  # after the run, for a subscriber to deliver its log's last record
EVERY_KIND_EXTRA_S = 120.0
PROGRESS_S = 0.5
# The stamp chaos starts: every role at least twice (3 for Raft groups), 6 ENs in 3 fault
# domains so that one can be down and new extents still find 3 domains; small extents, so
# that faults find sealed ones; no balancing: the nemesis splits, merges and moves by hand.
CHAOS_CONFIG = "\n".join([
    "[extent_node]", "extent_bytes_max = 16777216",
    "[partition_manager]", "balance_interval_s = 0",
    *(f'[[extent_nodes]]\nname = "en-{i}"\nfault_domain = "fd-{(i - 1) % 3 + 1}"\n'
      f'upgrade_domain = "ud-{i}"\nport = 0' for i in range(1, 7)),
]) + "\n"

# Issue 32: owners pick witnesses and answer hinted writes early, front ends take the fast path.
CURP_CONFIG = "[partition]\ncurp = true\n[front_end]\ncurp = true\n"


@dataclass
class ChaosOptions:
    minutes: float
    seed: int
    writers: int = 8
    power_cuts: str = "auto"  # on, off, auto (on when a lossy file system can be mounted)
    config: str | None = None  # a stamp config file instead of CHAOS_CONFIG
    keep: str | None = None  # run the stamp in this (new or empty) directory and keep it
    # Go on past `minutes` (EVERY_KIND_EXTRA_S at most) until every kind of fault of the
    # schedule was applied, and count a kind never applied as a violation.
    every_kind: bool = False
    curp: bool = False  # CURP's fast path on (CURP_CONFIG added to CHAOS_CONFIG)


@dataclass
class RunStatus:
    """What the run shows while it goes."""

    phase: str
    elapsed_s: float = 0.0
    total_s: float = 0.0
    ops: int = 0
    faults: int = 0
    current: str = ""
    event: FaultRecord | None = None  # a fault just started or just ended


def stamp_roles(stamp: LocalStamp) -> dict[str, list[str]]:
    return {"lock": [r.name for r in stamp.lock_servers()],
            "sm": [r.name for r in stamp.stream_managers()],
            "en": [r.name for r in stamp.extent_nodes()],
            "pm": [r.name for r in stamp.partition_managers()],
            "ps": [r.name for r in stamp.partition_servers()],
            "fe": [r.name for r in stamp.front_ends()]}


def power_cuts_wanted(option: str) -> tuple[bool, str]:
    """(whether to cut power, why not when not)."""
    why_not = available()
    if option == "off":
        return False, "--power-cuts off"
    if option == "on" and why_not is not None:
        from common.errors import InvalidArgument
        raise InvalidArgument(f"--power-cuts on needs FUSE: {why_not}")
    return why_not is None, why_not or ""


def run_chaos(options: ChaosOptions, show: Callable[[RunStatus], None],
              progress: Progress = SILENT) -> dict[str, Any]:
    """Run it (module docstring); `show` is told every step, fault and tick, `progress`
    (tools/progress.py) the steps of the stamp's start."""
    cuts, why_no_cuts = power_cuts_wanted(options.power_cuts)
    with work_dir(options.keep) as tmp:
        config_path = Path(options.config or Path(tmp) / "chaos.toml")
        if options.config is None:
            config_path.write_text(CHAOS_CONFIG + (CURP_CONFIG if options.curp else ""))
        config = load_config(config_path).with_ephemeral_ports()
        mount = None
        if cuts:
            mount = LossyMount(Path(tmp) / "backing", Path(tmp) / "stamp",
                               always_durable=("server.log",))
            mount.start()
        stamp = LocalStamp(Path(tmp) / "stamp", config, str(config_path.resolve()),
                           faults=True)
        try:
            show(RunStatus(f"starting a stamp ({len(config.fixed_ports())} processes"
                          f"{', on a lossy file system' if cuts else ''})"))
            stamp.up(progress=progress)
            report = _run_on(stamp, mount, options, show)
            report["power_cuts"] = cuts or why_no_cuts
            if config.front_end.curp:
                report["curp"] = curp_answers(stamp)
            return report
        finally:
            show(RunStatus("stopping the stamp"))
            stamp.kill_all()
            if mount is not None:
                mount.close()


def curp_answers(stamp: LocalStamp) -> dict[str, float]:
    """How the front ends answered the writes of CURP's fast path (issue 32), by answer, as
    they counted since they last started (a front end the run killed restarted at 0)."""
    found = asyncio.run(scrape_many(r.metrics_address for r in stamp.front_ends()))
    answers: dict[str, float] = {}
    for samples in found.values():
        for labels, value in (samples.series("stamp_fe_curp_writes_total")
                              if samples is not None else ()):
            answers[labels["answer"]] = answers.get(labels["answer"], 0.0) + value
    return answers


def work_dir(keep: str | None) -> contextlib.AbstractContextManager[str]:
    """A temporary directory, or `keep` (made if need be; it must be empty) kept after."""
    if keep is None:
        return tempfile.TemporaryDirectory(prefix="stamp-chaos-")
    path = Path(keep).resolve()
    path.mkdir(parents=True, exist_ok=True)
    if any(path.iterdir()):
        from common.errors import InvalidArgument
        raise InvalidArgument(f"--keep {keep}: the directory is not empty")
    return contextlib.nullcontext(str(path))


def _run_on(stamp: LocalStamp, mount: LossyMount | None, options: ChaosOptions,
            show: Callable[[RunStatus], None]) -> dict[str, Any]:
    connection = local_front_ends.ensure_admin_account(
        stamp, ACCOUNT, stamp.data_dir / "chaos-connection-string")

    def client() -> Client:
        return Client.from_connection_string(connection, timeout_s=SDK_TIMEOUT_S)

    roles = stamp_roles(stamp)
    load = Load.make(client, options)
    schedule = make_schedule(options.seed, options.minutes * 60.0, roles, load.logs(),
                             power_cuts=mount is not None)
    nemesis, ended = play(load, lambda changed: Nemesis(stamp, schedule, ACCOUNT,
                                                        load.started, mount, changed),
                          schedule, options, show)
    show(RunStatus("bringing every process back and waiting until the stamp is healthy"))
    restarted = restore(stamp)
    with client() as checker_client:
        stop_subscribers(checker_client, load, show)
        verdict = check_load(checker_client, load, show)
    add_nemesis_failure(verdict, nemesis)
    return make_report(options.seed, options.minutes, schedule, nemesis, load.tally, verdict,
                       ended, restarted, roles, every_kind=options.every_kind)


@dataclass
class Load:
    """A run's workload and the followers beside it (module docstring), each on its own
    client from one factory; `started` is time 0 of its tally and its OpLog."""

    started: float
    tally: Tally
    oplog: OpLog
    workload: MixedWorkload
    subscribers: list[Subscriber]
    scanner: Scanner
    readers: list[Reader]

    @classmethod
    def make(cls, client: Callable[[], Client], options: ChaosOptions) -> Load:
        started = time.monotonic()
        tally = Tally(started)
        oplog = OpLog(started)
        workload = MixedWorkload(client, options.writers, options.seed, large_every=40,
                                 logs_per_writer=2, cas_every=3, batch_every=5,
                                 token_retries=TOKEN_RETRIES, tally=tally, oplog=oplog)
        return cls(started, tally, oplog, workload,
                   [Subscriber(client, h.log, tally)
                    for h in workload.histories[:SUBSCRIBED_LOGS]],
                   Scanner(client, workload.histories, tally),
                   [Reader(client, workload.histories, oplog, tally, options.seed * 100 + i,
                           f"reader-{i}") for i in range(READERS)])

    def logs(self) -> list[str]:
        return [log for h in self.workload.histories for log in h.all_logs()]

    def start(self) -> None:
        self.workload.start()
        for follower in [*self.subscribers, *self.readers]:
            follower.start()
        self.scanner.start()

    def stop(self) -> None:
        """Stop the writers, readers and scanner; the subscribers go on until they caught
        up (`stop_subscribers`)."""
        self.workload.stop()
        for reader in self.readers:
            reader.stop()
        self.scanner.stop()


def play(load: Load, nemesis_of: Callable[[Callable[[FaultRecord], None]], Nemesis],
         schedule: list[Fault], options: ChaosOptions, show: Callable[[RunStatus], None]
         ) -> tuple[Nemesis, float]:
    """Run `load` with the nemesis `nemesis_of(on_change)` makes, playing `schedule`, for
    the run's length (`_over`); then stop both. Returns the nemesis and when the run ended
    (run time)."""
    duration_s = options.minutes * 60.0
    nemesis: Nemesis

    def changed(record: FaultRecord) -> None:
        show(RunStatus("chaos", tally_time(load.started), duration_s, load.workload.ops(),
                       len(nemesis.records), _current(nemesis), record))
    nemesis = nemesis_of(changed)
    show(RunStatus("schedule", total_s=duration_s, current=_schedule_text(schedule)))
    load.start()
    nemesis.start()
    while not _over(tally_time(load.started), duration_s, options.every_kind, nemesis,
                    schedule):
        time.sleep(PROGRESS_S)  # the run's clock: progress twice a second
        show(RunStatus("chaos", tally_time(load.started), duration_s, load.workload.ops(),
                       len(nemesis.records), _current(nemesis)))
    show(RunStatus("stopping the nemesis (undoing its fault under way)"))
    nemesis.stop()
    ended = tally_time(load.started)
    show(RunStatus("stopping the workload"))
    load.stop()
    return nemesis, ended


def stop_subscribers(client: Client, load: Load, show: Callable[[RunStatus], None]) -> None:
    show(RunStatus("waiting for the subscribers to catch up with their logs"))
    _catch_up(client, load.subscribers)
    for sub in load.subscribers:
        sub.stop()


def check_load(client: Client, load: Load, show: Callable[[RunStatus], None],
               histories: list[WriterHistory] | None = None,
               followed: Sequence[Followed] | None = None, oplog: OpLog | None = None
               ) -> Verdict:
    """Every check of the load (check.py), on its histories, subscribers and OpLog unless
    others are given (relaxed ones: tools/chaos/geo_check.py); the subscribers stopped."""
    show(RunStatus("checking every acknowledged operation"))
    oplog = load.oplog if oplog is None else oplog
    verdict = find_violations(client, load.workload.histories if histories is None
                              else histories,
                              load.subscribers if followed is None else followed, oplog)
    show(RunStatus("checking every write and read for linearizability"))
    verdict.add_linearizability(linearizability_violations(oplog))
    verdict.violations += load.scanner.violations
    return verdict


def add_nemesis_failure(verdict: Verdict, nemesis: Nemesis) -> None:
    if nemesis.failure is not None:
        verdict.violations.append(f"the nemesis failed: {nemesis.failure!r}")


def _catch_up(client: Client, subscribers: list[Subscriber]) -> None:
    """Wait (CATCH_UP_S in all) until each subscriber was delivered its log's last record;
    one that was not is reported by the checker (follower_violations)."""
    deadline = time.monotonic() + CATCH_UP_S
    for sub in subscribers:
        try:
            _, next_seq = client.peek(sub.log)
        except StampError:
            continue  # the checker reports a log it cannot read
        if next_seq > 0:
            sub.wait_for(next_seq - 1, max(0.0, deadline - time.monotonic()))


def _over(elapsed: float, duration_s: float, every_kind: bool, nemesis: Nemesis,
          schedule: list[Fault]) -> bool:
    """Whether the run is over: its length has passed and, with `every_kind`, every kind
    of the schedule was applied, or the nemesis played all of it, or EVERY_KIND_EXTRA_S
    more passed too."""
    if elapsed < duration_s:
        return False
    if not every_kind or elapsed >= duration_s + EVERY_KIND_EXTRA_S or nemesis.finished:
        return True
    done = {r.kind for r in nemesis.records if r.outcome == "done"}
    return done >= {f.kind for f in schedule}


def tally_time(started: float) -> float:
    return time.monotonic() - started


def _current(nemesis: Nemesis) -> str:
    record = nemesis.current
    return f"{record.kind} {record.target}" if record is not None else ""


def _schedule_text(schedule: list[Fault]) -> str:
    return "\n".join(f.describe() for f in schedule)
