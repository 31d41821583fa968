"""The lock service's gRPC servicer: requests in, commands into the Raft log, results out.

Contract:
- Only the leader serves (others raise NotLeader naming the leader when known), except
  Status. Reads go through the log, or pass a read index first (`_read_index`) when they
  answer from the local state (WaitFree's "free", ListLeases): never from a deposed
  leader's stale state. Every state-changing command is stamped with the leader's time
  (leader_time.py) just before it is handed to Raft, on the event loop, so stamps rise in
  log order.
- A new leader first commits a Barrier carrying its term; until it is applied (all earlier
  leaders' commands with it) the leader stamps nothing, and after it the state refuses
  commands stamped in older terms. That is what keeps leader time from running ahead.
- A reply is sent only after the command is applied here, hence durable on a majority.
  A command not applied within PROPOSE_TIMEOUT_S fails with Unavailable: its outcome is
  unknown, and a retry with the same request id is safe (the state deduplicates).
- Get and List are answered from the leader's state while it holds a read lease
  (`LockReplica.read_leased`, shorter than the minimum election timeout, which PreVote
  makes the least time before any successor), else through the log. So is an Acquire of a
  lock held by a lease whose time is not up (answered Held), unless its request id was
  seen before (`LockReplica.held_leased`).
- Renewals are answered from the leader's memory (lock_service/lessor.py, which argues why
  a holder can rely on them), without a Raft write, while the leader holds its leader lease
  (`LockReplica.leader_lease_holds`); otherwise, or to change a lease's TTL, through the log.
  RenewMany renews many leases in one call, each exactly as Renew would alone, all at one
  leader time and with no await between the leader-lease check and their outcomes.
  A new leader promotes its lessor right after its Barrier, before it answers anything:
  every lease then has at least ttl + PROMOTE_EXTEND_S to go.
- While leader, the servicer logs an Expire whenever a lease's time is up in its lessor, so
  leases expire (and their locks free up, their keys vanish) without other traffic; and
  before any command it stamps, so that command sees every lease whose time is up by its
  stamp ended (a fenced write of a lapsed holder is refused, a lapsed lock is granted).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable

from grpc import aio
from pysyncobj import FAIL_REASON

from common import faults
from common.clock import Clock, SystemClock
from common.errors import (
    ERRORS_BY_NAME,
    InvalidArgument,
    NotFound,
    StampError,
    Throttled,
    Unavailable,
)
from common.proto import lock_service_pb2 as pb
from common.proto import lock_service_pb2_grpc as pb_grpc
from common.read_index import ReadIndex
from common.rpc import rpc_errors
from lock_service import commands as c
from lock_service import limits
from lock_service.leader_hint import not_leader
from lock_service.leader_time import LeaderTime
from lock_service.lessor import RenewOutcome
from lock_service.replica import LockReplica
from lock_service.state import LockState, problem_with

log = logging.getLogger(__name__)

PROPOSE_TIMEOUT_S = 1.5
# The expiry pass runs when the lessor's next lease is due, at least EXPIRY_CHECK_MIN_S
# apart (`expiry_wait`), and at once when something may have brought the next expiry nearer
# or made this replica leader or follower: a lease granted (`LockReplica.on_lease_granted`;
# renewals only push expiries back), this replica taking office (`_anchor` promotes the
# lessor) or changing role (`DurableReplica.on_role_change`). Nothing else changes what a
# pass would do, so between those it sleeps up to EXPIRY_CHECK_MAX_S, not 0.1 s on every
# replica (issue 29: an idle lock service woke 30 times a second for it, 150 before that).
EXPIRY_CHECK_MIN_S = 0.02
EXPIRY_CHECK_MAX_S = 1.0
# A long-poll wakes when its lock frees up or this replica's role changes (a deposed
# leader's waiters move on at once: `_role_changed_on_tick_thread`), and otherwise re-checks
# only this often, as a backstop: every 0.25 s, a partition manager's standby waiting for the
# leader lock was the most frequent wake-up of an idle lock leader's loop (issue 29).
WAIT_RECHECK_S = 1.0
ANNOUNCE_RETRY_S = 0.2
NOT_LEADER_REASONS = (FAIL_REASON.NOT_LEADER, FAIL_REASON.LEADER_CHANGED,
                      FAIL_REASON.MISSING_LEADER, FAIL_REASON.DISCARDED)


class LockServicer(pb_grpc.LockServiceServicer):
    def __init__(self, replica: LockReplica, name: str, grpc_address: str,
                 clock: Clock | None = None) -> None:
        self._replica = replica
        self._name = name
        self._grpc_address = grpc_address
        self._leader_time = LeaderTime(clock or SystemClock())
        self._anchoring: asyncio.Future[None] | None = None
        self._anchoring_term: int | None = None
        self._waiters: dict[str, asyncio.Event] = {}
        self._waiting: dict[str, int] = {}
        self._loop = asyncio.get_running_loop()
        self._tasks: list[asyncio.Task[None]] = []
        # A read through the log (an empty listing) that concurrent local reads share.
        self._read_index_batcher = ReadIndex(lambda: self._read(c.ListKeys("", 0)))
        self._expiry_due = asyncio.Event()  # set: the expiry pass runs now (EXPIRY_CHECK_*)
        replica.on_freed(self._freed_on_tick_thread)
        replica.on_lease_granted(self._wake_expiry_on_tick_thread)
        replica.on_role_change(self._role_changed_on_tick_thread)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._expire_leases()),
                       asyncio.create_task(self._announce())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # --- Raft plumbing ---------------------------------------------------------------------

    async def _submit(self, command: c.Command) -> c.Result:
        future: asyncio.Future[tuple[c.Result, int]] = self._loop.create_future()

        def settle(result: c.Result, error: int) -> None:  # on pysyncobj's tick thread
            with contextlib.suppress(RuntimeError):  # the loop is closed: shutting down
                self._loop.call_soon_threadsafe(_settle, future, result, error)

        self._replica.propose(command, settle)
        try:
            result, error = await asyncio.wait_for(future, PROPOSE_TIMEOUT_S)
        except TimeoutError:
            raise Unavailable(f"not applied within {PROPOSE_TIMEOUT_S}s; outcome unknown "
                              "(a retry with the same request id is safe)") from None
        if error in NOT_LEADER_REASONS:
            raise self._not_leader()
        if error != FAIL_REASON.SUCCESS:
            raise Unavailable(f"raft did not take the command (reason {error})")
        return result

    def _not_leader(self) -> StampError:
        return not_leader(self._replica.grpc_address_of(self._replica.leader_address()))

    def _leader_term(self) -> int:
        if not self._replica.is_leader():
            self._resign()
            raise self._not_leader()
        return self._replica.raftCurrentTerm

    def _resign(self) -> None:
        if self._leader_time.term is not None:
            self._leader_time.resign()
            self._replica.demote()

    async def _leader_now(self) -> float:
        term = self._leader_term()
        if self._leader_time.term != term:
            task = self._anchoring
            if task is None or self._anchoring_term != term:
                task = self._anchoring = asyncio.ensure_future(self._anchor(term))
                self._anchoring_term = term
            try:
                await asyncio.shield(task)
            finally:
                if self._anchoring is task and task.done() and (
                        task.cancelled() or task.exception() is not None):
                    self._anchoring = None
        if self._leader_time.term != self._leader_term():
            raise self._not_leader()
        return self._leader_time.now()

    async def _anchor(self, term: int) -> None:
        result = await self._submit(c.Barrier(term))
        assert isinstance(result, c.Now)
        if self._leader_term() != term:
            raise self._not_leader()
        # Promote first: once the time is anchored, renewals are answered from the lessor.
        self._replica.promote(term, limits.PROMOTE_EXTEND_S)
        self._leader_time.anchor(term, result.now)
        self._expiry_due.set()
        log.info("leader of term %d: time anchored at %.3f, leases extended by %.1fs", term,
                 result.now, limits.PROMOTE_EXTEND_S)

    async def _propose(self, make: Callable[[float], c.Command]) -> c.Result:
        await faults.apoint("lock.before_propose")
        at = await self._leader_now()
        # Stamped with time and term, then handed to Raft with no await in between, behind
        # an Expire of every lease whose time is up by that stamp.
        term = self._leader_time.term
        assert term is not None
        command = make(at)._replace(term=term)
        problem = problem_with(command)
        if problem:
            raise InvalidArgument(problem)
        due = self._replica.due_leases(term, at)
        if due:
            self._replica.propose(c.Expire(at, due, term), _ignore_result)
        return _checked(await self._submit(command))

    async def _read(self, command: c.Get | c.ListKeys) -> c.Result:
        """A Get or ListKeys: from this leader's state while its read lease holds (no Raft
        write: most of an idle stamp's lock-service traffic is partition managers reading),
        else through the log."""
        term = self._leader_term()
        problem = problem_with(command)
        if problem:
            raise InvalidArgument(problem)
        await self._leader_now()  # a new leader's Barrier first: its predecessors' writes
        # Wrapped: a Get of a missing key answers None, which is not "read through the log".
        found = self._replica.read_leased(term, lambda state: (state.look(command),))
        if found is not None:
            return _checked(found[0])
        return _checked(await self._submit(command))

    async def _held(self, acquire: c.Acquire) -> tuple[str, int] | None:
        """(holder, token) when `acquire` is answered Held from this leader's state under
        its read lease (`LockReplica.held_leased`), else None: through the log."""
        if problem_with(acquire):
            return None  # the log's path refuses it with the reason
        at = await self._leader_now()  # a new leader's Barrier and promotion first
        term = self._leader_time.term
        assert term is not None
        return self._replica.held_leased(term, acquire.name, acquire.request_id, at)

    async def _read_index(self) -> None:
        """Before an answer read from the local state: a read through the log (an empty
        listing, shared by concurrent callers: common/read_index.py) that commits only while
        this replica leads a majority, and is applied here after everything committed before
        it. A leader deposed without noticing fails here instead of answering stale state."""
        await self._read_index_batcher.confirm()

    # --- background work ---------------------------------------------------------------------

    async def _expire_leases(self) -> None:
        wait_s = EXPIRY_CHECK_MIN_S
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._expiry_due.wait(), wait_s)
            self._expiry_due.clear()
            wait_s = EXPIRY_CHECK_MAX_S
            if not self._replica.is_leader():
                self._resign()
                continue
            try:
                at = await self._leader_now()  # also anchors a new leader before it is asked
                term = self._leader_time.term or 0
                due = self._replica.due_leases(term, at)
                if due:
                    await self._submit(c.Expire(at, due, term))
                    at = await self._leader_now()
                wait_s = expiry_wait(at, self._replica.next_expiry(term))
            except StampError as exc:
                log.debug("lease expiry pass: %s", exc)
            except Exception:
                log.exception("lease expiry pass failed")

    async def _announce(self) -> None:
        command = c.Announce(self._replica.raft_address, self._grpc_address)
        while True:
            try:
                await self._submit(command)
                log.info("announced %s -> %s", command.raft_address, command.grpc_address)
                return
            except StampError:
                await asyncio.sleep(ANNOUNCE_RETRY_S)

    def _role_changed_on_tick_thread(self, _leader: bool) -> None:
        """Both background work and long-polls look at the role again."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: shutting down
            self._loop.call_soon_threadsafe(self._wake_everyone)

    def _wake_everyone(self) -> None:
        self._expiry_due.set()
        self._wake(list(self._waiters))

    def _wake_expiry_on_tick_thread(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: shutting down
            self._loop.call_soon_threadsafe(self._expiry_due.set)

    def _freed_on_tick_thread(self, names: list[str]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: shutting down
            self._loop.call_soon_threadsafe(self._wake, names)

    def _wake(self, names: list[str]) -> None:
        for name in names:
            event = self._waiters.pop(name, None)
            if event is not None:
                event.set()

    # --- RPCs ------------------------------------------------------------------------------

    @rpc_errors
    async def Acquire(self, request: pb.AcquireRequest,
                      context: aio.ServicerContext) -> pb.AcquireReply:
        request_id = request.request_id or _new_request_id()
        held = await self._held(c.Acquire(0.0, request_id, request.name, request.holder,
                                          request.ttl_s))
        if held is not None:
            return pb.AcquireReply(granted=False, holder=held[0], holder_token=held[1])
        result = await self._propose(lambda at: c.Acquire(
            at, request_id, request.name, request.holder, request.ttl_s))
        if isinstance(result, c.Granted):
            return pb.AcquireReply(granted=True, token=result.token)
        assert isinstance(result, c.Held), result
        return pb.AcquireReply(granted=False, holder=result.holder, holder_token=result.token)

    @rpc_errors
    async def WaitFree(self, request: pb.WaitFreeRequest,
                       context: aio.ServicerContext) -> pb.WaitFreeReply:
        self._leader_term()
        if problem_with(c.Acquire(0.0, "", request.name, "-", limits.TTL_MIN_S)):
            raise InvalidArgument("bad lock name")
        if sum(self._waiting.values()) >= limits.WAITERS_MAX:
            raise Throttled(f"{limits.WAITERS_MAX} long-polls already waiting", 1.0)
        deadline = self._loop.time() + min(max(request.timeout_s, 0.0), limits.WAIT_MAX_S)
        name = request.name
        self._waiting[name] = self._waiting.get(name, 0) + 1
        try:
            while True:
                if self._replica.read(lambda state: state.holder_of(name)) is None:
                    # Free here; free for everyone only if no newer leader granted it.
                    await self._read_index()
                    if self._replica.read(lambda state: state.holder_of(name)) is None:
                        return pb.WaitFreeReply(free=True)
                remaining = deadline - self._loop.time()
                if remaining <= 0:
                    return pb.WaitFreeReply(free=False)
                event = self._waiters.setdefault(name, asyncio.Event())
                self._leader_term()  # a role change before the line above woke no event
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), min(remaining, WAIT_RECHECK_S))
                self._leader_term()
        finally:
            self._waiting[name] -= 1
            if not self._waiting[name]:
                del self._waiting[name]
                self._waiters.pop(name, None)

    @rpc_errors
    async def OpenSession(self, request: pb.OpenSessionRequest,
                          context: aio.ServicerContext) -> pb.AcquireReply:
        request_id = request.request_id or _new_request_id()
        result = await self._propose(lambda at: c.OpenSession(
            at, request_id, request.holder, request.ttl_s))
        assert isinstance(result, c.Granted), result
        return pb.AcquireReply(granted=True, token=result.token)

    @rpc_errors
    async def Renew(self, request: pb.RenewRequest,
                    context: aio.ServicerContext) -> pb.RenewReply:
        problem = problem_with(c.Renew(0.0, request.token, request.ttl_s))
        if problem:
            raise InvalidArgument(problem)
        if await self._renew_all([request]):
            raise NotFound(f"lease {request.token} has ended")
        return pb.RenewReply()

    @rpc_errors
    async def RenewMany(self, request: pb.RenewManyRequest,
                        context: aio.ServicerContext) -> pb.RenewManyReply:
        """Every entry exactly as Renew alone would answer it (NotFound: in `ended`)."""
        return pb.RenewManyReply(ended=await self._renew_all(_checked_renewals(request)))

    async def _renew_all(self, leases: list[pb.RenewRequest]) -> list[int]:
        """Renew `leases` (checked), all at one leader time: the same `at` a Renew of each
        token alone would be stamped with, checked and answered from memory in one go, so
        lessor.py's argument holds entry by entry; those memory cannot answer go through
        the log one by one. Returns the tokens the service had ended."""
        at = await self._leader_now()  # a new leader anchors (and promotes) first
        term = self._leader_time.term
        assert term is not None
        # No await from here to the outcomes: the leader lease is checked at each renewal.
        outcomes = [self._replica.renew_in_memory(term, lease.token, lease.ttl_s, at)
                    for lease in leases]
        ended = [lease.token for lease, outcome in zip(leases, outcomes, strict=True)
                 if outcome is RenewOutcome.ENDED]
        for lease, outcome in zip(leases, outcomes, strict=True):
            if outcome is RenewOutcome.THROUGH_LOG and not await self._renew_in_log(lease):
                ended.append(lease.token)
        return ended

    async def _renew_in_log(self, lease: pb.RenewRequest) -> bool:
        """Renew one lease through the log (memory could not answer): False if the service
        had ended it (NotFound); any other failure fails the whole call."""
        try:
            result = await self._propose(lambda at: c.Renew(at, lease.token, lease.ttl_s))
        except NotFound:
            return False
        assert isinstance(result, c.Renewed), result
        return True

    @rpc_errors
    async def Release(self, request: pb.ReleaseRequest,
                      context: aio.ServicerContext) -> pb.ReleaseReply:
        result = await self._propose(lambda at: c.Release(at, request.token))
        assert isinstance(result, c.Released), result
        return pb.ReleaseReply(existed=result.existed)

    @rpc_errors
    async def Get(self, request: pb.GetRequest, context: aio.ServicerContext) -> pb.GetReply:
        result = await self._read(c.Get(request.key))
        if result is None:
            return pb.GetReply(found=False)
        assert isinstance(result, c.Value), result
        return pb.GetReply(found=True, value=result.value, version=result.version)

    @rpc_errors
    async def Put(self, request: pb.PutRequest, context: aio.ServicerContext) -> pb.PutReply:
        request_id = request.request_id or _new_request_id()
        expected = request.expected_version if request.HasField("expected_version") else None
        result = await self._propose(lambda at: c.Write(
            at, request_id, request.key, request.value, expected, request.lease_token,
            request.fence_token))
        if isinstance(result, c.Written):
            return pb.PutReply(written=True, version=result.version)
        assert isinstance(result, c.Mismatch), result
        return pb.PutReply(written=False, version=result.version)

    @rpc_errors
    async def Delete(self, request: pb.DeleteRequest,
                     context: aio.ServicerContext) -> pb.DeleteReply:
        request_id = request.request_id or _new_request_id()
        expected = request.expected_version if request.HasField("expected_version") else None
        result = await self._propose(lambda at: c.Delete(
            at, request_id, request.key, expected, request.fence_token))
        if isinstance(result, c.Deleted):
            return pb.DeleteReply(deleted=result.existed)
        assert isinstance(result, c.Mismatch), result
        return pb.DeleteReply(deleted=False, version=result.version)

    @rpc_errors
    async def List(self, request: pb.ListRequest, context: aio.ServicerContext) -> pb.ListReply:
        result = await self._read(c.ListKeys(request.prefix,
                                             request.limit or limits.LIST_KEYS_MAX,
                                             request.with_values))
        assert isinstance(result, c.Keys), result
        return pb.ListReply(keys=list(result.keys),
                            values=[value for value, _ in result.values],
                            versions=[version for _, version in result.values])

    @rpc_errors
    async def ListLeases(self, request: pb.ListLeasesRequest,
                         context: aio.ServicerContext) -> pb.ListLeasesReply:
        await self._read_index()
        now = await self._leader_now()
        expiries = self._replica.lease_expiries(self._leader_time.term or 0) or {}

        def listing(state: LockState) -> list[pb.LeaseInfo]:
            return [pb.LeaseInfo(token=token, holder=lease.holder, lock=lease.lock or "",
                                 ttl_s=lease.ttl_s,
                                 expires_in_s=expiries.get(token, lease.expires_at) - now,
                                 keys=len(lease.keys))
                    for token, lease in sorted(state.leases.items())]
        return pb.ListLeasesReply(leases=self._replica.read(listing))

    @rpc_errors
    async def Status(self, request: pb.StatusRequest,
                     context: aio.ServicerContext) -> pb.StatusReply:
        raft = self._replica.raft_status()
        digest, applied, now, leases, keys = self._replica.read(lambda state: (
            state.digest() if request.with_digest else "", state.applied, state.now,
            len(state.leases), len(state.kv)))
        leader = (self._grpc_address if raft["role"] == "leader"
                  else self._replica.grpc_address_of(raft["leader"]) or "")
        return pb.StatusReply(
            name=self._name, raft_address=self._replica.raft_address, role=raft["role"],
            leader=leader, term=raft["term"], commit_index=raft["commit_index"],
            last_applied=raft["last_applied"], applied=applied, digest=digest,
            state_time=now, leases=leases, keys=keys, journal_syncs=raft["journal_syncs"])


def expiry_wait(now: float, next_expiry: float | None) -> float:
    """How long the expiry pass sleeps at leader time `now`, the lessor's earliest expiry
    being `next_expiry` (None: no lease): until then, within [EXPIRY_CHECK_MIN_S,
    EXPIRY_CHECK_MAX_S] (module constants say why)."""
    if next_expiry is None:
        return EXPIRY_CHECK_MAX_S
    return min(EXPIRY_CHECK_MAX_S, max(EXPIRY_CHECK_MIN_S, next_expiry - now))


def _checked_renewals(request: pb.RenewManyRequest) -> list[pb.RenewRequest]:
    """RenewMany's entries, each valid as a Renew, at most LEASES_MAX of them (a client
    holds no more leases than the service grants); InvalidArgument otherwise."""
    if len(request.leases) > limits.LEASES_MAX:
        raise InvalidArgument(f"{len(request.leases)} leases: at most {limits.LEASES_MAX}")
    for lease in request.leases:
        problem = problem_with(c.Renew(0.0, lease.token, lease.ttl_s))
        if problem:
            raise InvalidArgument(f"lease {lease.token}: {problem}")
    return list(request.leases)


def _settle(future: asyncio.Future[tuple[c.Result, int]], result: c.Result, error: int) -> None:
    if not future.done():
        future.set_result((result, error))


def _ignore_result(result: c.Result, error: int) -> None:
    """An Expire logged ahead of a command: its outcome shows in the state, and the expiry
    pass logs it again if it did not get in."""


def _checked(result: c.Result) -> c.Result:
    if isinstance(result, c.Rejected):
        raise ERRORS_BY_NAME.get(result.error, InvalidArgument)(result.message)
    return result


def _new_request_id() -> str:
    return uuid.uuid4().hex
