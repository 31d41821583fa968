"""The lock service's client library (§3): blocking, thread-safe, finds the leader, renews
leases in the background. This Python API is a contract other layers build on:

    lc = LockClient.from_stamp(data_dir, holder="ps-1")    # or LockClient(addresses, holder)
    lease = lc.acquire("partition/7", ttl_s=5.0, wait_s=0.0)  # Lease, or None if not granted
    lease.token; lease.valid(); lease.release()               # in wait_s
    lc.get(key) -> (value, version) | None
    lc.put(key, value) -> version
    lc.cas(key, expected_version, value) -> bool              # expected_version 0: must not exist
    lc.delete(key) -> bool; lc.list(prefix) -> list[str]
    lc.session(ttl_s) -> Lease; lc.put(key, value, lease=session)  # the key dies with it

Leases:
- A lease is claimed (`valid()`) until `sent + ttl - margin`, where `sent` is when the
  request that granted or last renewed it was first sent. The service cannot expire it
  before `sent + ttl` in real time (lock_service/leader_time.py), so its holder always stops
  claiming first. The margin covers clock-rate differences between hosts.
- One thread per client (`_Renewer`, a daemon while the client holds a lease) renews each
  lease every ttl/4 and retries failures until the claim deadline. When the first lease is
  due, every lease of the client that would fall due within that lease's renew period goes
  with it, early (never later than its own schedule), in one RenewMany (issue 29: a Renew
  per lease made the leader's load grow with the partitions a server holds); a lone lease,
  or every lease of a client whose service predates RenewMany (UNIMPLEMENTED), by Renew.
  When the claim ends other than by `release()`, `lease.lost` is set and `on_lost(lease)`
  runs at once: on a thread of its own when the renewer found out (a slow callback holds
  up no other lease's renewal), on the caller's when `lease.renew()` did.
- Batching keeps the claim rule above: every lease of a RenewMany claims from that call's
  send time, and the service renews each of its tokens at the one leader time a Renew of
  that token alone would get there, from memory under the same leader-lease check or
  through the log as Renew would (lock_service/server.py). So lessor.py's argument holds
  token by token: a batched renewal is, for each lease, a renewal sent at `sent`.
- A renewal (Renew or RenewMany) goes to the leader this client knows; with no answer within
  RENEW_LEADER_TIMEOUT_S (a frozen or cut-off leader) or a refusal, to every replica at once,
  asking again each that refuses (`_Renewal`), so it lands on a new leader as soon as one
  answers. The service answers
  renewals from the leader's memory and a new leader extends every lease when it takes
  office (lock_service/lessor.py), so a leader change costs a renewal about an election.
- `fence=lease` on a write makes the service refuse it once that lease has ended there.
- A holder that restarts cannot take its own old lease over: it waits, like anyone, until
  that lease expires (nothing proves the old process is gone).

Calls follow NotLeader hints, rotate through the replicas on transport failures and retry
until `call_timeout_s`, by the common retry policy (common/retry.py): an attempt waits three
quarters of a second at first (`AttemptTimer`, adapted to the recent p99, doubling after each
timeout), and a replica that let one time out is suspect for about an election
(`LeaderGuess`: hints naming it are not followed). A retried mutation carries its first
attempt's request id, so it takes effect at most once, and its answer is the first
attempt's.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from common import rpc
from common.clock import Clock, SystemClock
from common.errors import (
    DeadlineExceeded,
    FaultInjected,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    StampError,
    Unavailable,
)
from common.proto import lock_service_pb2 as pb
from common.proto import lock_service_pb2_grpc as pb_grpc
from common.retry import AttemptTimer, LeaderGuess, RetryPolicy
from common.stamp_file import addresses_of
from lock_service import limits
from lock_service.leader_hint import leader_hint

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 10.0
# One attempt waits ATTEMPT_FIRST_S (or 3x the recent p99) at first, doubling after each
# timeout up to ATTEMPT_TIMEOUT_S: a healthy leader answers in milliseconds.
ATTEMPT_FIRST_S = 0.75
ATTEMPT_TIMEOUT_S = 2.0
# Between rounds of the replicas (all refused: an election) back off this way.
RETRY_POLICY = RetryPolicy(backoff_min_s=0.005, backoff_max_s=0.1)
# A replica that let an attempt time out is suspect this long (an election: about a second;
# a leader merely slow is asked again after it, with a doubled wait).
SUSPECT_S = 1.0
LEASE_MARGIN_FRACTION = 0.1
LEASE_MARGIN_MIN_S = 0.05
# Renewals are cheap (answered from the leader's memory): renew often enough that one
# stalled for a leader change still lands well before the claim deadline.
RENEW_FRACTION = 1 / 4
RENEW_RETRY_S = 0.05
# A renewal waits this long for the leader it knows before it asks every replica at once
# (a healthy leader answers from memory in a few ms).
RENEW_LEADER_TIMEOUT_S = 0.3
# A call to a replica that does not answer is given up (and sent again) after this long.
RENEW_ROUND_TIMEOUT_S = 0.5
RETRYABLE = (Unavailable, DeadlineExceeded, FaultInjected)  # NotLeader is an Unavailable


def lease_margin_s(ttl_s: float) -> float:
    """How long before the service could expire a lease its holder stops claiming it."""
    return max(LEASE_MARGIN_MIN_S, ttl_s * LEASE_MARGIN_FRACTION)


class LockClient:
    def __init__(self, addresses: Sequence[str], holder: str, *,
                 call_timeout_s: float = CALL_TIMEOUT_S, clock: Clock | None = None) -> None:
        if not addresses:
            raise InvalidArgument("a lock client needs the addresses of the replicas")
        self.holder = holder
        self.call_timeout_s = call_timeout_s
        self.clock = clock or SystemClock()
        self._leader = LeaderGuess(addresses, self.clock.monotonic, SUSPECT_S)
        self._attempts = AttemptTimer(first_s=ATTEMPT_FIRST_S, max_s=ATTEMPT_TIMEOUT_S)
        self._rng = random.Random()
        self._guess_mutex = threading.Lock()  # for _leader and _attempts (many threads call)
        self._mutex = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, pb_grpc.LockServiceStub] = {}
        self._leases: set[Lease] = set()
        self._renewer = _Renewer(self)

    @classmethod
    def from_stamp(cls, data_dir: str | Path, holder: str, **kwargs: Any) -> LockClient:
        """A client of the lock service of the stamp whose `stamp.json` is in `data_dir`."""
        return cls(addresses_of(data_dir, "lock"), holder, **kwargs)

    def close(self) -> None:
        """Release every lease still held (best effort) and close the channels; the renewer
        thread ends, holding no lease."""
        for lease in self._held():
            lease.release()
        with self._mutex:
            channels, self._channels, self._stubs = list(self._channels.values()), {}, {}
        for channel in channels:
            channel.close()

    def __enter__(self) -> LockClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- locks and sessions ------------------------------------------------------------------

    def acquire(self, name: str, ttl_s: float = 5.0, wait_s: float = 0.0,
                on_lost: Callable[[Lease], None] | None = None) -> Lease | None:
        """The lock `name` as a renewed Lease, or None if it was not granted within wait_s."""
        wait_until = self.clock.monotonic() + wait_s
        while True:
            sent = self.clock.monotonic()
            reply = self._call("Acquire", pb.AcquireRequest(
                name=name, holder=self.holder, ttl_s=ttl_s, request_id=_request_id()))
            if reply.granted:
                return self._start_lease(name, reply.token, ttl_s, sent, on_lost)
            remaining = wait_until - self.clock.monotonic()
            if remaining <= 0:
                return None
            free = False
            with contextlib.suppress(*RETRYABLE):  # long-poll until free, then race again
                free = self._call("WaitFree", pb.WaitFreeRequest(name=name, timeout_s=remaining),
                                  deadline=wait_until + ATTEMPT_TIMEOUT_S,
                                  attempt_timeout_s=remaining + ATTEMPT_TIMEOUT_S).free
            # Still held when the wait ran out: no second Acquire, a Raft read at the leader
            # that could only say "held" again (issue 29: a standby's every try cost two).
            if not free and self.clock.monotonic() >= wait_until:
                return None

    def session(self, ttl_s: float = 5.0,
                on_lost: Callable[[Lease], None] | None = None) -> Lease:
        """A lease holding no lock: keys put with `lease=` it vanish when it ends."""
        sent = self.clock.monotonic()
        reply = self._call("OpenSession", pb.OpenSessionRequest(
            holder=self.holder, ttl_s=ttl_s, request_id=_request_id()))
        return self._start_lease(None, reply.token, ttl_s, sent, on_lost)

    def _start_lease(self, name: str | None, token: int, ttl_s: float, sent: float,
                     on_lost: Callable[[Lease], None] | None) -> Lease:
        lease = Lease(self, name, token, ttl_s, sent, on_lost)
        with self._mutex:
            self._leases.add(lease)
        lease._start()
        return lease

    def end(self, token: int) -> bool:
        """End the lease `token` on the service, whoever holds it; whether it still existed.
        Its holder is not told: only for a lease its holder can no longer claim (a partition
        lease whose holder's session has ended: partition_layer/ownership.py `orphaned`)."""
        return bool(self._call("Release", pb.ReleaseRequest(token=token)).existed)

    def _forget(self, lease: Lease) -> None:
        with self._mutex:
            self._leases.discard(lease)
        self._renewer.wake()  # its last lease gone, the renewer ends now

    def _held(self) -> list[Lease]:
        with self._mutex:
            return list(self._leases)

    # --- key/value store ---------------------------------------------------------------------

    def get(self, key: str) -> tuple[bytes, int] | None:
        reply = self._call("Get", pb.GetRequest(key=key))
        return (reply.value, reply.version) if reply.found else None

    def put(self, key: str, value: bytes, *, lease: Lease | None = None,
            fence: Lease | None = None) -> int:
        """Write unconditionally; return the new version."""
        reply = self._call("Put", pb.PutRequest(
            key=key, value=value, lease_token=_token(lease), fence_token=_token(fence),
            request_id=_request_id()))
        assert reply.written
        return reply.version

    def cas(self, key: str, expected_version: int, value: bytes, *,
            lease: Lease | None = None, fence: Lease | None = None) -> bool:
        return self.compare_and_set(key, expected_version, value, lease=lease,
                                    fence=fence) is not None

    def compare_and_set(self, key: str, expected_version: int, value: bytes, *,
                        lease: Lease | None = None, fence: Lease | None = None) -> int | None:
        """Write if the key's version is `expected_version` (0: absent): the new version,
        or None if it was not written."""
        reply = self._call("Put", pb.PutRequest(
            key=key, value=value, expected_version=expected_version,
            lease_token=_token(lease), fence_token=_token(fence), request_id=_request_id()))
        return reply.version if reply.written else None

    def delete(self, key: str, expected_version: int | None = None, *,
               fence: Lease | None = None) -> bool:
        """True if this call deleted the key."""
        request = pb.DeleteRequest(key=key, fence_token=_token(fence), request_id=_request_id())
        if expected_version is not None:
            request.expected_version = expected_version
        return self._call("Delete", request).deleted

    def list(self, prefix: str = "", limit: int = limits.LIST_KEYS_MAX) -> list[str]:
        return list(self._call("List", pb.ListRequest(prefix=prefix, limit=limit)).keys)

    def list_values(self, prefix: str = "", limit: int = limits.LIST_KEYS_MAX
                    ) -> dict[str, tuple[bytes, int]]:
        """{key: (value, version)} of the keys under `prefix` (at most `limit`), in one call
        as a rule (issue 29: a List and a Get per key cost the lock service's leader a call
        each); a key whose value did not fit in the reply is read with a Get (one deleted
        meanwhile is left out)."""
        reply = self._call("List", pb.ListRequest(prefix=prefix, limit=limit, with_values=True))
        found = {key: (value, version) for key, value, version
                 in zip(reply.keys[:len(reply.values)], reply.values, reply.versions,
                        strict=True)}
        for key in reply.keys[len(reply.values):]:
            value = self.get(key)
            if value is not None:
                found[key] = value
        return found

    def list_leases(self) -> list[pb.LeaseInfo]:
        """Every lease (locks and sessions) as the leader sees it."""
        return list(self._call("ListLeases", pb.ListLeasesRequest()).leases)

    def status(self, address: str, timeout_s: float = ATTEMPT_TIMEOUT_S,
               with_digest: bool = False) -> pb.StatusReply:
        """The Status of one replica (no leader finding, no retries)."""
        try:
            return self._stub(address).Status(pb.StatusRequest(with_digest=with_digest),
                                              timeout=timeout_s)
        except grpc.RpcError as exc:
            raise rpc.from_rpc_error(exc) from None

    # --- calls -------------------------------------------------------------------------------

    def _stub(self, address: str) -> pb_grpc.LockServiceStub:
        with self._mutex:
            stub = self._stubs.get(address)
            if stub is None:
                channel = rpc.sync_channel(address, limits.RPC_MESSAGE_BYTES_MAX)
                self._channels[address] = channel
                stub = self._stubs[address] = pb_grpc.LockServiceStub(channel)
            return stub

    def _renew(self, token: int, ttl_s: float, deadline: float) -> float:
        """Renew lease `token` as the module docstring says, until `deadline` (monotonic).
        Returns when the request that succeeded was sent: the holder's claim counts from it.
        Raises NotFound if the service has ended the lease, DeadlineExceeded at the
        deadline, and any other error that retrying cannot help."""
        _, sent = self._renewal("Renew", pb.RenewRequest(token=token, ttl_s=ttl_s), deadline,
                                f"lease {token}")
        return sent

    def _renew_many(self, leases: Sequence[Lease], deadline: float) -> tuple[float, set[int]]:
        """Renew `leases` in one RenewMany as `_renew` renews one, until `deadline`: when
        the request that succeeded was sent, and the tokens the service had ended. Raises
        `_NotServed` if the service predates RenewMany."""
        request = pb.RenewManyRequest(leases=[pb.RenewRequest(token=lease.token,
                                                              ttl_s=lease.ttl_s)
                                              for lease in leases])
        reply, sent = self._renewal("RenewMany", request, deadline, f"{len(leases)} leases")
        return sent, set(reply.ended)

    def _renewal(self, method: str, request: Any, deadline: float, what: str
                 ) -> tuple[Any, float]:
        """(reply, when its request was sent) of a renewal call (`_Renewal`)."""
        renewal = _Renewal(self, method, request, deadline, what)
        try:
            address, sent, reply = renewal.run()
        finally:
            renewal.cancel()
        with self._guess_mutex:
            self._leader.answered(address)
        return reply, sent

    def _call(self, method: str, request: Any, *, deadline: float | None = None,
              attempt_timeout_s: float | None = None) -> Any:
        """Call `method` on the leader, retrying as the module docstring says, until
        `deadline` (monotonic; default call_timeout_s from now); each attempt waits
        `attempt_timeout_s` if given (a long poll), else as the AttemptTimer says."""
        if deadline is None:
            deadline = self.clock.monotonic() + self.call_timeout_s
        failures = timeouts = 0
        while True:
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                raise DeadlineExceeded(f"{method}: no answer from the lock service in time")
            with self._guess_mutex:
                address = self._leader.address
                wait_s = (attempt_timeout_s if attempt_timeout_s is not None
                          else self._attempts.timeout_s(timeouts))
            sent = self.clock.monotonic()
            try:
                reply = getattr(self._stub(address), method)(
                    request, timeout=min(remaining, wait_s))
            except grpc.RpcError as exc:
                error = rpc.from_rpc_error(exc)
                if not isinstance(error, RETRYABLE):
                    raise error from None
            else:
                with self._guess_mutex:
                    self._leader.answered(address)
                    if attempt_timeout_s is None:
                        self._attempts.observe(self.clock.monotonic() - sent)
                return reply
            failures += 1
            delay = 0.0
            with self._guess_mutex:
                if isinstance(error, DeadlineExceeded):
                    timeouts += 1
                    self._leader.timed_out(address)
                elif not self._leader.follow(leader_hint(error), address):
                    self._leader.failed(address)
                    if failures % len(self._leader.addresses) == 0:
                        # Every replica said no (an election, or all down): back off a little.
                        delay = RETRY_POLICY.delay(error, failures // len(self._leader.addresses),
                                                   True, self._rng) or 0.0
                next_address = self._leader.address
            log.debug("%s: %s; trying %s", method, error, next_address)
            time.sleep(max(0.0, min(delay, deadline - self.clock.monotonic())))


class _NotServed(PreconditionFailed):
    """A replica answered a renewal method UNIMPLEMENTED: a lock server that predates it
    (client-internal: the renewer then renews lease by lease)."""


class _Renewal:
    """One renewal's calls (`method`: Renew or RenewMany, with `request`): first to the
    leader the client knows; once that has not answered within RENEW_LEADER_TIMEOUT_S, or
    refused, to every replica at once. A replica that refuses is asked again RENEW_RETRY_S
    later, one that does not answer once its call times out, so a frozen leader never holds
    up asking the others."""

    def __init__(self, client: LockClient, method: str, request: Any, deadline: float,
                 what: str) -> None:
        self._client = client
        self._clock = client.clock
        self._method = method
        self._request = request
        self._what = what  # what is renewed, for errors
        self._deadline = deadline
        self._answered: queue.Queue[Any] = queue.Queue()
        self._inflight: dict[Any, tuple[str, float]] = {}  # call -> (address, sent)
        self._due: dict[str, float] = {}  # address -> when to ask it (again)
        self._fan_out_at = self._clock.monotonic() + RENEW_LEADER_TIMEOUT_S

    def run(self) -> tuple[str, float, Any]:
        """The address that renewed, when its request was sent, and its reply."""
        answered = self._ask_leader()
        if answered is not None:
            return answered
        while True:
            now = self._clock.monotonic()
            if now >= self._deadline:
                raise DeadlineExceeded(f"{self._what}: no renewal before the claim "
                                       "deadline")
            if now >= self._fan_out_at:
                self._fan_out_at = float("inf")
                for address in self._client._leader.addresses:
                    self._due.setdefault(address, now)
            for address, at in list(self._due.items()):
                if at <= now and not self._asking(address):
                    del self._due[address]
                    self._send(address, RENEW_ROUND_TIMEOUT_S)
            # (A replica asked already is asked again only once its call is done.)
            wake_at = min([self._deadline, self._fan_out_at,
                           *(at for address, at in self._due.items()
                             if not self._asking(address))])
            try:
                call = self._answered.get(timeout=max(0.0, wake_at - now))
            except queue.Empty:
                continue
            won = self._settle(call)
            if won is not None:
                return won

    def _ask_leader(self) -> tuple[str, float, Any] | None:
        """The first call, to the leader the client knows, blocking for at most
        RENEW_LEADER_TIMEOUT_S: (address, sent, reply) if it renewed, else None, and everyone is
        asked at once (`_refused`). Blocking, not a future: a future's call on an idle
        channel starts a gRPC thread for it (issue 29: every renewal of every lease did),
        and a healthy leader answers from memory in milliseconds."""
        address = self._client._leader.address
        sent = self._clock.monotonic()
        timeout_s = min(RENEW_LEADER_TIMEOUT_S, max(0.0, self._deadline - sent))
        try:
            reply = getattr(self._client._stub(address), self._method)(self._request,
                                                                        timeout=timeout_s)
        except grpc.RpcError as exc:
            self._refused(address, exc)
            return None
        return address, sent, reply

    def _settle(self, call: Any) -> tuple[str, float, Any] | None:
        address, sent = self._inflight.pop(call)
        try:
            reply = call.result()
        except grpc.RpcError as exc:
            self._refused(address, exc)
            return None
        return address, sent, reply

    def _refused(self, address: str, exc: grpc.RpcError) -> None:
        """`address` did not renew: ask every replica now, the one it names as leader and
        (again) itself among them; raise what retrying cannot help."""
        if getattr(exc, "code", lambda: None)() == grpc.StatusCode.UNIMPLEMENTED:
            raise _NotServed(f"{address} does not serve {self._method}") from None
        error = rpc.from_rpc_error(exc)
        if not isinstance(error, RETRYABLE):
            raise error from None
        now = self._clock.monotonic()
        self._fan_out_at = min(self._fan_out_at, now)  # refused: ask everyone now
        hint = leader_hint(error)
        if hint and hint != address:
            self._due[hint] = now
        timed_out = isinstance(error, DeadlineExceeded)
        self._due.setdefault(address, now if timed_out else now + RENEW_RETRY_S)

    def _asking(self, address: str) -> bool:
        return any(asked == address for asked, _ in self._inflight.values())

    def _send(self, address: str, timeout_s: float) -> None:
        sent = self._clock.monotonic()
        timeout_s = min(timeout_s, max(0.0, self._deadline - sent))
        call = getattr(self._client._stub(address), self._method).future(self._request,
                                                                        timeout=timeout_s)
        self._inflight[call] = (address, sent)
        call.add_done_callback(self._answered.put)

    def cancel(self) -> None:
        for call in list(self._inflight):
            call.cancel()


class Lease:
    """A granted lock (or session) that its client renews until released or lost."""

    def __init__(self, client: LockClient, name: str | None, token: int, ttl_s: float,
                 sent: float, on_lost: Callable[[Lease], None] | None) -> None:
        self.name = name
        self.token = token
        self.ttl_s = ttl_s
        self.lost = threading.Event()  # set when the claim ended other than by release()
        self._client = client
        self._clock = client.clock
        self._margin_s = lease_margin_s(ttl_s)
        self._deadline = sent + ttl_s - self._margin_s
        self._renew_every_s = ttl_s * RENEW_FRACTION
        self._next_renew = sent + self._renew_every_s  # the renewer's schedule (its own)
        self._on_lost = on_lost
        self._ended = threading.Event()
        self._mutex = threading.Lock()

    def __repr__(self) -> str:
        return f"Lease({self.name!r}, token={self.token}, valid={self.valid()})"

    def valid(self) -> bool:
        """True while the holder may act as the owner: not released, not lost, not past the
        claim deadline (which comes before the service could expire the lease)."""
        return not self._ended.is_set() and self._clock.monotonic() < self._deadline

    def remaining_s(self) -> float:
        return max(0.0, self._deadline - self._clock.monotonic()) if self.valid() else 0.0

    def release(self) -> None:
        """Stop claiming at once, then end the lease on the service (best effort: if that
        fails, it expires after its TTL)."""
        with self._mutex:
            self._ended.set()
        self._client._forget(self)
        try:
            self._client._call("Release", pb.ReleaseRequest(token=self.token))
        except StampError as exc:
            log.warning("release of lease %d failed (%s); it will expire", self.token, exc)

    def renew(self) -> None:
        """Renew at once (the client's renewer also renews on its own schedule). Raises
        NotFound, and the lease is lost, if the service has already ended it."""
        if self._ended.is_set():
            raise NotFound(f"lease {self.token} has ended here")
        try:
            sent = self._client._renew(self.token, self.ttl_s, self._deadline)
        except NotFound:
            self._lose("the service has ended it")
            raise
        self._renewed(sent)

    def _renewed(self, sent: float) -> None:
        with self._mutex:
            if not self._ended.is_set():
                self._deadline = max(self._deadline, sent + self.ttl_s - self._margin_s)

    def wait_ended(self, timeout_s: float | None = None) -> bool:
        """Block until the lease is released or lost; False on timeout."""
        return self._ended.wait(timeout_s)

    def _start(self) -> None:
        if self._clock.monotonic() >= self._deadline:
            self._lose("granted too late to claim")
            return
        self._client._renewer.wake()

    def _lose(self, reason: str, *, notify_apart: bool = False) -> None:
        """Stop claiming, then run on_lost: here, or with `notify_apart` (the renewer) on a
        thread of its own, so that a slow callback holds up no other lease's renewal."""
        with self._mutex:
            if self._ended.is_set():
                return
            self._ended.set()
            self.lost.set()
        self._client._forget(self)
        log.warning("lease %d (%s) lost: %s", self.token, self.name, reason)
        if self._on_lost is None:
            return
        if notify_apart:
            threading.Thread(target=self._notify_lost, daemon=True,
                             name=f"lease-lost-{self.token}").start()
        else:
            self._notify_lost()

    def _notify_lost(self) -> None:
        assert self._on_lost is not None
        try:
            self._on_lost(self)
        except Exception:
            log.exception("on_lost callback of lease %d failed", self.token)

    def _due_at(self) -> float:
        """When the renewer must look at this lease next: its renewal, or its deadline."""
        return min(self._next_renew, self._deadline)


def renewal_batch(leases: Sequence[Lease], now: float) -> list[Lease]:
    """The leases to renew together at `now`: none before the first is due; then it and
    every lease that would fall due within its renew period, early (module docstring), at
    most LEASES_MAX (a RenewMany's bound)."""
    first = min(leases, key=lambda lease: lease._next_renew)
    if first._next_renew > now:
        return []
    horizon = now + first._renew_every_s
    due = sorted((lease for lease in leases if lease._next_renew <= horizon),
                 key=lambda lease: lease._next_renew)
    return due[:limits.LEASES_MAX]


class _Renewer:
    """A client's one renewal thread (module docstring): a daemon while the client holds a
    lease, ended when it holds none and started again by the next. It waits on an Event for
    the next due time, woken early when a lease is added or ended."""

    def __init__(self, client: LockClient) -> None:
        self._client = client
        self._clock = client.clock
        self._mutex = threading.Lock()  # for _thread; taken before the client's
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._batched = True  # False once the service answered RenewMany UNIMPLEMENTED

    def wake(self) -> None:
        """A lease was added or ended: look again, starting the thread if it had ended."""
        with self._mutex:
            if self._thread is None and self._client._held():
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name=f"lease-renewer-{self._client.holder}")
                self._thread.start()
        self._wake.set()

    def _leases(self) -> list[Lease]:
        """The client's leases; none: the thread ends (`wake` starts another)."""
        with self._mutex:
            leases = self._client._held()
            if not leases:
                self._thread = None
            return leases

    def _run(self) -> None:
        while True:
            self._wake.clear()  # before looking: a wake from now on is not missed
            leases = self._leases()
            if not leases:
                return
            try:
                self._look(leases)
            except Exception:  # the leases must not go unrenewed for a bug's sake
                log.exception("lease renewer failed; going on")
                self._wake.wait(RENEW_RETRY_S)

    def _look(self, leases: list[Lease]) -> None:
        """Lose what is past its claim deadline; renew what is due, or wait until it is."""
        now = self._clock.monotonic()
        live = [lease for lease in leases if not self._lapsed(lease, now)]
        if not live:
            return
        batch = renewal_batch(live, now)
        if not batch:
            self._wake.wait(min(lease._due_at() for lease in live) - now)
        elif len(batch) == 1 or not self._batched:
            for lease in batch:
                self._round([lease])
        else:
            self._round(batch)

    @staticmethod
    def _lapsed(lease: Lease, now: float) -> bool:
        if lease._ended.is_set():
            return True
        if now >= lease._deadline:
            lease._lose("not renewed before its claim deadline", notify_apart=True)
            return True
        return False

    def _round(self, batch: list[Lease]) -> None:
        """Renew `batch` in one call and schedule each lease's next renewal."""
        try:
            sent, ended = self._send(batch)
        except _NotServed as exc:  # still due: renewed lease by lease at the next look
            log.info("%s; renewing lease by lease", exc)
            self._batched = False
            return
        except DeadlineExceeded:  # the next look loses those past their deadline; the
            return                # others, still due, are asked again at once
        except StampError as exc:
            log.info("renewal of leases %s failed: %s; retrying",
                     [lease.token for lease in batch], exc)
            retry_at = self._clock.monotonic() + RENEW_RETRY_S
            for lease in batch:
                lease._next_renew = max(lease._next_renew, retry_at)
            return
        for lease in batch:
            if lease.token in ended:
                lease._lose("the service has ended it", notify_apart=True)
            else:
                lease._renewed(sent)
                lease._next_renew = sent + lease._renew_every_s

    def _send(self, batch: list[Lease]) -> tuple[float, set[int]]:
        """(when the renewing request was sent, tokens the service had ended), by Renew for
        one lease, else RenewMany; until the earliest claim deadline among them."""
        deadline = min(lease._deadline for lease in batch)
        if len(batch) > 1:
            return self._client._renew_many(batch, deadline)
        lease = batch[0]
        try:
            return self._client._renew(lease.token, lease.ttl_s, deadline), set()
        except NotFound:
            return 0.0, {lease.token}


def _token(lease: Lease | None) -> int:
    return 0 if lease is None else lease.token


def _request_id() -> str:
    return uuid.uuid4().hex
