"""The lock client leaves a silent leader after a short attempt and does not follow its
followers back to it (issue 29: one retry policy, common/retry.py); a renewal asks a healthy
leader without a thread of gRPC's own. Real gRPC servers in this process stand for the three
replicas."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from common import rpc
from common.proto import lock_service_pb2 as pb
from common.proto import lock_service_pb2_grpc as pb_grpc
from lock_service.client import LockClient


class Replica(pb_grpc.LockServiceServicer):
    """`frozen`: answers nothing until released; a leader answers Get; a follower names
    `hint` as the leader."""

    def __init__(self, frozen: bool = False, leads: bool = False) -> None:
        self.frozen = frozen
        self.leads = leads
        self.hint = ""
        self.asked = 0
        self.renewed = 0
        self.acquires = 0
        # Per Renew asked: the threads of this process (where the client's calls are made
        # too) started since `known` was taken, but the server's own workers.
        self.known: set[threading.Thread] = set()
        self.started: list[list[str]] = []
        self.thaw = threading.Event()

    def Get(self, request, context):  # type: ignore[no-untyped-def]
        self.asked += 1
        self._answer(context)
        return pb.GetReply(found=True, value=b"v", version=3)

    def Acquire(self, request, context):  # type: ignore[no-untyped-def]
        self.acquires += 1
        self._answer(context)
        return pb.AcquireReply(granted=False, holder="other", holder_token=5)

    def WaitFree(self, request, context):  # type: ignore[no-untyped-def]
        self._answer(context)
        time.sleep(request.timeout_s)  # held all along
        return pb.WaitFreeReply(free=False)

    def Renew(self, request, context):  # type: ignore[no-untyped-def]
        self.started.append([t.name for t in threading.enumerate() if t not in self.known
                             and not t.name.startswith("ThreadPoolExecutor")])
        self._answer(context)
        self.renewed += 1
        return pb.RenewReply()

    def _answer(self, context) -> None:  # type: ignore[no-untyped-def]
        if self.frozen:
            self.thaw.wait(60)
        if not self.leads:
            metadata = ((rpc.ERROR_KEY, "NotLeader"),)
            if self.hint:
                metadata += ((rpc.LEADER_KEY, self.hint),)
            context.set_trailing_metadata(metadata)
            context.abort(grpc.StatusCode.UNAVAILABLE, "a follower")


@pytest.fixture
def replicas() -> Iterator[tuple[list[Replica], list[str]]]:
    group = [Replica(frozen=True), Replica(), Replica(leads=True)]
    servers, addresses = [], []
    for replica in group:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_LockServiceServicer_to_server(replica, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        addresses.append(f"127.0.0.1:{port}")
    group[1].hint = addresses[0]
    yield group, addresses
    for replica, server in zip(group, servers, strict=True):
        replica.thaw.set()
        server.stop(0)


def test_a_frozen_leader_costs_one_short_attempt(
        replicas: tuple[list[Replica], list[str]]) -> None:
    """Within a 3 s call: the old 2 s attempt at the frozen guess, then the follower's hint
    back to it, ran out the call (DeadlineExceeded)."""
    group, addresses = replicas
    client = LockClient(addresses, "test", call_timeout_s=3.0)
    try:
        assert client.get("k") == (b"v", 3)
        assert [r.asked for r in group] == [1, 1, 1]
        assert client.get("k") == (b"v", 3)  # the leader is known now
        assert [r.asked for r in group] == [1, 1, 2]
    finally:
        client.close()


def test_a_healthy_leader_renews_without_a_grpc_thread_for_the_call(
        replicas: tuple[list[Replica], list[str]]) -> None:
    """Seen failing before the change: the first call was a future, and a future on an idle
    channel starts a gRPC thread for its answer (a thread per renewal of every lease)."""
    group, addresses = replicas
    client = LockClient([addresses[2]], "test")
    try:
        for _ in range(3):
            group[2].known = set(threading.enumerate())
            client._renew(7, 2.0, time.monotonic() + 2.0)
        assert group[2].renewed == 3
        assert group[2].started == [[], [], []]
    finally:
        client.close()


def test_a_renewal_leaves_a_frozen_leader_for_the_one_that_answers(
        replicas: tuple[list[Replica], list[str]]) -> None:
    """The known leader (the first address) is frozen; a follower names it again; the third
    renews, well within the lease."""
    group, addresses = replicas
    client = LockClient(addresses, "test")
    try:
        started = time.monotonic()
        client._renew(7, 2.0, started + 1.8)
        assert group[2].renewed == 1
        assert group[0].renewed == 0
    finally:
        client.close()


def test_a_standby_that_waited_in_vain_does_not_acquire_again(
        replicas: tuple[list[Replica], list[str]]) -> None:
    """One Acquire, one long-poll, then None: seen failing before the change (a second
    Acquire after the long-poll ran out, which could only say "held" again: a standby
    partition manager's every try cost the lock service's leader two)."""
    group, addresses = replicas
    client = LockClient([addresses[2]], "test")
    try:
        assert client.acquire("pm/leader", ttl_s=2.0, wait_s=0.2) is None
        assert group[2].acquires == 1
    finally:
        client.close()
