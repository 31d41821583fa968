"""`stamp chaos --curp` (issue 32): chaos's own stamp with CURP's fast path on at the owners
and the front ends; refused, in one line, with a stamp of the caller's or two stamps."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from common.config import load_config
from tools.chaos.run import CHAOS_CONFIG, CURP_CONFIG


def test_the_curp_config_turns_the_fast_path_on_at_both_ends(tmp_path: Path) -> None:
    path = tmp_path / "chaos.toml"
    path.write_text(CHAOS_CONFIG + CURP_CONFIG)
    config = load_config(path)
    assert config.partition.curp and config.front_end.curp
    path.write_text(CHAOS_CONFIG)
    plain = load_config(path)
    assert not plain.partition.curp and not plain.front_end.curp


@pytest.mark.parametrize("other", [["--geo"], ["--config", "x.toml"]])
def test_curp_with_another_stamp_is_refused_in_one_line(other: list[str],
                                                        tmp_path: Path) -> None:
    (tmp_path / "x.toml").write_text("")
    result = subprocess.run([str(Path(sys.executable).parent / "stamp"), "chaos",
                             "--minutes", "1", "--curp", *other],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode != 0
    assert result.stderr.strip().endswith("nor --geo"), result.stderr
    assert "Traceback" not in result.stderr
