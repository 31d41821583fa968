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
