"""The CLI's progress (tools/progress.py) as a user and a script see it: on stderr only,
plain `[LABEL] STATUS (ELAPSED s)` lines without a control code when stderr is not a
terminal, a live line when it is, and stdout (`--json` included) untouched either way."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.errors import NotFound
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

# The smallest stamp with a partition layer: no front ends (nothing here needs the SDK).
CONFIG = "front_ends = []\njob_schedulers = []\n" + "".join(
    f'[[extent_nodes]]\nname = "en-{i}"\nfault_domain = "fd-{i}"\nupgrade_domain = "ud-{i}"\n'
    f'port = 0\n[[stream_managers]]\nname = "sm-{i}"\nport = 0\nraft_port = 0\n'
    f'[[lock_servers]]\nname = "lock-{i}"\nport = 0\nraft_port = 0\n' for i in (1, 2, 3)) + (
    '[[partition_managers]]\nname = "pm-1"\nport = 0\n'
    '[[partition_servers]]\nname = "ps-1"\nport = 0\n'
    '[partition_manager]\nbalance_interval_s = 0\n')
PROCESSES = 11
PLAIN_LINE = re.compile(r"\[[a-z -]+\] .+ \(\d+\.\d s\)")
SPLIT_DELAY_MS = 2500  # longer than progress.WAIT_SHOW_AFTER_S: the split shows its wait


def stamp(data_dir: Path, *args: str, stderr: int | None = subprocess.PIPE,
          ) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir", str(data_dir),
                             *args], stdout=subprocess.PIPE, stderr=stderr, text=True,
                            timeout=120, env={**os.environ, "TERM": "xterm"})
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


def on_a_terminal(data_dir: Path, *args: str) -> tuple[str, str]:
    """Run `stamp ARGS` with stderr on a pseudo-terminal: (stdout, what the terminal got)."""
    controller, terminal = pty.openpty()
    drawn: list[bytes] = []

    def drain() -> None:  # as it comes: a full terminal buffer would block the command
        with contextlib.suppress(OSError):  # EIO: the command closed its end
            while chunk := os.read(controller, 65536):
                drawn.append(chunk)
    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        result = stamp(data_dir, *args, stderr=terminal)
    finally:
        os.close(terminal)
        reader.join(10)
        os.close(controller)
    return result.stdout, b"".join(drawn).decode(errors="replace")


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "stamp.toml").write_text(CONFIG)
    yield tmp_path / "data"
    with contextlib.suppress(NotFound):
        LocalStamp.load(tmp_path / "data").kill_all()


def test_progress_goes_to_stderr_plain_off_a_terminal_live_on_one(data_dir: Path) -> None:
    up = stamp(data_dir, "up", "--config", str(data_dir.parent / "stamp.toml"))
    assert f"started {PROCESSES} processes" in up.stdout and "[up]" not in up.stdout
    lines = up.stderr.splitlines()
    assert lines[0].startswith(f"[up] starting {PROCESSES} processes (")
    assert any("waiting until every partition is served" in line for line in lines)
    assert all(PLAIN_LINE.fullmatch(line) for line in lines), lines
    assert "\x1b" not in up.stderr and "\r" not in up.stderr

    # A split that lasts: one plain line once it has waited a second, the result on stdout.
    stamp(data_dir, "fault", "ps-1", f"ps.split.intent_written=delay:{SPLIT_DELAY_MS}")
    split = stamp(data_dir, "partition", "split", "1", "--key", "acct/m")
    assert split.stdout.startswith("split partition 1 into 2 ")
    assert split.stderr.splitlines() == [
        line for line in split.stderr.splitlines()
        if PLAIN_LINE.fullmatch(line) and "the partition manager is splitting partition 1"
        in line]
    assert len(split.stderr.splitlines()) == 1, split.stderr

    # On a terminal the same wait is a live line, and stdout is still only the result.
    out, drawn = on_a_terminal(data_dir, "partition", "split", "2", "--key", "acct/f")
    assert out.startswith("split partition 2 into 4 ") and "\x1b" not in out
    assert "partition split: the partition manager is splitting partition 2" in drawn
    assert "\x1b[" in drawn and "[partition split]" not in drawn
    stamp(data_dir, "fault", "ps-1", "")

    # --json stdout parses whatever stderr shows.
    history = json.loads(stamp(data_dir, "partition", "history", "--json").stdout)
    assert [e["op"] for e in history["entries"]] == ["split", "split"]
    balance = json.loads(stamp(data_dir, "partition", "balance", "--json").stdout)
    assert balance["dry_run"] is False

    out, drawn = on_a_terminal(data_dir, "down")
    assert out == f"stopped {PROCESSES} processes\n"
