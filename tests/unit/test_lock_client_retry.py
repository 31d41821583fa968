"""The lock client leaves a silent leader after a short attempt and does not follow its
followers back to it (issue 29: one retry policy, common/retry.py); a renewal asks a healthy
leader without a thread of gRPC's own; a client renews all its due leases in one RenewMany
(issue 29: a call per lease made the lock leader's load grow with the partitions served),
and lease by lease from a server that predates it. Real gRPC servers in this process stand
for the three replicas."""

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
from lock_service.client import Lease, LockClient, renewal_batch
from tests.support.waiting import wait_until

PROGRESS_TIMEOUT_S = 5.0


class Replica(pb_grpc.LockServiceServicer):
    """`frozen`: answers nothing until released; a leader answers Get; a follower names
    `hint` as the leader; the tokens in `ended` are leases the service has ended; `old`: a
    server that predates RenewMany (UNIMPLEMENTED)."""

    def __init__(self, frozen: bool = False, leads: bool = False) -> None:
        self.frozen = frozen
        self.leads = leads
        self.hint = ""
        self.asked = 0
        self.renewed = 0
        self.acquires = 0
        self.ended: set[int] = set()
        self.old = False
        self.many_asked = 0
        self.many: list[list[int]] = []  # the tokens of each RenewMany answered
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
        if request.token in self.ended:
            context.abort(grpc.StatusCode.NOT_FOUND, f"lease {request.token} has ended")
        return pb.RenewReply()

    def RenewMany(self, request, context):  # type: ignore[no-untyped-def]
        self.many_asked += 1
        if self.old:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        self._answer(context)
        tokens = [lease.token for lease in request.leases]
        self.many.append(tokens)
        return pb.RenewManyReply(ended=[token for token in tokens if token in self.ended])

    def Release(self, request, context):  # type: ignore[no-untyped-def]
        self._answer(context)
        return pb.ReleaseReply(existed=True)

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


def hold(client: LockClient, leases: list[tuple[int, float]],
         lost: list[Lease] | None = None) -> list[Lease]:
    """Leases (token, ttl) as if just granted to `client`, renewed by it from now on."""
    return [client._start_lease(None, token, ttl_s, time.monotonic(),
                                None if lost is None else lost.append)
            for token, ttl_s in leases]


THREE_TTLS = [(11, 1.0), (12, 1.2), (13, 1.6)]


def test_a_client_renews_its_leases_in_one_call_per_round(
        replicas: tuple[list[Replica], list[str]]) -> None:
    """Seen failing before the change: no RenewMany, a Renew per lease from its own thread
    (three per round). Every round carries all three: a lease due within the first one's
    renew period is renewed with it, early."""
    group, addresses = replicas
    client = LockClient([addresses[2]], "test")
    try:
        leases = hold(client, THREE_TTLS)
        wait_until(lambda: len(group[2].many) >= 2, PROGRESS_TIMEOUT_S, "two rounds")
        rounds, started = len(group[2].many), time.monotonic()
        time.sleep(1.0)  # (a rate: how many rounds in a second, not a condition)
        per_s = (len(group[2].many) - rounds) / (time.monotonic() - started)
        assert group[2].renewed == 0
        assert all(sorted(tokens) == [11, 12, 13] for tokens in group[2].many)
        assert 2.0 <= per_s <= 5.0, f"{per_s:.1f} rounds/s: every 0.25 s (1.0 s TTL / 4)"
        assert all(lease.valid() and not lease.lost.is_set() for lease in leases)
    finally:
        client.close()


def test_a_lease_the_service_ended_is_lost_and_the_others_renewed(
        replicas: tuple[list[Replica], list[str]]) -> None:
    """Seen failing before the change: the lease was lost, but through Renews, no RenewMany."""
    group, addresses = replicas
    group[2].ended.add(12)
    lost: list[Lease] = []
    client = LockClient([addresses[2]], "test")
    try:
        leases = hold(client, THREE_TTLS, lost)
        wait_until(lambda: lost, PROGRESS_TIMEOUT_S, "lease 12 lost (on_lost)")
        assert lost == [leases[1]] and leases[1].lost.is_set() and not leases[1].valid()
        rounds = len(group[2].many)
        wait_until(lambda: len(group[2].many) >= rounds + 2, PROGRESS_TIMEOUT_S,
                   "two more rounds")
        assert all(sorted(tokens) == [11, 13] for tokens in group[2].many[rounds:])
        assert leases[0].valid() and leases[2].valid() and lost == [leases[1]]
        assert group[2].renewed == 0
    finally:
        client.close()


def test_a_batch_leaves_a_frozen_leader_for_the_one_that_answers(
        replicas: tuple[list[Replica], list[str]]) -> None:
    """The known leader (the first address) is frozen; a follower names it again; the third
    renews the whole batch, well within the leases. Seen failing before the change: no
    RenewMany (a Renew per lease)."""
    group, addresses = replicas
    client = LockClient(addresses, "test")
    try:
        leases = hold(client, [(21, 2.0), (22, 2.0), (23, 1.5)])
        first_deadlines = [lease._deadline for lease in leases]
        wait_until(lambda: len(group[2].many) >= 2, PROGRESS_TIMEOUT_S, "two rounds")
        assert all(sorted(tokens) == [21, 22, 23] for tokens in group[2].many)
        assert group[0].many == [] and group[1].many == []
        assert group[0].renewed == group[1].renewed == group[2].renewed == 0
        assert all(lease.valid() and not lease.lost.is_set() for lease in leases)
        assert all(lease._deadline > first for lease, first
                   in zip(leases, first_deadlines, strict=True))
    finally:
        client.close()


def test_a_server_without_renew_many_gets_a_renew_per_lease(
        replicas: tuple[list[Replica], list[str]]) -> None:
    """An older lock server answers RenewMany UNIMPLEMENTED: the client asks it once, then
    renews lease by lease. Seen failing before the change: RenewMany was never asked."""
    group, addresses = replicas
    for replica in group:
        replica.old = True
    client = LockClient([addresses[2]], "test")
    try:
        leases = hold(client, THREE_TTLS)
        wait_until(lambda: group[2].renewed >= 9, PROGRESS_TIMEOUT_S, "three rounds of Renews")
        assert group[2].many_asked == 1 and group[2].many == []
        assert all(lease.valid() and not lease.lost.is_set() for lease in leases)
    finally:
        client.close()


def test_the_renewer_ends_with_the_last_lease_and_starts_with_the_next(
        replicas: tuple[list[Replica], list[str]]) -> None:
    """One renewer thread per client, only while it holds a lease; a lone lease is renewed
    by Renew. Seen failing before the change: a thread per lease (`lease-<token>`)."""
    group, addresses = replicas
    client = LockClient([addresses[2]], "lifecycle")

    def renewers() -> list[threading.Thread]:
        return [t for t in threading.enumerate()
                if t.name == "lease-renewer-lifecycle" and t.is_alive()]
    try:
        [lease] = hold(client, [(31, 1.0)])
        assert len(renewers()) == 1
        wait_until(lambda: group[2].renewed >= 1, PROGRESS_TIMEOUT_S, "a renewal")
        lease.release()
        wait_until(lambda: not renewers(), PROGRESS_TIMEOUT_S, "the renewer to end")
        [again] = hold(client, [(32, 1.0)])
        renewed = group[2].renewed
        wait_until(lambda: group[2].renewed > renewed, PROGRESS_TIMEOUT_S, "renewals again")
        assert again.valid() and len(renewers()) == 1 and group[2].many == []
    finally:
        client.close()


def test_a_batch_is_the_first_due_lease_and_those_due_within_its_period() -> None:
    """renewal_batch, on its inputs alone: nothing before the first is due; then every lease
    due before the first one's next renewal, pulled forward; a later one waits its turn."""
    def due(next_renew: float, every_s: float) -> Lease:
        lease = Lease.__new__(Lease)
        lease._next_renew, lease._renew_every_s = next_renew, every_s
        return lease

    session, lock, late = due(10.0, 0.375), due(10.2, 0.5), due(10.5, 0.5)
    assert renewal_batch([session, lock, late], 9.9) == []
    assert renewal_batch([late, lock, session], 10.0) == [session, lock]
    assert renewal_batch([late, lock, session], 10.2) == [session, lock, late]
    assert renewal_batch([due(10.0, 75.0), session], 10.0)[1] is session
