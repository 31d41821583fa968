"""A range partition's states and the moves between them, as data (STYLE.md: h11's
transition tables; the partition is partition.py's `RangePartition`).

Contract: every change of a partition's `state` goes through `States._move`, which asserts
the move is in `TRANSITIONS`; nothing outside the partition sets `state` (it is read-only).
Who moves it: `load` (LOADING -> SERVING), `unload` (SERVING -> UNLOADING), a split or merge
on this server (split_merge.py: `quiesce`, SERVING -> SPLITTING or MERGING; `resume`, back to
SERVING when it did not begin), and `stop` (any -> GONE, for good).
"""

from __future__ import annotations

from common.errors import PreconditionFailed

LOADING, SERVING, UNLOADING, GONE = "loading", "serving", "unloading", "gone"
# Split or merge under way (split_merge.py): NotOwner to new operations, queued ones commit.
SPLITTING, MERGING = "splitting", "merging"

TRANSITIONS: dict[str, frozenset[str]] = {
    LOADING: frozenset({SERVING, GONE}),
    SERVING: frozenset({UNLOADING, SPLITTING, MERGING, GONE}),
    UNLOADING: frozenset({GONE}),
    SPLITTING: frozenset({SERVING, GONE}),
    MERGING: frozenset({SERVING, GONE}),
    GONE: frozenset({GONE}),
}


class States:
    """The state of one range partition (`id`) and its moves. `state` has no setter: a move
    outside the table cannot be written, not even by a test."""

    id: int
    _state: str = LOADING

    @property
    def state(self) -> str:
        return self._state

    def _move(self, state: str) -> None:
        assert state in TRANSITIONS[self._state], (
            f"partition {self.id}: {self._state} -> {state}")
        self._state = state

    def quiesce(self, state: str) -> None:
        """Stop admitting for a split (`state` SPLITTING) or merge (MERGING) here: new
        operations get NotOwner, queued ones still commit. PreconditionFailed unless it
        serves (it may have stopped meanwhile: lease lost, fenced)."""
        assert state in (SPLITTING, MERGING), state
        if self.state != SERVING:
            raise PreconditionFailed(f"partition {self.id} stopped serving")
        self._move(state)

    def resume(self) -> bool:
        """Serve again after a split or merge that did not begin; whether it did (False:
        it was not quiesced, or it stopped meanwhile)."""
        if self.state not in (SPLITTING, MERGING):
            return False
        self._move(SERVING)
        return True
