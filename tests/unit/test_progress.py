"""tools/progress.py: plain lines and no control code when stderr is not a terminal, a
transient live line when it is, nothing before `show_after_s`, and `--json` stdout left
alone by a command that shows progress (`stamp bench` through tools/cli.main)."""

from __future__ import annotations

import argparse
import io
import json
from typing import Any

import pytest

from tests.support.waiting import wait_until
from tools import cmd_bench, progress
from tools.progress import SILENT, Progress


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    """A file that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def a_real_terminal_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")


def test_not_a_terminal_gets_one_plain_line_per_step_and_no_control_code() -> None:
    out, clock = io.StringIO(), FakeClock()
    with Progress("up", file=out, clock=clock) as shown:
        shown.phase("starting 3 processes", total=3)
        clock.now += 0.5
        shown.advance(text="en-1 ready")  # a count alone: no line
        shown.advance(text="en-2 ready")
        clock.now += 1.0
        shown.status("waiting for en-3")
        shown.phase("waiting for a leader")
        shown("a bench's message")  # a Progress is the benches' progress(message)
    assert out.getvalue().splitlines() == [
        "[up] starting 3 processes (0.0 s)",
        "[up] 2/3 waiting for en-3 (1.5 s)",
        "[up] waiting for a leader (1.5 s)",
        "[up] a bench's message (1.5 s)",
    ]
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()


def test_plain_lines_count_without_a_total() -> None:
    out = io.StringIO()
    with Progress("scan", file=out, clock=FakeClock()) as shown:
        shown.advance(1234)
        shown.status("rows printed")
    assert out.getvalue() == "[scan] 1,234 rows printed (0.0 s)\n"


def test_plain_false_prints_nothing_off_a_terminal() -> None:
    out = io.StringIO()
    with Progress("scan", file=out, plain=False) as shown:
        shown.phase("rows", total=10)
        shown.advance(5)
    assert out.getvalue() == ""


def test_a_terminal_gets_a_live_line_that_is_gone_at_the_end() -> None:
    out, clock = Terminal(), FakeClock()
    with Progress("up", file=out, clock=clock) as shown:
        shown.phase("starting 3 processes", total=3)
        shown.advance(2, text="en-2 ready")
        shown._live.refresh()  # what the refresh thread draws REFRESHES_PER_S times a second
        drawn = out.getvalue()
        clock.now += 75
        shown.phase("waiting for a leader")  # no total any more: a spinner again
        shown._live.refresh()
        assert [t.total for t in shown._live.tasks] == [None]
    assert "\x1b[" in drawn  # control codes: a terminal
    assert "up: en-2 ready" in drawn and "2/3" in drawn and "0:00:00" in drawn
    # The elapsed time counts from the command's start, not from the step's.
    assert "0:01:15" in out.getvalue() and "up: waiting for a leader" in out.getvalue()
    # Transient: the last thing written erases the line, so the result stands alone.
    assert out.getvalue().endswith("\x1b[2K")


def test_dumb_terminal_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "dumb")
    out = Terminal()
    with Progress("up", file=out, clock=FakeClock()) as shown:
        shown.status("starting")
    assert out.getvalue() == "[up] starting (0.0 s)\n"


def test_nothing_is_shown_before_show_after_s() -> None:
    out = io.StringIO()
    with Progress("split", file=out, show_after_s=60) as shown:
        shown.status("the partition manager is splitting partition 1")
    assert out.getvalue() == ""


def test_after_show_after_s_the_current_step_then_every_change() -> None:
    out, clock = io.StringIO(), FakeClock()
    shown = Progress("split", file=out, show_after_s=0.05, clock=clock)
    shown.status("the partition manager is splitting partition 1")
    with shown:
        clock.now += 2.0
        wait_until(lambda: out.getvalue() != "", 5.0, "the current step to be shown")
        shown.status("still")
    assert out.getvalue().splitlines() == [
        "[split] the partition manager is splitting partition 1 (2.0 s)",
        "[split] still (2.0 s)"]


def test_silent_takes_everything() -> None:
    with SILENT as shown:
        shown.phase("x", total=3)
        shown.advance()
        shown("y")
    assert SILENT.done == 0


def test_beside_data_is_silent_when_stdout_is_a_terminal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdout", Terminal())
    assert progress.beside_data("scan", "rows") is SILENT
    monkeypatch.setattr("sys.stdout", io.StringIO())
    shown = progress.beside_data("scan", "rows")
    assert shown is not SILENT and not shown.plain


def test_bench_json_on_stdout_parses_while_its_progress_goes_to_stderr(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI end to end (tools/cli.main): a bench's steps on stderr as plain lines, its
    JSON alone on stdout."""
    from tools import cli

    def fake(args: argparse.Namespace, shown: Progress) -> list[dict[str, Any]]:
        shown("starting a stamp")
        shown.phase("starting 2 processes", total=2)
        shown.advance(2)
        shown("measuring")
        return [{"params": {"clients": 1}, "metrics": {"records_per_s": 12.5}}]
    monkeypatch.setitem(cmd_bench.BENCHES, "fake", ("a bench for this test", fake))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "fake", "--json"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 0
    assert json.loads(out) == {"bench": "fake", "results": [
        {"params": {"clients": 1}, "metrics": {"records_per_s": 12.5}}]}
    assert [line.rsplit(" (", 1)[0] for line in err.splitlines()] == [
        "[bench fake] starting a stamp", "[bench fake] starting 2 processes",
        "[bench fake] 2/2 measuring"]
    assert "\x1b" not in err

    with pytest.raises(SystemExit):
        cli.main(["bench", "fake"])
    out, _ = capsys.readouterr()
    # The table (tools/tables.py): a header, a rule, one row.
    assert out.splitlines()[0].split() == ["clients", "records_per_s"]
    assert out.splitlines()[2].split() == ["1", "12.50"]
