"""The lock-service probe behind front ends' and partition managers' health (issue 29): a
lock service that answers is read every PROBE_INTERVAL_S, not every second; one that does
not is read again after the probe's deadline, so health comes back soon after it heals."""

from __future__ import annotations

import asyncio

from common.config import WatchConfig
from common.errors import Unavailable
from lock_service.probe import PROBE_INTERVAL_S, LockServiceProbe

TIMEOUT_S = 1.0


class FakeClient:
    def __init__(self) -> None:
        self.gets = 0
        self.down = False

    def get(self, key: str) -> None:
        self.gets += 1
        if self.down:
            raise Unavailable("no leader")

    def close(self) -> None:
        pass


def probe_with_fake() -> tuple[LockServiceProbe, FakeClient]:
    probe = LockServiceProbe(["127.0.0.1:1"], "test",
                             WatchConfig(health_dependency_timeout_ms=int(TIMEOUT_S * 1000)))
    probe.client.close()
    fake = FakeClient()
    probe.client = fake  # type: ignore[assignment]
    return probe, fake


def aged(probe: LockServiceProbe, seconds: float) -> None:
    """As if the last read was `seconds` earlier than it was."""
    probe._last_at -= seconds


def test_a_lock_service_that_answers_is_read_every_probe_interval() -> None:
    probe, fake = probe_with_fake()
    assert asyncio.run(probe.check()) is None
    assert fake.gets == 1
    aged(probe, TIMEOUT_S + 0.5)  # past the deadline, within the interval: the answer stands
    assert asyncio.run(probe.check()) is None
    assert fake.gets == 1
    aged(probe, PROBE_INTERVAL_S)
    assert asyncio.run(probe.check()) is None
    assert fake.gets == 2


def test_a_lock_service_that_does_not_answer_is_read_again_after_the_deadline() -> None:
    probe, fake = probe_with_fake()
    fake.down = True
    assert asyncio.run(probe.check()) is not None
    fake.down = False
    aged(probe, TIMEOUT_S + 0.01)
    assert asyncio.run(probe.check()) is None  # healed: serving again within a second
    assert fake.gets == 2
