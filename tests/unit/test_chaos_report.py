"""The verdict of a `stamp chaos` run beyond the histories: a process that died without being
asked fails the run (tools/chaos/report.py), and a fault point armed for a fault counts as
that fault only when it fired (tools/chaos/nemesis.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tools.chaos import nemesis as nemesis_module
from tools.chaos.check import Verdict
from tools.chaos.nemesis import FaultRecord, Nemesis
from tools.chaos.report import make_report
from tools.chaos.schedule import Fault
from tools.chaos.workload import Tally


def test_a_process_that_died_unasked_fails_the_run() -> None:
    nemesis = SimpleNamespace(records=[], crashes=[(12.5, "ps-2")])
    report = make_report(1, 1.0, [], nemesis, Tally(), Verdict(), 3.0, [], {})  # type: ignore[arg-type]
    assert any("ps-2" in v and "died" in v for v in report["violations"]), report["violations"]


class _Stamp:
    """The little of LocalStamp that arming a fault point uses; the node never dies."""

    def address(self, name: str) -> str:
        return f"{name}:1"

    def alive(self, name: str) -> bool:
        return True


@pytest.mark.parametrize("fired", [0, 3])
def test_a_fault_point_counts_only_when_it_fired(monkeypatch: pytest.MonkeyPatch,
                                                 fired: int) -> None:
    armed: dict[str, str] = {}

    def arm(address: str, spec: str) -> None:
        armed["journal.before_fsync"] = f"delay:0.1,after=0,times=None,hits={fired}," \
                                        f"fired={fired}"

    def disarm(address: str, name: str | None = None) -> None:
        armed.clear()

    monkeypatch.setattr(nemesis_module.rpc, "arm_remote", arm)
    monkeypatch.setattr(nemesis_module.rpc, "disarm_remote", disarm)
    monkeypatch.setattr(nemesis_module.rpc, "armed_remote", lambda address: dict(armed),
                        raising=False)
    monkeypatch.setattr(nemesis_module, "FIRE_WAIT_S", 0.2, raising=False)
    monkeypatch.setattr(nemesis_module, "commit_log_nodes", lambda stamp: ["en-1"],
                        raising=False)
    nemesis = Nemesis(_Stamp(), [], "acct", 0.0)  # type: ignore[arg-type]
    fault = Fault(1.0, "slow_disk", "en-1", 0.0, 7, "journal.before_fsync=delay:100")
    nemesis._apply(fault)
    record: Any = nemesis.records[-1]
    assert record.outcome == ("done" if fired else "skipped"), record


def test_with_every_kind_a_kind_never_applied_is_a_violation() -> None:
    schedule = [Fault(3.0, "kill", "sm-1", 1.0, 1), Fault(9.0, "split", "log-1", 0.0, 2)]
    records = [FaultRecord("kill", "sm-1", 3.0, 3.1, 4.2, "done"),
               FaultRecord("split", "log-1", 9.0, 9.0, 9.1, "skipped")]
    nemesis = SimpleNamespace(records=records, crashes=[])
    for every_kind in (False, True):
        report = make_report(1, 1.0, schedule, nemesis, Tally(), Verdict(), 3.0,  # type: ignore[arg-type]
                             [], {}, every_kind=every_kind)
        assert report["kinds_not_dealt"] == ["split"]
        assert bool(report["violations"]) is every_kind, report["violations"]


def test_with_every_kind_the_run_goes_on_until_every_kind_was_applied() -> None:
    from tools.chaos.run import EVERY_KIND_EXTRA_S, _over

    schedule = [Fault(3.0, "kill", "sm-1", 1.0, 1), Fault(9.0, "split", "log-1", 0.0, 2)]
    nemesis = SimpleNamespace(records=[FaultRecord("kill", "sm-1", 3.0, 3.1, 4.2, "done")],
                              finished=False)
    assert not _over(59.0, 60.0, True, nemesis, schedule)  # type: ignore[arg-type]
    assert _over(61.0, 60.0, False, nemesis, schedule)  # type: ignore[arg-type]
    assert not _over(61.0, 60.0, True, nemesis, schedule)  # type: ignore[arg-type]
    assert _over(60.0 + EVERY_KIND_EXTRA_S, 60.0, True, nemesis, schedule)  # type: ignore[arg-type]
    nemesis.records.append(FaultRecord("split", "log-1", 9.0, 62.0, 62.5, "done"))
    assert _over(63.0, 60.0, True, nemesis, schedule)  # type: ignore[arg-type]
