"""The load of `stamp bench balance` (tools/bench/balance.py) and its control
(tools/bench/balance_layouts.py): APPENDERS appending 1 KiB records to LOGS logs, spread
evenly or, `skewed`, HOT_SHARE of them to the first HOT_LOGS logs."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

from common.config import KiB
from common.errors import StampError

Progress = Callable[[str], None]
APPENDERS = 32
LOGS = 256
HOT_LOGS = LOGS // 10
HOT_SHARE = 0.8
RECORD = b"b" * KiB


class Load:
    """The appenders; `skewed` switches where they write."""

    def __init__(self) -> None:
        self.acks = 0
        self.errors: list[str] = []
        self.skewed = False
        self.stop = asyncio.Event()

    def log(self, rng: random.Random) -> str:
        if self.skewed and rng.random() < HOT_SHARE:
            return f"log-{rng.randrange(HOT_LOGS):03d}"
        return f"log-{rng.randrange(LOGS):03d}"

    async def appender(self, client: Any, index: int) -> None:
        rng = random.Random(index)
        while not self.stop.is_set():
            try:
                await client.append("bench", self.log(rng), [RECORD])
            except StampError as exc:
                self.errors.append(str(exc))
                continue
            self.acks += 1

    async def rate(self, seconds: float) -> float:
        start_acks, started = self.acks, time.monotonic()
        await asyncio.sleep(seconds)
        return (self.acks - start_acks) / (time.monotonic() - started)
