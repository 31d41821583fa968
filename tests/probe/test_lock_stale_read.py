"""A deposed lock-service leader must not answer from stale state (issue 15, hole 7): its
Raft tick thread is frozen by a delay at its journal sync (its gRPC server keeps answering),
the other two elect a leader and grant a lock, then the old leader is asked whether the lock
is free and which leases exist. It must answer with the grant or refuse."""

from __future__ import annotations

import contextlib
import threading

import grpc
import pytest

from common import rpc
from common.errors import NotLeader, StampError, Unavailable
from common.proto import lock_service_pb2 as pb
from common.proto import lock_service_pb2_grpc as pb_grpc
from lock_service.client import LockClient
from lock_service.group import LocalLockGroup
from tests.support.locks import PROGRESS_TIMEOUT_S
from tests.support.waiting import wait_until

# serial: its bounds are timings (or it freezes processes); `make test` runs it alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

FROZEN_MS = 20_000  # long enough for an election and a grant on a loaded machine


def ask(call: object, request: object) -> object | None:
    """The old leader's answer, or None when it refuses (NotLeader, Unavailable)."""
    try:
        return call(request, timeout=FROZEN_MS / 1000 + 30)  # type: ignore[operator]
    except grpc.RpcError as exc:
        error = rpc.from_rpc_error(exc)
        if isinstance(error, NotLeader | Unavailable):
            return None
        raise error from None


def test_a_frozen_leader_does_not_answer_from_stale_state(lock_group: LocalLockGroup) -> None:
    probe = lock_group.client("probe", call_timeout_s=8.0)
    try:
        old_name = lock_group.leader(probe)
        old = lock_group.replicas[old_name]
        others = [r for name, r in lock_group.replicas.items() if name != old_name]
        channel = rpc.sync_channel(old.address, 16 << 20)
        stub = pb_grpc.LockServiceStub(channel)

        # The next journal sync on the leader's tick thread stalls: it sends no heartbeat,
        # learns of no new term, and still believes it leads.
        rpc.arm_remote(old.address, f"raft_journal.sync=delay:{FROZEN_MS},times=1")
        stall = threading.Thread(target=lambda: _quietly(stub.Put, pb.PutRequest(
            key="stall", value=b"x", request_id="stall")), daemon=True)
        stall.start()

        def new_leader() -> bool:
            for rec in others:
                try:
                    if probe.status(rec.address, timeout_s=0.5).role == "leader":
                        return True
                except StampError:
                    continue
            return False
        wait_until(new_leader, PROGRESS_TIMEOUT_S, "the other two to elect a leader")
        assert probe.status(old.address, timeout_s=2.0).role == "leader", \
            "the frozen leader must still believe it leads for this test to mean anything"
        with LockClient([r.address for r in others], "new-holder",
                        call_timeout_s=8.0) as survivors:
            lease = survivors.acquire("the-lock", ttl_s=60.0)
            assert lease is not None and lease.valid()
            assert stall.is_alive(), "the old leader's tick thread was not frozen"

            free = ask(stub.WaitFree, pb.WaitFreeRequest(name="the-lock", timeout_s=0.0))
            assert free is None or not free.free, \
                "a deposed leader said a lock granted by its successor is free"
            leases = ask(stub.ListLeases, pb.ListLeasesRequest())
            assert leases is None or any(info.lock == "the-lock" for info in leases.leases), \
                "a deposed leader listed leases without its successor's grant"
        stall.join(FROZEN_MS / 1000 + 30)
        channel.close()
    finally:
        probe.close()


def _quietly(call: object, request: object) -> None:
    # Committed through the new leader or refused: it only had to freeze the tick thread.
    with contextlib.suppress(grpc.RpcError):
        call(request, timeout=FROZEN_MS / 1000 + 30)  # type: ignore[operator]
