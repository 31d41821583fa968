"""An extent node's heartbeats to the stream manager leader (§2): who it is (name, address,
fault and upgrade domain), how much room it has and how much it holds. The leader registers
a node on its first heartbeat and declares it dead when they stop.

Contract: the loop beats for as long as the process lives. It runs on the one background
helper (common/background.py): a beat that fails, for whatever reason, is logged and the
next one sent; were the loop to end, the leader would declare a healthy node dead and
re-replicate everything it holds."""

from __future__ import annotations

import logging
import os

from common import background, faults
from common.proto import stream_manager_pb2 as pb
from stream_layer.extent_node.store import ExtentStore
from stream_layer.sm_client import AsyncStreamManagerClient

log = logging.getLogger(__name__)


def heartbeat_request(store: ExtentStore, name: str, address: str, fault_domain: str,
                      upgrade_domain: str) -> pb.HeartbeatRequest:
    """What this node tells the leader now: its identity, room and holdings."""
    disk = os.statvfs(store.data_dir)
    return pb.HeartbeatRequest(
        name=name, address=address, fault_domain=fault_domain,
        upgrade_domain=upgrade_domain, capacity_bytes=disk.f_blocks * disk.f_frsize,
        used_bytes=sum(r.durable_end for r in store.replicas.values()),
        extents=len(store.replicas),
        unsealed=[i for i, r in store.replicas.items() if not r.sealed])


async def heartbeat_forever(sm: AsyncStreamManagerClient, store: ExtentStore, name: str,
                            address: str, fault_domain: str, upgrade_domain: str,
                            interval_s: float) -> None:
    """Beat every `interval_s` until cancelled (the module's contract)."""

    async def beat() -> None:
        await faults.apoint("en.heartbeat")
        request = heartbeat_request(store, name, address, fault_domain, upgrade_domain)
        await sm.call("Heartbeat", request, timeout_s=max(interval_s, 1.0))

    await background.run_forever("heartbeat to the stream manager", beat, interval_s,
                                 logger=log)
