"""CURP's fast path at a front end (DESIGN §11; partition_layer/curp.py step 3, and step 4's
version hints): a write that commutes goes to its partition's owner and, at once, to the
owner's three witnesses; it is acknowledged after one round trip when the owner answered it
before syncing (`Response.speculative`) and all three witnesses recorded it.

Contracts:
- Inert unless `CurpSettings.enabled`: the front end then never calls `take`, and
  `outgoing` only clears internal answer fields (set only on answers to hinted requests,
  which it then never sends): the front end behaves as without this module.
- `take(request, sdk_id, nbytes, address, reply)`, for a request checked, admitted, its
  deadline set and its auth cleared, about to be forwarded to the owner at `address`:
  False — not a fast write (`curp.footprint_of` None, or over `fast_bytes_max`), a key of
  it written within `recent_key_ms` (`RecentKeys`: a record of the last write is likely
  still held, and the new one would be refused; noted again, so a key written in a loop
  stays on the plain path), or no map — and the caller forwards it as ever; True — this
  path forwards it and calls `reply` exactly once, with the SDK's id, never with an
  internal field (`clear_internal`).
- A fast write carries `version_hint`, this front end's hybrid clock (`HybridClock`). Its
  partition's witnesses are known or not (`WitnessSets`, learned from `Response.witnesses`
  and `Response.epoch` of answers to hinted writes). Unknown: `curp_epoch` 0 and no records
  (the owner answers when durable, with its witnesses). Known: `curp_epoch` is their epoch
  and a `WitnessRecord` of the request as forwarded goes to each witness (witness_calls.py)
  — unless it has no deadline, too many records are in flight, or a witness of the set is
  suspect (its last call failed: witness_calls.py `usable`): then as if unknown.
- Acknowledged: a non-speculative answer, as it is; a speculative one once every witness
  answered ACCEPTED for a record of the answer's epoch. A refusal, a failed Record call, a
  witness silent past `witness_timeout_ms` (one timer per write), or a speculative answer
  with no records at its epoch: a `SyncOp(epoch, lsn)` on the same session, and the answer
  once it succeeds, else Unavailable (the write may or may not have happened).
- An error answer is final, as ever, except (curp.py step 3, second rule) once records went
  out: the owner's NotOwner is retried through the front end's retry path (as ever), and an
  answer that says "not executed" — the owner's Throttled or DeadlineExceeded, or any of the
  three as the retry's last word — becomes Unavailable, "may still happen": a recovering
  owner executes a witness's record whatever was answered.
- Retries (NotOwner, a broken stream, no answer in time) go through the front end's retry
  path with `version_hint` and `curp_epoch` cleared: the retry takes the sync path, so no
  answer of it is speculative (it may reach another owner, or a partition born of a split
  whose witnesses never saw the write) and the front end's plain path may pass it on.
- `counters`: plain ints (`CurpCounters`) a bench reads the fast path's share from.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from common.errors import DeadlineExceeded, NotOwner, StampError, Throttled, Unavailable
from common.proto import partition_pb2 as pb
from common.proto import witness_pb2 as wpb
from frontend.forward import ForwardingClient
from frontend.witness_calls import WitnessCalls
from partition_layer.curp import Footprint, footprint_of
from partition_layer.partition_map import PartitionMap
from partition_layer.requests import error_response, route_key
from partition_layer.session import Waiter

log = logging.getLogger(__name__)

Reply = Callable[[pb.Response], None]
# The front end's retry path: forward (request, sdk_id, nbytes) again after a fresh map.
Retry = Callable[[pb.Request, int, int, Reply], None]

WITNESSES = 3  # an owner's witnesses, in three fault domains (curp.py step 2)
# Errors that say "not executed": after records went out, not a definite refusal.
NOT_EXECUTED = frozenset({NotOwner.__name__, Throttled.__name__, DeadlineExceeded.__name__})
ACCEPTED = wpb.Verdict.Value("ACCEPTED")
CONFLICT = wpb.Verdict.Value("CONFLICT")


@dataclass(frozen=True)
class CurpSettings:
    """CURP at a front end (to move into common/config.py's FrontEndLimits later).

    `witness_timeout_ms`: how long a speculative answer waits for the witnesses' verdicts
    before it falls back to a sync — a little above a witness's group commit, far below a
    commit log's sync, else the fallback costs more than the sync path would have.
    `witness_call_timeout_ms`: a Record RPC's own deadline (its writes fell back long
    before; this only bounds what a hung call holds). The per-call bounds match the extent
    node's (ExtentNodeLimits.witness_call_records_max, and well under its message limit)."""

    enabled: bool = False
    witness_timeout_ms: int = 50
    witness_call_timeout_ms: int = 1000
    witness_call_records_max: int = 1024
    witness_call_bytes_max: int = 8 * 1024 * 1024
    # Records queued or in flight to witnesses, all together: past it writes keep the sync
    # path (about 20,000 writes' worth at three records each).
    witness_records_in_flight_max: int = 60_000
    # A witness whose Record call failed gets no records for this long (witness_calls.py
    # `usable`): its partitions' writes keep the sync path instead of each waiting out
    # witness_timeout_ms and a sync.
    witness_suspect_ms: int = 5000
    partitions_cached_max: int = 65_536  # witness sets and (account, name) -> partition id
    # A write to a key this front end wrote this recently (fast or plain) takes the plain
    # path: the owner drops the last write's record only once it is durable, and a record
    # still held would refuse the new one (a sync: slower than the plain path). One log
    # appended to in a loop so costs what it costs without CURP (`RecentKeys`); noting only
    # the fast writes let every other write of such a loop try the fast path and fail.
    recent_key_ms: int = 10
    # ... and one a witness refused as conflicting, this much longer: its owner drops a
    # record only after the block is durable and a Drop went round, which under load
    # takes longer than a writer takes to come back (32 appenders of 100 records made a
    # conflict and a sync of most of their writes).
    conflict_hold_ms: int = 250
    recent_keys_max: int = 65_536
    # A write bigger than this takes the plain path: each of three witnesses would journal
    # it once more, and shipping it three more times costs more than the round trip saved
    # (32 appenders of 100 1 KiB records: 0.75 of CURP off with them on the fast path).
    fast_bytes_max: int = 32 * 1024


@dataclass
class CurpCounters:
    """What the fast path did, as plain ints (a bench's fast-path share: `fast_share`)."""

    fast: int = 0               # acknowledged on a speculative answer and 3 acceptances
    synced: int = 0             # the owner answered when durable (no witness needed)
    fallback_refused: int = 0   # a sync asked: a witness refused, or its call failed
    fallback_timeout: int = 0   # a sync asked: a witness silent past witness_timeout_ms
    fallback_unrecorded: int = 0  # a sync asked: speculative, but no records at its epoch
    fallback_acked: int = 0     # answered after the sync succeeded
    fallback_failed: int = 0    # the sync failed: answered Unavailable
    in_doubt: int = 0           # a "not executed" answer after records went out: Unavailable
    records_sent: int = 0       # witness records queued (three per recorded write)
    records_skipped: int = 0    # writes of known witnesses sent without records (no room,
                                # no deadline, a witness suspect)
    witness_sets_learned: int = 0

    def fast_share(self) -> float:
        """The share of answered fast writes acknowledged after one round trip."""
        answered = self.fast + self.synced + self.fallback_acked + self.fallback_failed
        return self.fast / answered if answered else 0.0


class RecentKeys:
    """Keys written within the last `window_s` (CurpSettings.recent_key_ms), by the front
    end's clock; at most `held_max`, the oldest half forgotten past it."""

    def __init__(self, window_s: float, held_max: int, now: Callable[[], float]) -> None:
        self.window_s = window_s
        self.held_max = held_max
        self.now = now
        self._at: dict[bytes, float] = {}  # in the order noted

    def clashes(self, keys: Iterable[bytes]) -> bool:
        since = self.now() - self.window_s
        return any(self._at.get(key, -math.inf) > since for key in keys)

    def note(self, keys: Iterable[bytes], hold_s: float = 0.0) -> None:
        """`keys` written now; `hold_s`: and count them as written that much later."""
        at = self.now() + hold_s
        for key in keys:
            if self._at.get(key, -math.inf) > at:
                continue  # held longer already
            self._at.pop(key, None)  # to the end: the dict stays in (near) time order
            self._at[key] = at
        if len(self._at) > self.held_max:
            for key in list(itertools.islice(self._at, len(self._at) // 2)):
                del self._at[key]


class HybridClock:
    """Version hints (curp.py step 4): µs of wall time, strictly increasing, and above every
    version observed (an ETag in an answer), so a front end whose clock is behind the
    partition's versions still hints above them once it has seen one."""

    def __init__(self, wall: Callable[[], float]) -> None:
        self._wall = wall
        self._last = 0

    def next(self) -> int:
        self._last = max(int(self._wall() * 1_000_000), self._last + 1)
        return self._last

    def observe(self, version: int) -> None:
        if version > self._last:
            self._last = version

    def observe_etag(self, etag: str) -> None:
        """An ETag's version (partition_layer/rows.py etag_of: '"%x"'); others ignored."""
        if len(etag) > 2 and etag[0] == '"' and etag[-1] == '"':
            with contextlib.suppress(ValueError):
                self.observe(int(etag[1:-1], 16))


@dataclass(frozen=True)
class WitnessSet:
    epoch: int
    addresses: tuple[str, ...]


class WitnessSets:
    """Per partition id, its owner's epoch and witnesses as its answers told them; bounded
    (past `max_entries` it starts over: a partition forgotten is learned at its next write)."""

    def __init__(self, max_entries: int) -> None:
        self._sets: dict[int, WitnessSet] = {}
        self._max = max_entries

    def get(self, partition_id: int) -> WitnessSet | None:
        return self._sets.get(partition_id)

    def learn(self, partition_id: int, response: pb.Response) -> bool:
        """What an answer to a hinted write says of its partition's witnesses; True when it
        said something new. Witnesses come with the owner's epoch (partition.proto); none
        from an owner of another epoch than the one known, answering when durable, means
        it has none. A set of other than WITNESSES is forgotten too: no write could be
        acknowledged on it, and writes of unknown witnesses keep the sync path at no cost."""
        addresses = tuple(response.witnesses)
        known = self._sets.get(partition_id)
        if not addresses and (response.speculative or known is None
                              or known.epoch == response.epoch):
            return False  # an early answer, or one of the epoch known: nothing new
        if len(addresses) != WITNESSES:
            if known is not None:
                del self._sets[partition_id]
            return False
        if known is not None and known.epoch == response.epoch and known.addresses == addresses:
            return False
        if known is None and len(self._sets) >= self._max:
            self._sets.clear()
        self._sets[partition_id] = WitnessSet(response.epoch, addresses)
        return True

    def __len__(self) -> int:
        return len(self._sets)


class Sends(Protocol):
    """What the fast path needs of a session to the owner (partition_layer/session.py)."""

    def send(self, request: pb.Request, timeout_s: float, nbytes: int, waiter: Waiter) -> int:
        ...


def clear_internal(response: pb.Response) -> None:
    """`response` without CURP's internal fields (partition.proto: never passed on to a
    client); a field is cleared only when set, since every answer passes here."""
    if response.speculative or response.epoch or response.lsn or response.witnesses:
        for name in ("speculative", "epoch", "lsn", "witnesses"):
            response.ClearField(name)


def witness_token(request: pb.Request) -> bytes:
    """The name a fast write's records carry: its append's or entity write's token, by
    which recovery deduplicates it and the owner's sweep judges it."""
    if request.WhichOneof("op") == "append":
        return request.append.token.encode()
    return request.token.encode()


class CurpPath:
    """The fast path of one front end (module contract)."""

    def __init__(self, settings: CurpSettings, client: ForwardingClient,
                 wall: Callable[[], float], retry: Retry,
                 calls: WitnessCalls | None = None) -> None:
        self.settings = settings
        self.enabled = settings.enabled
        self.client = client
        self.retry = retry
        self.counters = CurpCounters()
        self.clock = HybridClock(wall)
        self.witness_sets = WitnessSets(settings.partitions_cached_max)
        self.timeout_s = settings.witness_timeout_ms / 1000
        # The witness calls, made on first use (`calls`): a front end with CURP off opens
        # nothing. A test sets its own.
        self.witness_calls = calls
        self._ids: dict[tuple[str, str], int] = {}
        self._ids_map: PartitionMap | None = None
        self.recent = RecentKeys(settings.recent_key_ms / 1000, settings.recent_keys_max, wall)

    @property
    def calls(self) -> WitnessCalls:
        if self.witness_calls is None:
            s = self.settings
            self.witness_calls = WitnessCalls.over_grpc(
                self.client.limits.rpc_message_bytes_max, s.witness_call_timeout_ms / 1000,
                s.witness_call_records_max, s.witness_call_bytes_max,
                s.witness_records_in_flight_max, s.witness_suspect_ms / 1000)
        return self.witness_calls

    def take(self, request: pb.Request, sdk_id: int, nbytes: int, address: str,
             reply: Reply) -> bool:
        """Forward a fast write (module contract); False: not one, forward it as ever."""
        footprint = footprint_of(request)
        if footprint is None or nbytes > self.settings.fast_bytes_max:
            return False
        if self.recent.clashes(footprint.exclusive):
            self.recent.note(footprint.exclusive)
            return False
        partition_id = self._partition_id(request.account, request.pname)
        if partition_id is None:
            return False
        request.version_hint = self.clock.next()
        known = self.witness_sets.get(partition_id)
        # No records without a deadline (the SDK always sets one; another caller may not):
        # the owner's sweep drops a record it never executed only once its deadline passed
        # (curp.py step 6), so one without would be held for as long as the owner serves.
        if known is not None and (not request.deadline_ms
                                  or not self.calls.room(len(known.addresses))
                                  or not self.calls.usable(known.addresses)):
            self.counters.records_skipped += 1
            known = None
        if known is not None:
            request.curp_epoch = known.epoch
        session: Sends = self.client.session(address)
        write = _FastWrite(self, request, sdk_id, nbytes, reply, partition_id, session)
        session.send(request, self.client.attempts.timeout_s(0, nbytes), nbytes, write)
        if known is not None and not write.done():  # done: the session failed it at once
            write.record_at(known, footprint)
            self.recent.note(footprint.exclusive)
        return True

    def outgoing(self, response: pb.Response) -> None:
        """Every answer of the front end's plain path, before it goes to the SDK: its
        versions raise the clock (CURP on), its internal fields go."""
        if self.enabled:
            self.observe_versions(response)
        clear_internal(response)

    def observe_versions(self, response: pb.Response) -> None:
        if response.etag:
            self.clock.observe_etag(response.etag)
        for etag in response.etags:
            self.clock.observe_etag(etag)

    def learn(self, partition_id: int, response: pb.Response) -> None:
        """What the owner's answer to a fast write tells: versions, and its witnesses."""
        self.observe_versions(response)
        if (response.witnesses or response.epoch) and self.witness_sets.learn(partition_id,
                                                                            response):
            self.counters.witness_sets_learned += 1

    def _partition_id(self, account: str, pname: str) -> int | None:
        """The id of the partition the cached map routes (account, pname) to, remembered
        while the map is the same (as ForwardingClient.route_name remembers the server)."""
        current = self.client.map
        if current is None:
            return None
        if current is not self._ids_map:
            self._ids.clear()
            self._ids_map = current
        partition_id = self._ids.get((account, pname))
        if partition_id is None:
            partition_id = current.lookup(route_key(account, pname)).id
            if len(self._ids) >= self.settings.partitions_cached_max:
                self._ids.clear()
            self._ids[(account, pname)] = partition_id
        return partition_id

    async def close(self) -> None:
        if self.witness_calls is not None:
            await self.witness_calls.close()


class _FastWrite:
    """One fast write: the session's Waiter for the owner's answer, the waiter of its
    witnesses' verdicts, and its timer's callback — no task or future of its own."""

    __slots__ = ("_owner_done", "accepted", "answered", "epoch", "expected", "footprint", "nbytes",
                 "partition_id", "path", "refused", "reply", "request", "response",
                 "sdk_id", "session", "timed_out", "timer")

    def __init__(self, path: CurpPath, request: pb.Request, sdk_id: int, nbytes: int,
                 reply: Reply, partition_id: int, session: Sends) -> None:
        self.path = path
        self.request = request
        self.sdk_id = sdk_id
        self.nbytes = nbytes
        self.reply = reply
        self.partition_id = partition_id
        self.session = session
        self.epoch = 0  # of the records sent; 0: none went out
        self.footprint: Footprint | None = None
        self.expected = 0
        self.accepted = 0
        self.refused = False
        self.timed_out = False
        self.timer: asyncio.TimerHandle | None = None
        self.response: pb.Response | None = None  # a speculative answer waiting for verdicts
        self.answered = False
        self._owner_done = False

    def record_at(self, witnesses: WitnessSet, footprint: Footprint) -> None:
        """Send the request as forwarded to each witness, and start the timer. (Its
        traceparent, which the Call stream sets once `start` returned, is not in the record:
        a record executed by a recovering owner is not traced under the request.)"""
        request = self.request
        record = wpb.WitnessRecord(
            token=witness_token(request), epoch=witnesses.epoch,
            exclusive=sorted(footprint.exclusive), shared=sorted(footprint.shared),
            payload=request.SerializeToString(), deadline_ms=request.deadline_ms)
        calls = self.path.calls
        for address in witnesses.addresses:
            calls.record(address, self.partition_id, record, self)
        self.epoch = witnesses.epoch
        self.footprint = footprint
        self.expected = len(witnesses.addresses)
        self.path.counters.records_sent += self.expected
        self.timer = asyncio.get_running_loop().call_later(self.path.timeout_s, self.timeout)

    # ---- the owner's answer (partition_layer/session.py Waiter) ---------------------------

    def done(self) -> bool:
        return self._owner_done

    def set_result(self, response: pb.Response) -> None:
        self._owner_done = True
        path = self.path
        path.learn(self.partition_id, response)
        if response.error:
            self._refused_by_owner(response)
        elif not response.speculative:
            path.counters.synced += 1
            self._answer(response)
        elif not self.epoch or response.epoch != self.epoch:
            # The owner answered early a write its witnesses did not see (it named no epoch,
            # or another): only its sync makes it safe.
            self._sync(response, "unrecorded")
        else:
            self.response = response
            self._decide()

    def set_exception(self, exc: BaseException) -> None:
        self._owner_done = True
        if isinstance(exc, Unavailable | DeadlineExceeded):
            self._retry()  # it may or may not have run: a fast write is safe to repeat
            return
        if not isinstance(exc, StampError):
            log.error("forwarding a fast write: %r", exc)
            exc = Unavailable(f"front end: {exc!r}")
        self._answer(self._unless_in_doubt(error_response(self.sdk_id, exc)))

    def _refused_by_owner(self, response: pb.Response) -> None:
        if response.error == NotOwner.__name__:
            self._retry()  # not run there: the map moved on
        else:
            self._answer(self._unless_in_doubt(response))

    def _retry(self) -> None:
        """Hand the write to the front end's retry path (module contract: as a sync-path
        write), its answers filtered for doubt if records went out."""
        self._stop_timer()
        self.answered = True  # the retry path answers now
        self.request.version_hint = 0
        self.request.curp_epoch = 0
        reply = self.reply if not self.epoch else self._reply_unless_in_doubt
        self.path.retry(self.request, self.sdk_id, self.nbytes, reply)

    def _reply_unless_in_doubt(self, response: pb.Response) -> None:
        self.reply(self._unless_in_doubt(response))

    def _unless_in_doubt(self, response: pb.Response) -> pb.Response:
        """`response`, or Unavailable in its place if it says "not executed" although
        witnesses may hold the write (curp.py step 3, second rule)."""
        if not self.epoch or response.error not in NOT_EXECUTED:
            return response
        self.path.counters.in_doubt += 1
        return error_response(response.id, Unavailable(
            f"front end: the partition server answered {response.error}, but the write may "
            "still happen (its witnesses may hold it): retry it with the same token"))

    # ---- the witnesses' verdicts and the timer ---------------------------------------------

    def witnessed(self, verdict: int | None) -> None:
        if verdict == ACCEPTED:
            self.accepted += 1
        else:
            self.refused = True
            if verdict == CONFLICT and self.footprint is not None:
                path = self.path
                path.recent.note(self.footprint.exclusive,
                                 hold_s=path.settings.conflict_hold_ms / 1000)
        self._decide()

    def timeout(self) -> None:
        self.timer = None
        if self.accepted < self.expected and not self.refused:
            self.timed_out = True
            self._decide()

    def _decide(self) -> None:
        """With a speculative answer in: acknowledge, fall back, or wait for more."""
        response = self.response
        if response is None or self.answered:
            return
        if self.refused:
            self._sync(response, "refused")
        elif self.accepted >= self.expected:
            self.path.counters.fast += 1
            self._answer(response)
        elif self.timed_out:
            self._sync(response, "timeout")

    # ---- the slow path: a sync through the write's LSN -------------------------------------

    def _sync(self, response: pb.Response, cause: str) -> None:
        counters = self.path.counters
        if cause == "refused":
            counters.fallback_refused += 1
        elif cause == "timeout":
            counters.fallback_timeout += 1
        else:
            counters.fallback_unrecorded += 1
        self._stop_timer()
        self.answered = True  # from now on only the sync's outcome answers
        self.response = response
        request = self.request
        # The write's deadline and timeout both: (deadline - timeout) dates when this front
        # end took it up, as the owner's SenderClock reads every request it is sent.
        sync = pb.Request(account=request.account, pname=request.pname,
                          deadline_ms=request.deadline_ms, timeout_ms=request.timeout_ms,
                          sync=pb.SyncOp(epoch=response.epoch, lsn=response.lsn))
        self.session.send(sync, self.path.client.attempts.timeout_s(0, 0), 64, _Sync(self))

    def synced(self, error: str) -> None:
        """The sync's outcome: "" it succeeded, else why it failed."""
        response = self.response
        assert response is not None
        if not error:
            self.path.counters.fallback_acked += 1
        else:
            self.path.counters.fallback_failed += 1
            response = error_response(0, Unavailable(
                f"front end: the write was answered before it was durable and its sync "
                f"failed ({error[:200]}): it may or may not have happened"))
        self._send(response)

    # ---- answers ----------------------------------------------------------------------------

    def _answer(self, response: pb.Response) -> None:
        if self.answered:
            return
        self.answered = True
        self._stop_timer()
        self._send(response)

    def _send(self, response: pb.Response) -> None:
        clear_internal(response)
        response.id = self.sdk_id
        self.reply(response)

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class _Sync:
    """The session's Waiter for a fast write's SyncOp."""

    __slots__ = ("_done", "write")

    def __init__(self, write: _FastWrite) -> None:
        self.write = write
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, response: pb.Response) -> None:
        self._done = True
        self.write.synced(f"{response.error}: {response.message}" if response.error else "")

    def set_exception(self, exc: BaseException) -> None:
        self._done = True
        self.write.synced(f"{type(exc).__name__}: {exc}")
