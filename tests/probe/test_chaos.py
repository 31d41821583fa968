"""`stamp chaos` as CI runs it (issue 19): 45 s (RUN_MINUTES), a fixed seed, `--every-kind`,
`--json`, in a process of its own. It must find no violation (linearizability of every
write and read included) and exit 0, with every kind of fault applied and fired
(--every-kind makes a kind never applied a violation, and goes on past the run until all
were), none failed to apply, no process dead unasked, the workload making progress through
them, and the schedule in the report the one the seed makes (the same seed replays the same
schedule)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.chaos import run_chaos
from tools.chaos.schedule import KINDS, Fault, make_schedule

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

# Any seed's minute deals every kind (tools/chaos/schedule.py, the first deck fits the run);
# this one deals split before merge and the power cut (which seals extents everywhere) before
# the flip of a sealed replica, so that no fault of its first deck finds nothing to do.
SEED = 4473
# 45 s: the seed's first deck, fitted into it, still deals every kind (a minute, as the
# issue's CI run had it, cost the suite 20 s more and found nothing more).
RUN_MINUTES = 0.75
RUN_TIMEOUT_S = 360  # --every-kind may go on 2 minutes past the run


def test_a_chaos_run_with_a_fixed_seed_finds_no_violation(tmp_path: Path) -> None:
    plot = tmp_path / "chaos.png"
    result, report = run_chaos(tmp_path, "--minutes", str(RUN_MINUTES), "--seed", str(SEED),
                               "--every-kind", "--plot", str(plot), timeout_s=RUN_TIMEOUT_S)
    assert report["violations"] == [], report["violations"][:20]
    assert result.returncode == 0, result.stderr[-2000:]

    kinds = set(KINDS) - (set() if report["power_cuts"] is True else {"power_cut"})
    assert set(report["faults"]) == kinds, report["fault_log"]  # every kind, and it fired
    assert report["kinds_not_dealt"] == [], report["fault_log"]
    assert report["faults_failed"] == {}, report["fault_log"]
    assert report["crashes"] == [] and report["restarted_at_end"] == []
    assert report["ops_total"] > 1000
    assert {"append", "put", "batch", "scan", "subscribe", "read", "get"} <= set(report["ops"])
    assert report["checked"]["records"] > 1000 and report["checked"]["followed"] > 0
    assert report["checked"]["linearizable_ops"] > 1000 and report["undecided"] == []
    assert plot.stat().st_size > 10_000  # a PNG was drawn

    logs = [f"log-{w}" if i == 0 else f"log-{w}-{i}" for w in range(8) for i in range(2)]
    replayed = make_schedule(SEED, RUN_MINUTES * 60, report["stamp"], logs,
                             power_cuts=report["power_cuts"] is True)
    assert [Fault(**f) for f in report["schedule"]] == replayed


def test_a_broken_build_makes_the_chaos_run_fail(tmp_path: Path) -> None:
    """Prove the checker can fail (issue 19): every partition server is built broken — its
    51st log append is answered with a sequence number and nothing is written
    (ps.append.bug_drop_acknowledged). The run must report the lost acknowledged append as
    a violation and exit 1. (A changed value could be overwritten before the check; a
    dropped append cannot hide: its sequence number is given again or missing.) The
    linearizability checker finds it too."""
    result, report = run_chaos(
        tmp_path, "--minutes", "0.1", "--seed", str(SEED), "--power-cuts", "off",
        timeout_s=RUN_TIMEOUT_S,
        env={**os.environ,
             "STAMP_FAULTS": "ps.append.bug_drop_acknowledged=bug,after=50,times=1"})
    assert result.returncode == 1, result.stderr[-2000:]
    assert report["violations"], "the checker missed an acknowledged write the stamp broke"
    assert any("lost" in v for v in report["violations"]), report["violations"]
    # and the history of writes and reads is not linearizable: the append's answer was a
    # sequence number its records never held
    assert any("not linearizable" in v for v in report["violations"]), report["violations"]
