"""No file under tests/ imports from a test_*.py module: what test modules share lives in
tests/support/ (tests/support/__init__.py says why). Parsed with ast, nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _is_test_module(dotted: str) -> bool:
    return dotted.rpartition(".")[2].startswith("test_")


def imports_of_test_modules(source: str) -> list[tuple[int, str]]:
    """(line, module) of each import, anywhere in `source`, that names a test_*.py module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if _is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            if node.module and _is_test_module(node.module):
                found.append((node.lineno, node.module))
            else:  # `from tests.unit import test_x`, `from . import test_x`
                found += [(node.lineno, f"{node.module or '.'}.{a.name}") for a in node.names
                          if a.name.startswith("test_")]
    return found


def test_the_check_sees_each_form_of_import() -> None:
    source = "\n".join([
        "from tests.probe.test_stream_manager import client_for",
        "import tests.unit.test_pl_runs",
        "from tests.unit import test_store",
        "from .test_sm_state import fresh",
        "def f():\n    from tests.unit.test_pl_committer import serving_partition",
        "from tests.support.waiting import wait_for",
        "from tests.front_end_raw import RawFrontEnd",
        "import pytest",
    ])
    assert [line for line, _ in imports_of_test_modules(source)] == [1, 2, 3, 4, 6]


def test_no_file_under_tests_imports_from_a_test_module() -> None:
    found = [f"{path.relative_to(TESTS.parent)}:{line}: imports {module}"
             for path in sorted(TESTS.rglob("*.py"))
             for line, module in imports_of_test_modules(path.read_text())]
    assert not found, ("import shared helpers from tests/support/ (move them there), not from "
                       "another test module:\n" + "\n".join(found))
