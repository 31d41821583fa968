"""A range partition's states as a transition table (partition.py `TRANSITIONS`): the moves
split and merge make through `quiesce` / `resume`, unload and stop, and every move the table
does not hold refused — on an in-memory partition."""

from __future__ import annotations

import asyncio

import pytest

from common.config import PartitionLimits
from common.errors import PreconditionFailed
from partition_layer import partition_states as pm
from tests.support.partitions import serving_partition


def test_the_table_names_every_state_and_gone_is_final() -> None:
    states = {pm.LOADING, pm.SERVING, pm.UNLOADING, pm.SPLITTING, pm.MERGING, pm.GONE}
    assert set(pm.TRANSITIONS) == states
    assert all(targets <= states and pm.GONE in targets for targets in pm.TRANSITIONS.values())
    assert pm.TRANSITIONS[pm.GONE] == {pm.GONE}


@pytest.mark.parametrize("state", [pm.SPLITTING, pm.MERGING])
def test_quiesce_and_resume(state: str) -> None:
    async def scenario() -> None:
        p = serving_partition(PartitionLimits())
        p.quiesce(state)
        assert p.state == state
        with pytest.raises(PreconditionFailed):
            p.quiesce(state)  # only a serving partition stops admitting
        assert p.resume() and p.state == pm.SERVING
        assert not p.resume()  # nothing to resume
        p.quiesce(state)
        await p.stop("its split committed")
        assert not p.resume() and p.state == pm.GONE  # gone for good
        with pytest.raises(PreconditionFailed):
            p.quiesce(state)
    asyncio.run(scenario())


def test_moves_outside_the_table_are_refused() -> None:
    async def scenario() -> None:
        p = serving_partition(PartitionLimits())
        await p.unload()
        assert p.state == pm.GONE
        for state in (pm.SERVING, pm.LOADING, pm.UNLOADING, pm.SPLITTING):
            with pytest.raises(AssertionError):
                p._move(state)
    asyncio.run(scenario())


def test_nothing_outside_the_table_can_set_the_state() -> None:
    """Seen failing before: `state` was a plain attribute anyone could set."""
    async def scenario() -> None:
        p = serving_partition(PartitionLimits())
        with pytest.raises(AttributeError):
            p.state = pm.LOADING  # type: ignore[misc]
        assert p.state == pm.SERVING
        await p.stop("the test ends")
    asyncio.run(scenario())
