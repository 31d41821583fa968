"""What a job's per-item function gets (§7): clients of the stamp, made once per Spark task
from plain settings the driver ships, and the job's options.

Settings are a dict of plain values (picklable, small): the stream managers' addresses, the
stamp's config file (for limits), dry run, and the driver's clock reading (`now`: one time
for every task of a run, so a policy's "after" is judged the same everywhere)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common import tls
from common.config import JobLimits, load_config
from stream_layer.extent_client import AsyncExtentClient
from stream_layer.sm_client import AsyncStreamManagerClient


@dataclass
class JobContext:
    sm: AsyncStreamManagerClient
    extents: AsyncExtentClient
    limits: JobLimits
    dry_run: bool = False
    now: float = 0.0

    @classmethod
    def open(cls, settings: dict[str, Any]) -> JobContext:
        """Clients for one task (call inside its event loop); close them with `close`. A
        stamp with TLS: the task talks to it with the operator's certificate (common/tls.py;
        its files must be readable where the task runs)."""
        if settings.get("tls"):
            tls.use(tls.load(settings["tls"], tls.OPERATOR))
        config = load_config(settings.get("config"))
        return cls(AsyncStreamManagerClient(settings["sm"], config.stream_manager),
                   AsyncExtentClient(config.extent_node), config.jobs,
                   bool(settings.get("dry_run")), float(settings.get("now", 0.0)))

    async def close(self) -> None:
        await self.extents.close()
        await self.sm.close()
