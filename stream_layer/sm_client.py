"""Talking to the stream manager: find the leader by yourself and keep finding it.

`AsyncStreamManagerClient.call` sends to the replica it believes leads; a NotLeader answer
that names the leader redirects there, a NotLeader without a name or a transport failure moves
on to the next replica, and the whole call retries until `leader_wait_ms` has passed (an
election after a SIGKILL takes about a second), backing off by the common retry policy
(common/retry.py). Errors the leader returns on purpose (not found, precondition failed, ...)
are raised at once.

How long one attempt waits (issue 29: a frozen leader must not hold a call for long):
- A call whose resend cannot change its outcome (the IDEMPOTENT methods: reads, conditional
  seals, DropExtents, heartbeats, setting a policy) waits a short, adaptive, doubling time
  (`AttemptTimer`: about a second, or 3x the recent p99), then goes to the next replica;
  but never less than the leader may take on purpose (`attempt_floor_s`: a seal waits for
  the extent nodes' answers, a rollover also places a new extent).
  The replica that stayed silent is suspect for SUSPECT_S (`LeaderGuess`): hints naming it
  are not followed, so the call goes round the others until one of them leads.
- Any other call (CreateStream, MultiModify, ...: a resend after an unseen success is refused
  or, worse, acts again) waits for its answer until the leader wait runs out, as before; the
  caller resolves the ambiguity (`multi_modify_resolved`, which may resend as it can tell).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

from common import rpc
from common.clock import Clock, SystemClock
from common.config import StreamManagerLimits
from common.errors import (
    AlreadyExists,
    DeadlineExceeded,
    NotFound,
    NotLeader,
    StampError,
    Unavailable,
)
from common.proto import stream_manager_pb2 as pb
from common.proto import stream_manager_pb2_grpc as pb_grpc
from common.retry import AttemptTimer, LeaderGuess, RetryPolicy
from stream_layer import stream_ops

RETRY_POLICY = RetryPolicy(backoff_min_s=0.02, backoff_max_s=0.2)
# A call that may not be resent blindly waits at most this long in one attempt (and never
# past the leader wait); a rollover (seal + create + commit) takes milliseconds.
CALL_TIMEOUT_S = 30.0
# A replica that let an attempt time out is suspect this long (common/retry.LeaderGuess):
# CheckQuorum and an election take about a second.
SUSPECT_S = 1.0
# Safe to resend after an attempt that may have been applied unseen (module docstring).
IDEMPOTENT = frozenset({
    "OpenStream", "ListStreams", "SealAndAdd", "FenceStream", "SealExtent", "ListExtents",
    "ListNodes", "Heartbeat", "GetExtent", "RecordErasureCoding", "ReleaseReplicas",
    "ReportFragment", "DropExtents", "SetStreamPolicy", "ListStreamPolicies",
})


def attempt_floors(limits: StreamManagerLimits) -> dict[str, float]:
    """The least an attempt of each method waits (module docstring): what the leader's own
    waits on extent nodes add up to (a seal's probe and its wait for stragglers; a
    rollover's placement too), with a margin for its Raft write on a busy machine."""
    fence_s = (limits.seal_probe_timeout_ms + limits.seal_straggler_wait_ms) / 1000
    create_s = limits.create_extent_timeout_ms / 1000
    margin_s = 0.5
    return {"SealExtent": fence_s + margin_s, "FenceStream": fence_s + margin_s,
            "SealAndAdd": max(fence_s, create_s) + create_s + margin_s}


class AsyncStreamManagerClient:
    def __init__(self, addresses: Sequence[str], limits: StreamManagerLimits | None = None,
                 clock: Clock | None = None, rng: random.Random | None = None) -> None:
        if not addresses:
            raise Unavailable("no stream manager addresses")
        self.addresses = list(addresses)
        self.limits = limits or StreamManagerLimits()
        self.clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self._leader = LeaderGuess(self.addresses, self.clock.monotonic, SUSPECT_S)
        self._channels = rpc.ChannelCache(self.limits.rpc_message_bytes_max)
        self.attempts = AttemptTimer()
        self._floors = attempt_floors(self.limits)

    def _stub(self, address: str) -> pb_grpc.StreamManagerStub:
        return pb_grpc.StreamManagerStub(self._channels.get(address))

    async def close(self) -> None:
        await self._channels.close()

    async def call(self, method: str, request: Any, timeout_s: float | None = None,
                   idempotent: bool | None = None) -> Any:
        """Call `method` on the leader, following hints and retrying until leader_wait_ms;
        each attempt waits `timeout_s` if given, else as the module docstring says.
        `idempotent` (default: whether `method` is in IDEMPOTENT): the caller can stand a
        resend of an attempt that may have been applied."""
        if idempotent is None:
            idempotent = method in IDEMPOTENT
        deadline = self.clock.monotonic() + self.limits.leader_wait_ms / 1000
        attempt = timeouts = 0  # attempts failed; of them, timed out (each doubles the wait)
        last_error: StampError | None = None
        answered: StampError | None = None  # the last refusal a replica answered with
        while True:
            address = self._leader.address
            remaining = max(0.0, deadline - self.clock.monotonic())
            wait_s = (timeout_s if timeout_s is not None
                      else max(self._floors.get(method, 0.0),
                               self.attempts.timeout_s(timeouts)) if idempotent
                      else min(CALL_TIMEOUT_S, remaining))
            sent = self.clock.monotonic()
            try:
                reply = await rpc.call(getattr(self._stub(address), method)(
                    request, timeout=max(0.05, min(wait_s, remaining))))
            except NotLeader as exc:
                last_error = exc
                if self._leader.follow(exc.leader, address):
                    continue  # redirected: no need to wait
                self._leader.failed(address)
            except DeadlineExceeded as exc:
                last_error = exc
                timeouts += 1
                self._leader.timed_out(address)
            except Unavailable as exc:
                last_error = answered = exc
                self._leader.failed(address)
            else:
                self._leader.answered(address)
                if timeout_s is None and idempotent:
                    self.attempts.observe(self.clock.monotonic() - sent)
                return reply
            # Every error caught above is retried here (a resend is safe or waited out).
            assert last_error is not None
            delay = RETRY_POLICY.delay(last_error, attempt, True, self._rng)
            attempt += 1
            if self.clock.monotonic() + (delay or 0.0) >= deadline:
                # The leader's own refusal says more than the timeout of a last, cut attempt.
                raise Unavailable(f"no stream manager leader answered {method} within "
                                  f"{self.limits.leader_wait_ms} ms: {answered or last_error}")
            await asyncio.sleep(delay or 0.0)

    async def status(self, address: str, timeout_s: float = 2.0) -> pb.StatusReply:
        """One replica's own status (no leader needed)."""
        return await rpc.call(self._stub(address).Status(pb.StatusRequest(),
                                                         timeout=timeout_s))

    # ---- the namespace --------------------------------------------------------------------

    async def create_stream(self, name: str) -> pb.StreamInfo:
        return await self.call("CreateStream", pb.StreamRequest(name=name))

    async def open_stream(self, name: str) -> pb.StreamInfo:
        return await self.call("OpenStream", pb.StreamRequest(name=name))

    async def delete_stream(self, name: str) -> None:
        await self.call("DeleteStream", pb.StreamRequest(name=name))

    async def rename_stream(self, old: str, new: str) -> pb.StreamInfo:
        return await self.call("RenameStream", pb.RenameRequest(old=old, new=new))

    async def list_streams(self, prefix: str = "") -> list[pb.StreamInfo]:
        return list((await self.call("ListStreams", pb.ListStreamsRequest(prefix=prefix))
                     ).streams)

    async def seal_and_add(self, stream: str, last_extent_id: int, epoch: int = 0,
                           late_replicas: Sequence[str] = ()) -> pb.StreamInfo:
        """Seal the stream's last extent (if still `last_extent_id`) and add a new one;
        `late_replicas`: the replicas whose per-replica timeout caused the seal."""
        return await self.call("SealAndAdd", pb.SealAndAddRequest(
            stream=stream, last_extent_id=last_extent_id, epoch=epoch,
            late_replicas=list(late_replicas)))

    async def fence_stream(self, name: str, epoch: int) -> pb.StreamInfo:
        return await self.call("FenceStream", pb.FenceStreamRequest(name=name, epoch=epoch))

    async def seal_extent(self, extent_id: int) -> pb.ExtentInfo:
        return await self.call("SealExtent", pb.SealExtentRequest(extent_id=extent_id))

    async def concat(self, target: str, source: str) -> pb.StreamInfo:
        return await self.call("Concat", pb.ConcatRequest(target=target, source=source))

    async def multi_modify(self, ops: Sequence[pb.StreamOp]) -> list[pb.StreamInfo]:
        """Apply `ops` (build them with stream_layer.stream_ops) all or none; returns the
        streams they named that exist afterwards. A refusal (Fenced, NotFound, ...) raises
        and changes nothing; a transport failure leaves it unknown whether it applied: look
        (e.g. whether a stream it creates exists: `multi_modify_resolved`)."""
        return list((await self.call("MultiModify", pb.MultiModifyRequest(ops=ops))).streams)

    async def multi_modify_resolved(self, ops: Sequence[pb.StreamOp], witness: str
                                    ) -> list[pb.StreamInfo]:
        """`multi_modify`, with its ambiguity resolved: `witness` is a stream only this
        change creates (a split's or merge's child: ids are never reused). `call` resends
        after a timeout or a leader change, and the first attempt may have applied: the
        resend is then refused (its guards find the retired parents: NotFound; or its
        children exist: AlreadyExists). If `witness` exists, the change applied: return the
        streams `ops` named that exist, as the reply would have. Otherwise the refusal (or
        the transport failure) stands and nothing was changed by this call."""
        try:
            return list((await self.call("MultiModify", pb.MultiModifyRequest(ops=ops),
                                         idempotent=True)).streams)
        except (NotFound, AlreadyExists, Unavailable, DeadlineExceeded):
            if not await self._exists(witness):
                raise
        names = list(dict.fromkeys(n for op in ops for n in stream_ops.named(op)))
        return [info for name in names if (info := await self._open_if_exists(name))]

    async def _exists(self, name: str) -> bool:
        return await self._open_if_exists(name) is not None

    async def _open_if_exists(self, name: str) -> pb.StreamInfo | None:
        try:
            return await self.open_stream(name)
        except NotFound:
            return None

    async def list_extents(self) -> list[pb.ExtentInfo]:
        return list((await self.call("ListExtents", pb.ListExtentsRequest())).extents)

    async def list_extents_and_busy(self) -> tuple[list[pb.ExtentInfo], set[int]]:
        """Every extent, and the ids the leader holds outside the state (spares, copies
        under way), as of one moment."""
        reply = await self.call("ListExtents", pb.ListExtentsRequest())
        return list(reply.extents), set(reply.busy)

    async def delete_extent(self, extent_id: int) -> pb.ExtentInfo:
        """Mark an extent no stream holds as deleted (PreconditionFailed while one does)."""
        return await self.call("DeleteExtent", pb.GetExtentRequest(extent_id=extent_id))

    async def drop_extents(self, stream: str, extents: Sequence[int], epoch: int
                           ) -> pb.DropExtentsReply:
        """Take sealed `extents` the stream's writer (of `epoch`) no longer needs out of
        `stream` (garbage collection). Retry-safe: ids gone already are skipped, so a resend
        after a lost reply drops nothing more. Fenced below the stream's writer epoch;
        PreconditionFailed for its last extent or an open one, with nothing changed."""
        return await self.call("DropExtents", pb.DropExtentsRequest(
            stream=stream, extents=list(extents), epoch=epoch))

    async def list_nodes(self) -> list[pb.NodeInfo]:
        return list((await self.call("ListNodes", pb.ListNodesRequest())).nodes)

    # ---- erasure coding -------------------------------------------------------------------

    async def get_extent(self, extent_id: int) -> pb.ExtentInfo:
        return await self.call("GetExtent", pb.GetExtentRequest(extent_id=extent_id))

    async def record_erasure_coding(self, extent_id: int, fragments: Sequence[str], k: int,
                                    m: int, cuts: Sequence[int], crcs: Sequence[int]
                                    ) -> pb.ExtentInfo:
        return await self.call("RecordErasureCoding", pb.RecordErasureCodingRequest(
            extent_id=extent_id, fragments=fragments, k=k, m=m, cuts=cuts, crcs=crcs))

    async def release_replicas(self, extent_id: int, nodes: Sequence[str]) -> pb.ExtentInfo:
        return await self.call("ReleaseReplicas", pb.ReleaseReplicasRequest(
            extent_id=extent_id, nodes=nodes))

    async def set_stream_policy(self, pattern: str, ec_k: int, ec_m: int, after_s: float
                                ) -> None:
        """Set the ec policy of the streams `pattern` names (ec_k 0: remove it)."""
        await self.call("SetStreamPolicy", pb.StreamPolicy(pattern=pattern, ec_k=ec_k,
                                                           ec_m=ec_m, after_s=after_s))

    async def list_stream_policies(self) -> list[pb.StreamPolicy]:
        return list((await self.call("ListStreamPolicies", pb.Empty())).policies)

    async def report_fragment(self, extent_id: int, index: int, reason: str) -> None:
        await self.call("ReportFragment", pb.ReportFragmentRequest(
            extent_id=extent_id, index=index, reason=reason))
