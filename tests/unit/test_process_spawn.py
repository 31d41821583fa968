"""common/process.py `spawn`: the environment a server starts with."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from common import process

SHOW = [sys.executable, "-c", "import os; print(repr(os.environ.get('GRPC_EXPERIMENTS')))"]


def spawned_sees(tmp_path: Path, env: dict[str, str] | None = None) -> str:
    popen = process.spawn(SHOW, tmp_path, env)
    assert popen.wait(timeout=30) == 0
    return (tmp_path / process.LOG_FILE).read_text().strip()


def test_a_server_runs_grpc_endpoints_on_the_classic_io_manager(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRPC_EXPERIMENTS", raising=False)
    assert spawned_sees(tmp_path) == repr(process.SERVER_GRPC_EXPERIMENTS)


def test_grpc_experiments_set_by_the_caller_win(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRPC_EXPERIMENTS", "")
    assert spawned_sees(tmp_path / "inherited") == repr("")
    assert spawned_sees(tmp_path / "given", {"GRPC_EXPERIMENTS": "x"}) == repr("x")
