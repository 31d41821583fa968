"""Which extent nodes the stream manager leader has heard from lately (§2: "watches EN
heartbeats"). Soft state on the leader, on an injected clock; only its conclusions become
commands (NodeDead, NodeAlive in state.py).

Contracts:
- A leader hears nobody when it takes office: every node gets a whole grace period from then,
  so an election never declares a healthy node dead.
- A node unheard for `suspect_after_ms` is suspect (it gets no new extents); unheard for
  `dead_after_ms` it is overdue, and the leader declares it dead. A node heard again before
  that costs nothing.
"""

from __future__ import annotations

from common.clock import Clock
from common.config import StreamManagerLimits


class NodeLiveness:
    def __init__(self, limits: StreamManagerLimits, clock: Clock) -> None:
        self.limits = limits
        self.clock = clock
        self._heard: dict[str, float] = {}
        self._usage: dict[str, tuple[int, int]] = {}  # node -> (used bytes, extents)
        self._since: float | None = None  # when this leader took office

    @property
    def in_office(self) -> bool:
        return self._since is not None

    def take_office(self) -> None:
        """This replica became leader: it has heard nobody yet."""
        self._since = self.clock.monotonic()
        self._heard.clear()

    def resign(self) -> None:
        self._since = None

    def heard(self, name: str, used_bytes: int, extents: int) -> None:
        self._heard[name] = self.clock.monotonic()
        self._usage[name] = (used_bytes, extents)

    def silent_s(self, name: str) -> float:
        now = self.clock.monotonic()
        start = self._since if self._since is not None else now
        return now - self._heard.get(name, start)

    def suspect(self, name: str) -> bool:
        return self.silent_s(name) * 1000 > self.limits.suspect_after_ms

    def overdue(self, name: str) -> bool:
        """Silent past the grace period: to be declared dead."""
        return self.silent_s(name) * 1000 > self.limits.dead_after_ms

    def usage(self, name: str) -> tuple[int, int]:
        return self._usage.get(name, (0, 0))
