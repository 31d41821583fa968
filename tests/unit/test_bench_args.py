"""`stamp bench` arguments: partition sizes and the tail are checked, and a mistake is one
line from argparse, not a traceback from the middle of a bench."""

from __future__ import annotations

import argparse

import pytest

from tools.cli_checks import megabytes
from tools.cmd_bench import _sizes_mb


def test_sizes_are_ascending_positive_whole_numbers() -> None:
    assert _sizes_mb("10,1000") == (10, 1000)
    assert _sizes_mb(" 5 , 40 ,200") == (5, 40, 200)
    assert _sizes_mb("7") == (7,)
    for bad in ("10,x", "1000,10", "10,10", "0,10", "-5", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            _sizes_mb(bad)


def test_tail_must_be_positive() -> None:
    assert megabytes("4") == 4
    for bad in ("0", "-1", "1.5", "four"):
        with pytest.raises(argparse.ArgumentTypeError):
            megabytes(bad)


def test_availability_roles_and_faults_are_named_from_the_bench_s_lists() -> None:
    from tools.bench.availability_cases import FAULTS, ROLES, cases
    from tools.cmd_bench import _choices, _positive

    roles = _choices("roles", ROLES)
    assert roles("ps, fe,ps") == ("ps", "fe")
    for bad in ("", ",", "ps,leader", "PS"):
        with pytest.raises(argparse.ArgumentTypeError):
            roles(bad)
    # The slow disk is an extent node's fault only.
    assert cases(("ps", "en-primary"), ("kill", "slow-disk")) == [
        ("ps", "kill"), ("en-primary", "kill"), ("en-primary", "slow-disk")]
    assert len(cases(ROLES, FAULTS)) == len(ROLES) * (len(FAULTS) - 1) + 2
    assert _positive("3") == 3
    for bad in ("0", "-2", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            _positive(bad)


def test_a_writer_s_stall_runs_from_its_last_ack_before_the_fault() -> None:
    from tools.bench.availability import Writer

    writer = Writer(0, client=None)  # type: ignore[arg-type]  # only its acks are read
    writer.acks = [1.0, 1.1, 1.2, 4.0, 4.1, 9.0]
    assert writer.stall_since(1.15) == pytest.approx(4.9)  # 4.1 -> 9.0
    assert writer.stall_since(5.0) == pytest.approx(4.9)  # from 4.1, the last before
    assert writer.stall_since(0.0) == pytest.approx(4.9)
    writer.acks = [1.0, 1.1, 1.2, 4.0]
    assert writer.stall_since(1.15) == pytest.approx(2.8)  # 1.2 -> 4.0 straddles the fault
    assert Writer(1, client=None).stall_since(0.0) == 0.0  # type: ignore[arg-type]
