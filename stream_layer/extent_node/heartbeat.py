"""An extent node's heartbeats to the stream manager leader (§2): who it is (name, address,
fault and upgrade domain), how much room it has and how much it holds. The leader registers
a node on its first heartbeat and declares it dead when they stop."""

from __future__ import annotations

import asyncio
import logging
import os

from common.errors import StampError
from common.proto import stream_manager_pb2 as pb
from stream_layer.extent_node.store import ExtentStore
from stream_layer.sm_client import AsyncStreamManagerClient

log = logging.getLogger(__name__)


async def heartbeat_forever(sm: AsyncStreamManagerClient, store: ExtentStore, name: str,
                            address: str, fault_domain: str, upgrade_domain: str,
                            interval_s: float) -> None:
    failing = False
    while True:
        disk = os.statvfs(store.data_dir)
        request = pb.HeartbeatRequest(
            name=name, address=address, fault_domain=fault_domain,
            upgrade_domain=upgrade_domain, capacity_bytes=disk.f_blocks * disk.f_frsize,
            used_bytes=sum(r.durable_end for r in store.replicas.values()),
            extents=len(store.replicas),
            unsealed=[i for i, r in store.replicas.items() if not r.sealed])
        try:
            await sm.call("Heartbeat", request, timeout_s=max(interval_s, 1.0))
            if failing:
                log.info("heartbeats reach the stream manager again")
            failing = False
        except StampError as exc:
            if not failing:
                log.warning("heartbeat to the stream manager failed: %s", exc)
            failing = True
        await asyncio.sleep(interval_s)
