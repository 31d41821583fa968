"""The range partition's shape (issue 15): the committer and the checkpointer reach their
partition only through their sites (CommitSite, CheckpointSite), so neither imports the
partition nor the other, and each stays a small module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LAYER = Path(__file__).resolve().parents[2] / "partition_layer"
# The committer's tracing hooks (commit_spans.py holds their spans) took it past 400.
MODULE_LINES_MAX = 420


def imported_modules(name: str) -> set[str]:
    """Every partition_layer module `name` imports, at any depth of its code."""
    tree = ast.parse((LAYER / f"{name}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "partition_layer":
                found |= {alias.name for alias in node.names}
            elif node.module.startswith("partition_layer."):
                found.add(node.module.split(".", 1)[1])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".", 1)[1] for a in node.names
                      if a.name.startswith("partition_layer.")}
    return found


@pytest.mark.parametrize("name, forbidden", [
    ("committer", {"partition", "checkpoint", "server"}),
    ("checkpoint", {"partition", "committer", "server"}),
])
def test_committer_and_checkpointer_import_neither_the_partition_nor_each_other(
        name: str, forbidden: set[str]) -> None:
    assert imported_modules(name) & forbidden == set()


@pytest.mark.parametrize("name", ["partition", "committer", "checkpoint", "server",
                                  "partition_streams"])
def test_the_partition_modules_stay_small(name: str) -> None:
    lines = len((LAYER / f"{name}.py").read_text().splitlines())
    assert lines <= MODULE_LINES_MAX, f"{name}.py has {lines} lines"


@pytest.mark.parametrize("name", ["split_merge", "extent_release"])
def test_the_servers_helpers_do_not_import_it_back(name: str) -> None:
    """Split and merge reach their server through split_merge.PartitionHost, the release of
    extents through what it is passed (issue 29); both imported server.py, which imports
    them (seen failing before)."""
    assert "server" not in imported_modules(name)


@pytest.mark.parametrize("name", ["manager_ops", "balancer"])
def test_the_managers_parts_read_and_write_the_map_through_the_map_store(name: str) -> None:
    """They take map_store.LeaderMap (issue 29), not the manager's map methods and lock."""
    source = (LAYER / f"{name}.py").read_text()
    for through_the_manager in ("current_map(", "write_map(", "map_lock"):
        assert through_the_manager not in source, through_the_manager
