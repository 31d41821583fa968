"""Shared fixtures. Processes a test starts are killed by PID in the fixture's finalizer."""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from common.config import ExtentNodeSpec, StampConfig, default_config
from tools.local_stamp import LocalStamp


def extent_node_config(count: int, **limits: int) -> StampConfig:
    """`count` extent nodes, one fault domain each up to 3, on free ports."""
    base = default_config()
    return dataclasses.replace(
        base,
        extent_node=dataclasses.replace(base.extent_node, **limits),
        extent_nodes=tuple(ExtentNodeSpec(f"en-{i}", f"fd-{(i - 1) % 3 + 1}", f"ud-{i}", 0)
                           for i in range(1, count + 1)))


@pytest.fixture
def stamp_factory(tmp_path: Path) -> Iterator[Callable[..., LocalStamp]]:
    """Start a local stamp of extent nodes: factory(count=3, **limits) -> LocalStamp."""
    stamps: list[LocalStamp] = []

    def make(count: int = 3, **limits: int) -> LocalStamp:
        config = extent_node_config(count, **limits)
        config_path = None
        if limits:
            config_path = tmp_path / f"stamp-{len(stamps)}.toml"
            config_path.write_text("[extent_node]\n" + "".join(
                f"{key} = {value}\n" for key, value in limits.items()))
        stamp = LocalStamp(tmp_path / f"stamp-{len(stamps)}", config,
                           str(config_path) if config_path else None)
        stamps.append(stamp)
        stamp.up()
        return stamp

    yield make
    for stamp in stamps:
        stamp.kill_all()


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    """Seeded randomness; the seed is printed so a failure can be replayed (STAMP_SEED=...)."""
    seed = int(os.environ.get("STAMP_SEED", random.randrange(1 << 32)))
    print(f"STAMP_SEED={seed} for {request.node.nodeid}")
    return random.Random(seed)
