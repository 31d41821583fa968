"""One stream manager replica: the pure `StreamManagerState` behind a durable pysyncobj replica
(common/raft.py: a command is acknowledged only once its entry is durable on a majority).

Contract:
- Commands are applied on pysyncobj's tick thread, in log order, under `_mutex`; other
  threads read the state only through `read`.
- `propose(command)` may be awaited from an asyncio loop; it resolves to the command's result
  or raises the StampError the state machine refused it with (deterministic: every replica
  refuses it the same way), or Unavailable/NotLeader when Raft could not commit it.
- A command that raises anything but a StampError is a bug in the state machine: the replica
  stops at once rather than diverge from its peers.
- `confirm_leadership()` returns only once a no-op proposed after the call began is applied
  here, so a `read` after it sees every change committed before the call began (a read
  index, Raft §6.4). A leader that has been deposed (partitioned, frozen) cannot commit it and
  raises NotLeader/Unavailable instead of answering from state that may be stale. Concurrent
  callers share one no-op.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pysyncobj import FAIL_REASON, replicated

from common.errors import NotLeader, StampError, Unavailable
from common.raft import DurableReplica, RaftTuning
from common.read_index import ReadIndex
from stream_layer.stream_manager.state import StreamManagerState

log = logging.getLogger(__name__)

T = TypeVar("T")
EX_SOFTWARE = 70


class _Refused:
    """A command the state machine refused: carried back as a value, not raised, so that
    pysyncobj's apply never sees an exception."""

    def __init__(self, error: StampError) -> None:
        self.error = error


class ReadBarrier:
    """The no-op a read waits for (never reaches the state machine)."""


class StreamManagerReplica(DurableReplica):
    def __init__(self, raft_address: str, peers: Sequence[str], raft_dir: str | Path,
                 tuning: RaftTuning | None = None, *, secret: bytes | None = None) -> None:
        """`secret`: the stamp secret its Raft peers authenticate with (common/raft.py)."""
        # Before the base constructor: pysyncobj may apply commands from inside it.
        self._state = StreamManagerState()
        self._mutex = threading.Lock()
        self._read_index = ReadIndex(lambda: self.propose(ReadBarrier()))
        super().__init__(raft_address, peers, raft_dir, tuning, secret=secret)

    @replicated
    def _apply_command(self, command: Any) -> Any:
        if isinstance(command, ReadBarrier):
            return None
        try:
            with self._mutex:
                return self._state.apply(command)
        except StampError as error:
            return _Refused(error)
        except Exception:
            log.critical("applying %r broke the stream manager state: stopping", command,
                         exc_info=True)
            logging.shutdown()
            os._exit(EX_SOFTWARE)

    async def propose(self, command: Any) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[Any, int]] = loop.create_future()

        def settle(result: Any, error: int) -> None:  # on pysyncobj's tick thread
            loop.call_soon_threadsafe(_settle, future, result, error)

        self._apply_command(command, callback=settle)
        result, error = await future
        if error != FAIL_REASON.SUCCESS:
            if error in (FAIL_REASON.NOT_LEADER, FAIL_REASON.MISSING_LEADER,
                         FAIL_REASON.LEADER_CHANGED):
                raise NotLeader(f"not the leader (Raft: {_reason(error)})")
            raise Unavailable(f"the change was not committed (Raft: {_reason(error)})")
        if isinstance(result, _Refused):
            raise result.error
        return result

    async def confirm_leadership(self) -> None:
        """See the module docstring: call before a read that must not be stale."""
        await self._read_index.confirm()

    def read(self, look: Callable[[StreamManagerState], T]) -> T:
        with self._mutex:
            return look(self._state)

    def snapshot_state(self) -> bytes:
        with self._mutex:
            return pickle.dumps(self._state.to_snapshot(), protocol=5)

    def restore_state(self, blob: bytes) -> None:
        state = StreamManagerState.from_snapshot(pickle.loads(blob))
        with self._mutex:
            self._state = state


def _settle(future: asyncio.Future[tuple[Any, int]], result: Any, error: int) -> None:
    if not future.done():
        future.set_result((result, error))


def _reason(error: int) -> str:
    for name in dir(FAIL_REASON):
        if getattr(FAIL_REASON, name) == error:
            return name
    return str(error)
