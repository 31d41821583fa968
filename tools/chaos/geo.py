"""`stamp chaos --geo` (issue 30): a location of two stamps of its own, the mixed workload
through a `Location=` connection string, the geo nemesis, then the checker with its geo rules.

The run:
1. start a location as `stamp location up` does (the location service and two stamps in two
   regions, tools/local_location.py) in a temporary directory, one of its stamps on a lossy
   file system when power cuts are on (POWER_CUT_SITE: its data directory is the mount), and
   place the `chaos` account in it (`stamp location create-account`);
2. run the one-stamp run's load (tools/chaos/run.py `Load`: writers, readers, subscribers,
   a scanner) on clients that resolve the account through the location and follow it across
   failovers, while the geo nemesis (tools/chaos/geo_nemesis.py) plays the seeded geo
   schedule (tools/chaos/geo_schedule.py); stop both;
3. bring every process of the location back; check that each primary an unplanned failover
   deposed holds the account as the secondary and set its unshipped writes aside (`stamp
   location tail`), and bootstrap the secondary if a fault cut short left it unavailable;
4. compare the two stamps (`compare_stamps`): the writers stopped, wait until the primary's
   last sync time passes that moment (a planned drain, DRAIN_TIMEOUT_S at most), then read
   every workload log and scan every entity at each stamp (an SDK client reading from the
   primary, and one reading from the secondary): they must hold the same;
5. read what the final primary holds, and the tails the deposed primaries set aside (a tail
   anywhere else is a violation: no failover took those writes from its stamp), and judge
   what is lost by the geo rules (tools/chaos/geo_check.py); then the one-stamp checks
   (every acknowledged op, the subscribers, linearizability), on the history those rules
   relaxed.
The location is stopped whatever happens (every process by PID). The report is run.py's,
with a `geo` part (tools/chaos/report.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from stampsdk import Client, connection_string
from stampsdk.errors import NotFound
from stampsdk.errors import StampError as SdkError

from common.errors import InvalidArgument, StampError, Unavailable
from tools.chaos.check import READ_TRIES, read_log
from tools.chaos.geo_check import (
    Failover,
    FinalState,
    GeoVerdict,
    StampCopy,
    TailWrites,
    convergence_violations,
    followed_views,
    geo_rules,
    relaxed_history,
    relaxed_oplog,
    tail_writes,
)
from tools.chaos.geo_nemesis import GeoNemesis, parts, until_set_aside
from tools.chaos.geo_schedule import make_geo_schedule
from tools.chaos.history import (
    ROWS_PER_WRITER,
    WriterHistory,
    entity_key,
    log_key,
    row_key,
    value_id,
)
from tools.chaos.report import make_report
from tools.chaos.run import (
    ACCOUNT,
    SDK_TIMEOUT_S,
    ChaosOptions,
    Load,
    RunStatus,
    add_nemesis_failure,
    check_load,
    play,
    power_cuts_wanted,
    stop_subscribers,
    tally_time,
    work_dir,
)
from tools.geo_account import Tail, drain, stamps_of, tails
from tools.geo_bootstrap import bootstrap
from tools.local_location import SITES, STAMPS_DEFAULT, STAMPS_DIR, LocalLocation
from tools.local_stamp import FAULTS_ENV_VAR, LocalStamp
from tools.lossyfs.mount import LossyMount
from tools.progress import SILENT, Progress

POWER_CUT_SITE = SITES[STAMPS_DEFAULT - 1].name  # on a lossy file system, whatever its role
# The location server's own balancing (migrations off stamps past the capacity watermark)
# would be a fault the schedule did not deal: not within a run.
BALANCE_OFF_S = 7 * 24 * 3600.0
DRAIN_TIMEOUT_S = 60.0
CONVERGE_TRIES = 3  # a copy that differs is read again after another drain (a straggler)
SURVEY_TIMEOUT_S = 5.0  # one read of the secondary's rows before an unplanned failover


def run_geo_chaos(options: ChaosOptions, show: Callable[[RunStatus], None],
                  progress: Progress = SILENT) -> dict[str, Any]:
    """Run it (module docstring); `show` is told every step, fault and tick, `progress`
    (tools/progress.py) the steps of the location's start."""
    if options.config is not None:
        raise InvalidArgument("--config does not go with --geo: a location's stamps have "
                              "their own shape (tools/local_location.py)")
    cuts, why_no_cuts = power_cuts_wanted(options.power_cuts)
    with work_dir(options.keep) as tmp, _faults_rpc():
        location = LocalLocation(Path(tmp) / "location", balance_interval_s=BALANCE_OFF_S)
        mount = None
        if cuts:
            mount = LossyMount(Path(tmp) / "backing",
                               location.directory / STAMPS_DIR / POWER_CUT_SITE,
                               always_durable=("server.log",))
            mount.start()
        try:
            show(RunStatus("starting a location of two stamps"
                           + (f" ({POWER_CUT_SITE} on a lossy file system)" if cuts else "")))
            location.up(progress=progress)
            report = _run_on_location(location, mount, options, show)
            report["power_cuts"] = cuts or why_no_cuts
            return report
        finally:
            show(RunStatus("stopping the location"))
            _kill_location(location)
            if mount is not None:
                mount.close()


@contextlib.contextmanager
def _faults_rpc() -> Iterator[None]:
    """The location's stamps serve the Faults service (the link is cut through it): its
    processes are planned with it while this holds (LocalStamp's `faults`)."""
    before = os.environ.get(FAULTS_ENV_VAR)
    os.environ[FAULTS_ENV_VAR] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(FAULTS_ENV_VAR, None)
        else:
            os.environ[FAULTS_ENV_VAR] = before


def _run_on_location(location: LocalLocation, mount: LossyMount | None,
                     options: ChaosOptions, show: Callable[[RunStatus], None]
                     ) -> dict[str, Any]:
    from tools.cmd_location import create_account

    show(RunStatus(f"placing the {ACCOUNT} account in the location"))
    _, account = create_account(location, ACCOUNT)
    text = connection_string.make([], ACCOUNT, key=account.keys[0],
                                  location=location.location_endpoints()).format()

    def client() -> Client:
        return Client.from_connection_string(text, timeout_s=SDK_TIMEOUT_S)

    load = Load.make(client, options)
    wall_at_start = time.time() - tally_time(load.started)
    power = (POWER_CUT_SITE, mount) if mount is not None else None
    schedule = make_geo_schedule(options.seed, options.minutes * 60.0,
                                 POWER_CUT_SITE if power else None)
    nemesis, ended = play(load, lambda changed: GeoNemesis(
        location, schedule, ACCOUNT, load.started, wall_at_start, power, changed,
        lambda: survey_secondary(text, load)), schedule, options, show)
    assert isinstance(nemesis, GeoNemesis)
    show(RunStatus("bringing every process of the location back"))
    restarted = location.up()  # what died unasked: the nemesis undid its faults
    unplanned = [f for f in nemesis.failovers if f.kind == "unplanned"]
    set_aside = _settle_deposed(location, unplanned, show)
    show(RunStatus("waiting until the secondary holds every write, then comparing the "
                   "stamps"))
    compared, differ = compare_stamps(location, text, load)
    with client() as checker:
        stop_subscribers(checker, load, show)
        show(RunStatus("reading what the final primary holds, and the deposed primaries' "
                       "tails"))
        final = read_final_state(checker, load.workload.histories)
        found_tails = tails(location, ACCOUNT)
        tail, stray = split_tails(found_tails, unplanned)
        geo = geo_rules(load.workload.histories, load.oplog.ops, nemesis.failovers, tail,
                        final)
        verdict = check_load(checker, load, show,
                             [relaxed_history(h, geo) for h in load.workload.histories],
                             followed_views(load.subscribers, geo, final.logs),
                             relaxed_oplog(load.oplog, geo))
    geo_violations = [*set_aside, *stray, *differ, *geo.violations]
    verdict.violations = [*geo_violations, *verdict.violations]
    add_nemesis_failure(verdict, nemesis)
    report = make_report(options.seed, options.minutes, schedule, nemesis, load.tally,
                         verdict, ended, restarted, _roles(location),
                         every_kind=options.every_kind)
    report["geo"] = _geo_report(location, nemesis, found_tails, tail, final, geo, compared,
                                geo_violations, POWER_CUT_SITE if power else None)
    return report


def compare_stamps(location: LocalLocation, text: str, load: Load
                   ) -> tuple[dict[str, Any], list[str]]:
    """The two stamps compared after the run (module docstring, step 4): what was compared,
    and the violations (what differed)."""
    placement = _placement(location)
    check: dict[str, Any] = {"at_s": round(tally_time(load.started), 1),
                             "primary": placement.primary, "secondary": placement.secondary}
    if placement.secondary_state != "live":
        check["violations"] = 1
        return check, [f"geo: convergence: the secondary {placement.secondary} is "
                       f"{placement.secondary_state}: never compared"]
    primary_stamp = stamps_of(location)[placement.primary]
    found: list[str] = []
    for _ in range(CONVERGE_TRIES):
        if not until_drained(primary_stamp, time.time(), DRAIN_TIMEOUT_S):
            found = [f"geo: convergence: {placement.secondary} did not hold every write "
                     f"{placement.primary} took within {DRAIN_TIMEOUT_S:.0f}s"]
            break
        primary = read_copy(placement.primary, text, "primary", load.logs())
        secondary = read_copy(placement.secondary, text, "secondary", load.logs())
        found = convergence_violations(primary, secondary)
        check.update(logs=len(primary.logs), records=sum(map(len, primary.logs.values())),
                     entities=len(primary.entities))
        if not found:
            break
    check["violations"] = len(found)
    return check, found


def until_drained(stamp: LocalStamp, since_wall_s: float, timeout_s: float) -> bool:
    """Until the account's last sync time at the primary `stamp` passes `since_wall_s`:
    every write it acknowledged before then is on the secondary. False after `timeout_s`."""
    try:
        drain(stamp, ACCOUNT, since_wall_s, timeout_s)
    except Unavailable:
        return False
    return True


def read_copy(name: str, text: str, read_from: str, logs: list[str]) -> StampCopy:
    """The copy of the account at stamp `name`, read by an SDK client from the connection
    string `text` reading from its `read_from` ("primary" or "secondary", as the location
    names them): every log of `logs` whole, and a scan of every entity."""
    copy = StampCopy(name)
    parsed = connection_string.parse(text)
    with Client([], ACCOUNT, key=parsed.key, location=parsed.location, read_from=read_from,
                timeout_s=SDK_TIMEOUT_S) as client:
        for log in logs:
            try:
                records, problems = read_log(client, log)
            except SdkError as exc:
                copy.errors.append(f"{log}: cannot be read ({type(exc).__name__}: {exc})")
                continue
            copy.errors += problems
            copy.logs[log] = [(seq, value_id(data)) for seq, data in records]
        try:
            copy.entities = {(e.pname, bytes(e.row).hex()): (value_id(bytes(e.value)), e.etag)
                             for e in client.scan()}
        except SdkError as exc:
            copy.errors.append(f"its entities cannot be scanned ({type(exc).__name__}: {exc})")
    return copy


def survey_secondary(text: str, load: Load) -> dict[tuple[str, int], str | None] | None:
    """What the account's secondary holds now of every row of the writers' groups ((group,
    row) -> value id, None: no row), and of every log (its next sequence number), read there
    by an SDK client reading from the secondary; each read recorded in the load's OpLog
    (client "survey": the linearizability check explains them too). None if a read failed.
    Asked between an unplanned failover's SIGKILL and the failover: the secondary takes
    nothing more, so this is what the new primary holds when it takes over."""
    parsed = connection_string.parse(text)
    held: dict[tuple[str, int], str | None] = {}
    oplog = load.oplog
    try:
        with Client([], ACCOUNT, key=parsed.key, location=parsed.location,
                    read_from="secondary", timeout_s=SURVEY_TIMEOUT_S) as client:
            for h in load.workload.histories:
                for log in h.all_logs():
                    invoke = oplog.begin()
                    try:
                        next_seq = client.peek(log)[1]
                    except NotFound:
                        next_seq = 0
                    oplog.done(log_key(log), ("peek",), invoke, next_seq, "survey")
                for row in range(ROWS_PER_WRITER):
                    invoke = oplog.begin()
                    try:
                        value, etag = client.get(h.group, row_key(row))
                        held[(h.group, row)] = value_id(value)
                        result: tuple[str, ...] = ("value", value_id(value), etag)
                    except NotFound:
                        held[(h.group, row)] = None
                        result = ("absent",)
                    oplog.done(entity_key(h.group, row), ("get",), invoke, result, "survey")
    except SdkError:
        return None
    return held


def read_final_state(client: Client, histories: list[WriterHistory]) -> FinalState:
    """Every log and row of the writers at the account's primary (FinalState: one that
    cannot be read is left out)."""
    final = FinalState()
    for h in histories:
        for log in h.all_logs():
            for _ in range(READ_TRIES):
                try:
                    records, problems = read_log(client, log)
                except SdkError:
                    continue
                if not problems:
                    final.logs[log] = records
                break
        for row in range(ROWS_PER_WRITER):
            for _ in range(READ_TRIES):
                try:
                    final.rows[(h.group, row)] = client.get(h.group, row_key(row))[0]
                except NotFound:
                    final.rows[(h.group, row)] = None
                except SdkError:
                    continue
                break
    return final


def _settle_deposed(location: LocalLocation, unplanned: list[Failover],
                    show: Callable[[RunStatus], None]) -> list[str]:
    """After the run: the stamp the last unplanned failover deposed, unless a failover came
    since, holds the account as the secondary and has set its unshipped writes aside (a
    violation if not, within SET_ASIDE_TIMEOUT_S; each unplanned failover fault waited for
    it already); a secondary left unavailable (a fault cut short) is bootstrapped."""
    problems = []
    placement = _placement(location)
    if unplanned and unplanned[-1].epoch == placement.epoch:  # no failover since the last
        name = unplanned[-1].old_primary
        show(RunStatus(f"checking that {name}, deposed, has set its unshipped writes aside"))
        try:
            until_set_aside(location, ACCOUNT, name)
        except RuntimeError as exc:
            problems.append(f"geo: {exc}")
    if _placement(location).secondary_state != "live":
        show(RunStatus("bootstrapping the account's secondary"))
        try:
            bootstrap(location, ACCOUNT)
        except StampError as exc:
            problems.append(f"geo: the secondary could not be bootstrapped after the run "
                            f"({type(exc).__name__}: {exc})")
    return problems


def split_tails(found: list[Tail], unplanned: list[Failover]) -> tuple[TailWrites, list[str]]:
    """The writes the unplanned failovers' deposed primaries set aside when they learnt it
    (a tail line names the placement that deposed its stamp: the failover's new primary, at
    its epoch or a later one), and a violation for each stamp that set other lines aside: a
    tail is what a new primary never saw, and no unplanned failover took those from it (an
    old primary restarted after a planned failover that sets aside what it had shipped
    already, or a write it took after the failover's drain)."""
    mine = []
    stray: dict[str, int] = {}
    for t in found:
        for line in t.lines:
            if any(t.stamp == f.old_primary and int(line["epoch"]) >= f.epoch
                   for f in unplanned):
                mine.append(line)
            else:
                stray[t.stamp] = stray.get(t.stamp, 0) + 1
    return tail_writes(mine), [
        f"geo: {stamp} set {count} lines of the account's writes aside (stamp location "
        f"tail) that no unplanned failover took from it" for stamp, count in stray.items()]


def _placement(location: LocalLocation) -> Any:
    with location.store_client() as store:
        return store.resolve(ACCOUNT)[0]


def _kill_location(location: LocalLocation) -> None:
    """SIGKILL every process of the location by PID (thawed first: none should be frozen)."""
    for _, part in parts(location):
        if part.stamp_file.exists():
            for pid in part.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            part.kill_all()


def _roles(location: LocalLocation) -> dict[str, list[str]]:
    return {name: sorted(part.records) for name, part in parts(location)}


def _geo_report(location: LocalLocation, nemesis: GeoNemesis, found_tails: list[Tail],
                tail: TailWrites, final: FinalState, geo: GeoVerdict,
                compared: dict[str, Any], violations: list[str], power_cut_site: str | None
                ) -> dict[str, Any]:
    placement = _placement(location)
    held = {value_id(data) for records in final.logs.values() for _, data in records}
    return {
        "stamps": {site.name: site.region for site in SITES},
        "power_cut_site": power_cut_site,
        "placement": {"primary": placement.primary, "secondary": placement.secondary,
                      "secondary_state": placement.secondary_state,
                      "epoch": placement.epoch},
        "failovers": [f.to_dict() for f in nemesis.failovers],
        # records_held: of the tails' records, those the final primary holds all the same
        # (shipped before the failover and set aside again, or sent again by a client)
        "tail": {"stamps": {t.stamp: len(t.lines) for t in found_tails},
                 "lines": tail.lines, "records": len(tail.records),
                 "records_held": len(tail.records & held),
                 "entity_values": sum(map(len, tail.rows.values()))},
        "excused": dict(sorted(geo.counts.items())),
        "convergence": compared,
        "violations": violations,
    }

