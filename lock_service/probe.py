"""Whether the lock service answers: the health check of a process that cannot do its job
without it (a front end reads account keys there, a partition manager its map and leader
lease). One read of a key nobody writes, through the leader, at most once per
PROBE_INTERVAL_S while it answers (once per `watch.health_dependency_timeout_ms`, its
deadline, while it does not); between reads the last answer stands."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from common.config import WatchConfig
from common.errors import StampError
from lock_service.client import LockClient

PROBE_KEY = "health/probe"
# Only operators' tools read the health it feeds (`stamp status`, `stamp top`): a read every
# few seconds tells them soon enough, where one a second from each front end and partition
# manager was a steady share of an idle lock leader's requests (issue 29).
PROBE_INTERVAL_S = 3.0


class LockServiceProbe:
    def __init__(self, addresses: Sequence[str], holder: str,
                 config: WatchConfig | None = None) -> None:
        self.config = config or WatchConfig()
        timeout_s = self.config.health_dependency_timeout_ms / 1000
        self.client = LockClient(addresses, holder=f"{holder}-health", call_timeout_s=timeout_s)
        self._timeout_s = timeout_s
        self._last_at = -float("inf")
        self._last: str | None = "not checked yet"

    async def check(self) -> str | None:
        """None while the lock service answered lately, else why not."""
        # A failed read is retried sooner: a server that starts before the lock service
        # serves, or sees it heal, is SERVING again within a second.
        interval_s = self._timeout_s if self._last else max(PROBE_INTERVAL_S, self._timeout_s)
        if time.monotonic() - self._last_at < interval_s:
            return self._last
        try:
            await asyncio.to_thread(self.client.get, PROBE_KEY)
            self._last = None
        except StampError as exc:
            self._last = f"the lock service does not answer: {exc}"
        self._last_at = time.monotonic()
        return self._last

    def close(self) -> None:
        self.client.close()
