"""The report of a `stamp chaos` run, as one JSON-ready dict:

    seed, minutes, seconds (the workload's length), stamp (role -> processes),
    ops (kind -> acknowledged), op_errors (kind -> failed or in doubt),
    faults (kind -> applied and fired), faults_skipped, faults_failed, kinds_not_dealt
    (kinds of the schedule never applied: a violation with --every-kind), crashes (processes
    that died without being asked: each is also a violation), schedule (every planned
    fault), fault_log (what was applied, when, for how long, and how it went), checked
    (records, entities, deliveries, linearizable keys and ops checked), undecided (keys
    whose linearizability search ran out of steps), violations (must be empty),
    availability (successful ops per second: mean, worst, seconds with none; outside power
    cuts: the share of seconds with one and the longest gap; per fault kind), timeline
    ([{t, ok, failed}] per second), power_cuts.

`stamp chaos --geo` (tools/chaos/geo.py) adds `geo`: the location's stamps (name -> region),
power_cut_site, the account's final placement, failovers (each planned and unplanned one:
when, from and to which stamp, at which epoch, and for an unplanned one the last sync time
reported before it, and how many rows were read at the new primary as it took over), tail
(the lines each stamp set aside, and what the deposed primaries did: records, how many of
those the final primary holds all the same, entity values), excused (what the geo rules
let go, by kind: tools/chaos/geo_check.py), convergence (the comparison of the two stamps
after the run: when, which, how many records and entities, how many differences) and
violations (the geo rules' own; they are in `violations` too). Its faults are in faults,
schedule and fault_log like any other.

`print_report` draws it for a terminal (rich tables).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from tools.chaos.check import Verdict
from tools.chaos.nemesis import Nemesis
from tools.chaos.schedule import Fault
from tools.chaos.workload import Tally

VIOLATIONS_SHOWN = 50
INSTANT_S = 0.5  # a fault that lasted less is instant (split, flip) ...
AFTER_INSTANT_S = 5  # ... and judged by the seconds after it


def make_report(seed: int, minutes: float, schedule: list[Fault], nemesis: Nemesis,
                tally: Tally, verdict: Verdict, ended_s: float, restarted: list[str],
                roles: dict[str, list[str]], every_kind: bool = False) -> dict[str, Any]:
    """The report (module docstring); `every_kind`: a kind of the schedule never applied
    is a violation."""
    seconds = int(ended_s)
    timeline = tally.timeline(seconds)
    ok = [t["ok"] for t in timeline]
    by_outcome: dict[str, Counter[str]] = {"done": Counter(), "skipped": Counter(),
                                           "failed": Counter()}
    for record in nemesis.records:
        by_outcome.setdefault(record.outcome, Counter())[record.kind] += 1
    not_dealt = sorted({f.kind for f in schedule} - set(by_outcome["done"]))
    missing = [f"fault kinds never applied: {not_dealt}"] if every_kind and not_dealt else []
    return {
        "seed": seed, "minutes": minutes, "seconds": round(ended_s, 1),
        "stamp": roles,
        "ops": dict(sorted(tally.ok.items())), "op_errors": dict(sorted(tally.failed.items())),
        "ops_total": sum(tally.ok.values()),
        "faults": dict(sorted(by_outcome["done"].items())),
        "faults_skipped": dict(sorted(by_outcome["skipped"].items())),
        "faults_failed": dict(sorted(by_outcome["failed"].items())),
        "crashes": [{"at_s": at, "process": name} for at, name in nemesis.crashes],
        "restarted_at_end": restarted,
        "checked": verdict.checked,
        "kinds_not_dealt": not_dealt,
        "violations": [*verdict.violations, *crash_violations(nemesis.crashes, restarted),
                       *missing],
        "undecided": verdict.undecided,
        "availability": {
            "ok_per_s_mean": round(sum(ok) / max(1, len(ok)), 1),
            "ok_per_s_min": min(ok, default=0),
            "seconds_without_success": sum(1 for n in ok if n == 0),
            **outside_power_cuts(ok, [r.to_dict() for r in nemesis.records]),
            "by_fault": availability_by_fault(ok, [r.to_dict() for r in nemesis.records]),
        },
        "schedule": [f.to_dict() for f in schedule],
        "fault_log": [r.to_dict() for r in nemesis.records],
        "timeline": timeline,
    }


def crash_violations(crashes: list[tuple[float, str]], restarted: list[str]) -> list[str]:
    """A process that died without being asked fails the run: the stamp promises to survive
    faults, not to fall over under them (found between faults by the nemesis, or down at
    the end when every fault had been undone)."""
    return ([f"{name} died without being asked (found at t={at:.1f}s)" for at, name in crashes]
            + [f"{name} died without being asked (found down at the end)"
               for name in restarted])


def outside_power_cuts(ok: list[int], fault_log: list[dict[str, Any]]) -> dict[str, Any]:
    """Availability as issue 29 judges it, leaving out the seconds of power cuts (from the
    cut to the restarted stamp, when every process is down by design): the seconds left,
    those with no successful operation, their share with one ("available_share", target
    >= 0.99), and the longest run of seconds with none ("longest_gap_s", target <= 10). A
    power cut ends a run."""
    cut: set[int] = set()
    for record in fault_log:
        if record["kind"] == "power_cut" and record["outcome"] == "done":
            cut.update(range(int(record["start_s"]), int(record["end_s"]) + 1))
    counted = [s for s in range(len(ok)) if s not in cut]
    without = sum(1 for s in counted if ok[s] == 0)
    longest = run = 0
    for s in range(len(ok)):
        run = run + 1 if s not in cut and ok[s] == 0 else 0
        longest = max(longest, run)
    return {"seconds_outside_power_cuts": len(counted),
            "seconds_without_success_outside_power_cuts": without,
            "available_share": round(1 - without / max(1, len(counted)), 4),
            "longest_gap_s": longest}


def availability_by_fault(ok: list[int], fault_log: list[dict[str, Any]]
                          ) -> dict[str, dict[str, float]]:
    """Successful ops per second while each kind of fault lasted (an instant one: the
    AFTER_INSTANT_S seconds after it), against the seconds with no fault ("none"):
    {kind: {"ok_per_s": mean, "seconds": how many}}."""
    seconds_of: dict[str, set[int]] = {}
    for record in fault_log:
        if record["outcome"] != "done":
            continue
        start = int(record["start_s"])
        instant = record["end_s"] - record["start_s"] < INSTANT_S
        end = start + AFTER_INSTANT_S if instant else int(record["end_s"]) + 1
        seconds_of.setdefault(record["kind"], set()).update(range(start, min(end, len(ok))))
    faulty = set().union(*seconds_of.values()) if seconds_of else set()
    seconds_of["none"] = set(range(len(ok))) - faulty
    return {kind: {"ok_per_s": round(sum(ok[s] for s in secs) / max(1, len(secs)), 1),
                   "seconds": len(secs)}
            for kind, secs in sorted(seconds_of.items())}


def print_report(report: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    ops = Table(title="operations")
    for column in ("KIND", "OK", "FAILED/IN DOUBT"):
        ops.add_column(column, justify="right" if column != "KIND" else "left")
    for kind in sorted(set(report["ops"]) | set(report["op_errors"])):
        ops.add_row(kind, f"{report['ops'].get(kind, 0):,}",
                    f"{report['op_errors'].get(kind, 0):,}")
    console.print(ops)
    faults = Table(title="faults (availability: successful ops/s while they lasted)")
    for column in ("KIND", "DONE", "SKIPPED", "FAILED", "OPS/S", "SECONDS"):
        faults.add_column(column, justify="right" if column != "KIND" else "left")
    by_fault = report["availability"]["by_fault"]
    kinds = set(report["faults"]) | set(report["faults_skipped"]) | set(report["faults_failed"])
    for kind in [*sorted(kinds), "none"]:
        during = by_fault.get(kind, {"ok_per_s": "-", "seconds": 0})
        faults.add_row(kind, str(report["faults"].get(kind, "")),
                       str(report["faults_skipped"].get(kind, "")),
                       str(report["faults_failed"].get(kind, "")),
                       str(during["ok_per_s"]), str(during["seconds"]))
    console.print(faults)
    a = report["availability"]
    console.print(f"checked: {report['checked']}")
    if "curp" in report:  # stamp chaos --curp (issue 32)
        answers = ", ".join(f"{k} {int(v):,}" for k, v in sorted(report["curp"].items()))
        console.print(f"CURP's fast path, writes by answer: {answers or 'none counted'}")
    console.print(f"availability: {a['ok_per_s_mean']} ops/s on average, "
                  f"{a['seconds_without_success']} of {int(report['seconds'])} s without a "
                  f"successful op; outside power cuts {a['available_share']:.2%} of "
                  f"{a['seconds_outside_power_cuts']} s had one, the longest gap "
                  f"{a['longest_gap_s']} s")
    if report.get("undecided"):
        console.print(f"linearizability undecided (search budget spent): "
                      f"{report['undecided'][:5]}", markup=False)
    if report["crashes"]:
        console.print(f"died without being asked: {report['crashes']}")
    if report.get("geo"):
        print_geo(report["geo"], console)
    violations = report["violations"]
    style = "bold red" if violations else "bold green"
    console.print(f"[{style}]violations: {len(violations)}[/{style}] "
                  f"(seed {report['seed']}, {report['minutes']:g} min)")
    for line in violations[:VIOLATIONS_SHOWN]:
        console.print(f"  {line}", markup=False)
    if len(violations) > VIOLATIONS_SHOWN:
        console.print(f"  ... and {len(violations) - VIOLATIONS_SHOWN} more (--json has all)")


def print_geo(geo: dict[str, Any], console: Any) -> None:
    """The `geo` part of a report (module docstring)."""
    from rich.table import Table

    failovers = Table(title="failovers")
    for column in ("KIND", "AT", "FROM", "TO", "EPOCH", "LAST SYNC", "DETAIL"):
        failovers.add_column(column)
    for f in geo["failovers"]:
        synced = ("-" if f["kind"] == "planned" else "never reported"
                  if f["synced_s"] is None else f"t={f['synced_s']:.1f}s")
        failovers.add_row(f["kind"], f"t={f['at_s']:.1f}s", f["old_primary"],
                          f["new_primary"], str(f["epoch"]), synced, f["detail"])
    console.print(failovers)
    p = geo["placement"]
    console.print(f"account at the end: primary {p['primary']}, secondary {p['secondary']} "
                  f"({p['secondary_state']}), epoch {p['epoch']}")
    tail = geo["tail"]
    lines = ", ".join(f"{stamp} {count} lines" for stamp, count in tail["stamps"].items())
    console.print(f"tails: {lines or 'none'}; set aside by the deposed primaries: "
                  f"{tail['records']} log records ({tail['records_held']} of them at the "
                  f"final primary all the same), {tail['entity_values']} entity values in "
                  f"{tail['lines']} lines; excused by the geo rules: {geo['excused'] or 'none'}")
    check = geo["convergence"]
    console.print(f"stamps compared at the end (t={check['at_s']}s, {check['primary']} and "
                  f"{check['secondary']}): {check.get('records', 0)} records, "
                  f"{check.get('entities', 0)} entities, {check['violations']} differences")
    console.print(f"geo violations: {len(geo['violations'])}")
