"""`stamp chaos` as the probe tests run it: the CLI in a process of its own, its JSON report
parsed (tests/probe/test_chaos.py, test_chaos_geo.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_chaos(cwd: Path, *args: str, timeout_s: float, env: dict[str, str] | None = None
              ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """`stamp chaos ARGS --json` run in `cwd` (`env`: the whole environment, if given):
    the finished process and its report. The run's stderr (the schedule, each fault as it
    went) is printed, so a failing test shows it."""
    result = subprocess.run(
        [str(Path(sys.executable).parent / "stamp"), "chaos", *args, "--json"],
        capture_output=True, text=True, timeout=timeout_s, cwd=cwd, env=env)
    print(result.stderr[-4000:])
    assert result.stdout, result.stderr[-4000:]
    return result, json.loads(result.stdout)
