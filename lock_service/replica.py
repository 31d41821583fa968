"""One replica of the lock service: the pure `LockState` behind a durable pysyncobj replica.

Contract:
- Commands are applied on pysyncobj's tick thread, in log order, one at a time, under
  `_state_mutex`; other threads look at the state only through `read`.
- `propose(command, callback)` may be called from any thread; `callback(result, error)` runs
  on the tick thread once the command is applied here (error is a pysyncobj FAIL_REASON,
  0 on success) — after its entry is durable on a majority (common/raft.py).
- Listeners added with `on_freed` hear, on the tick thread, the names of locks that became
  free (released or expired), to wake long-polls.
- If applying a command raises, the state machine is broken (a bug, not bad input: bad input
  yields `Rejected`). The replica stops at once rather than diverge from its peers.
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pysyncobj import replicated

from common.raft import DurableReplica, RaftTuning
from lock_service import commands as c
from lock_service.state import LockState

log = logging.getLogger(__name__)

T = TypeVar("T")
EX_SOFTWARE = 70


class LockReplica(DurableReplica):
    def __init__(self, raft_address: str, peers: Sequence[str], raft_dir: str | Path,
                 tuning: RaftTuning | None = None, *, secret: bytes | None = None) -> None:
        """`secret`: the stamp secret its Raft peers authenticate with (common/raft.py)."""
        # Before the base constructor: pysyncobj may apply commands from inside it.
        self._lock_state = LockState()
        self._state_mutex = threading.Lock()
        self._freed_listeners: list[Callable[[list[str]], None]] = []
        self.raft_address = raft_address
        super().__init__(raft_address, peers, raft_dir, tuning, secret=secret)

    @replicated
    def _apply_command(self, command: c.Command) -> c.Result:
        try:
            with self._state_mutex:
                result = self._lock_state.apply(command)
                freed = self._lock_state.take_freed()
        except Exception:
            log.critical("applying %r broke the lock state machine: stopping", command,
                         exc_info=True)
            logging.shutdown()
            os._exit(EX_SOFTWARE)
        if freed:
            for listener in self._freed_listeners:
                listener(freed)
        return result

    def propose(self, command: c.Command, callback: Callable[[Any, int], None]) -> None:
        self._apply_command(command, callback=callback)

    def read(self, look: Callable[[LockState], T]) -> T:
        with self._state_mutex:
            return look(self._lock_state)

    def on_freed(self, listener: Callable[[list[str]], None]) -> None:
        self._freed_listeners.append(listener)

    def grpc_address_of(self, raft_address: str | None) -> str | None:
        if not raft_address:
            return None
        return self.read(lambda state: state.members.get(raft_address))

    def snapshot_state(self) -> bytes:
        with self._state_mutex:
            return pickle.dumps(self._lock_state.to_snapshot(), protocol=5)

    def restore_state(self, blob: bytes) -> None:
        state = LockState.from_snapshot(pickle.loads(blob))
        with self._state_mutex:
            self._lock_state = state
