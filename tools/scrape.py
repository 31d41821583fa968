"""Reading a Stamp process's Prometheus metrics (common/metrics.py serves them), for
`stamp top` and the tests: one GET of `/metrics` with a deadline, parsed into samples.

Contract: `scrape_many` never raises for one process: a process that does not answer in
time (dead, frozen, cut off) comes back as None.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from common.config import WatchConfig

# A scrape's reply: read up to this much (a stamp process's page is a few tens of KiB).
SCRAPE_BYTES_MAX = 16 * 1024 * 1024


@dataclass
class Samples:
    """One scrape: sample name (with `_total`, `_bucket`... as exposed) -> [(labels, value)]."""

    by_name: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)

    def value(self, name: str, default: float = 0.0, **labels: str) -> float:
        """The sum of the samples of `name` whose labels include `labels`."""
        found = [v for lab, v in self.by_name.get(name, ()) if _has(lab, labels)]
        return sum(found) if found else default

    def series(self, name: str) -> list[tuple[dict[str, str], float]]:
        return self.by_name.get(name, [])

    def buckets(self, name: str, **labels: str) -> dict[float, float]:
        """A histogram's cumulative buckets (upper bound -> count), summed over the series
        whose labels include `labels`."""
        out: dict[float, float] = {}
        for lab, value in self.by_name.get(name + "_bucket", ()):
            if _has(lab, labels):
                bound = float(lab["le"])
                out[bound] = out.get(bound, 0.0) + value
        return out


def _has(labels: dict[str, str], wanted: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in wanted.items())


def parse(text: str) -> Samples:
    samples = Samples()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.by_name.setdefault(sample.name, []).append((dict(sample.labels),
                                                                sample.value))
    return samples


async def scrape(address: str, timeout_s: float) -> Samples:
    host, _, port = address.rpartition(":")
    async with asyncio.timeout(timeout_s):
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(f"GET /metrics HTTP/1.1\r\nHost: {address}\r\n"
                         f"Connection: close\r\n\r\n".encode())
            await writer.drain()
            reply = await reader.read(SCRAPE_BYTES_MAX)
            while chunk := await reader.read(SCRAPE_BYTES_MAX):
                reply += chunk
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
    head, _, body = reply.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        status = head.partition(b"\r\n")[0].decode(errors="replace")
        raise ConnectionError(f"{address}: {status}")
    return parse(body.decode())


async def scrape_many(addresses: Iterable[str], config: WatchConfig | None = None
                      ) -> dict[str, Samples | None]:
    timeout_s = (config or WatchConfig()).top_scrape_timeout_ms / 1000
    wanted = list(dict.fromkeys(a for a in addresses if a))

    async def one(address: str) -> Samples | None:
        try:
            return await scrape(address, timeout_s)
        except (OSError, TimeoutError, ValueError):
            return None
    return dict(zip(wanted, await asyncio.gather(*(one(a) for a in wanted)), strict=True))
