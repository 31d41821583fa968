"""The stream manager's gRPC servicer. Every RPC but Status is the leader's: a follower answers
NotLeader naming the leader's gRPC address, so clients find it by themselves. Reads are served
by the leader too, and only after `_confirmed_read` has had the leader commit a no-op begun
after the read arrived (a read index): a deposed leader, partitioned or frozen while another
was elected and changed the namespace, cannot answer from its stale state (issue 15, hole 7).
A client never sees the namespace go back in time."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from grpc import aio

from common import rpc
from common.errors import InvalidArgument, NotLeader
from common.proto import stream_manager_pb2 as pb
from common.proto import stream_manager_pb2_grpc as pb_grpc
from stream_layer import stream_ops
from stream_layer.stream_manager import state as s
from stream_layer.stream_manager.leader import StreamManagerLeader

log = logging.getLogger(__name__)

T = TypeVar("T")


class StreamManagerServicer(pb_grpc.StreamManagerServicer):
    def __init__(self, leader: StreamManagerLeader, name: str,
                 grpc_of_raft: Mapping[str, str]) -> None:
        self.leader = leader
        self.replica = leader.replica
        self.name = name
        self._grpc_of_raft = dict(grpc_of_raft)

    def _require_leader(self) -> None:
        if not self.leader.is_leader():
            raft_leader = self.replica.leader_address()
            hint = self._grpc_of_raft.get(raft_leader or "")
            raise NotLeader(f"{self.name} is not the stream manager leader"
                            + (f"; the leader is {hint}" if hint else "; election under way"),
                            leader=hint)

    async def _confirmed_read(self, look: Callable[[s.StreamManagerState], T]) -> T:
        """`look` at the state once this replica has proved it still leads (see above)."""
        self._require_leader()
        await self.replica.confirm_leadership()
        return self.replica.read(look)

    # ---- conversions ----------------------------------------------------------------------

    def _extent_info(self, st: s.StreamManagerState, extent: s.Extent,
                     streams: Sequence[str] = ()) -> pb.ExtentInfo:
        return pb.ExtentInfo(extent_id=extent.extent_id, replicas=extent.replicas,
                             addresses=[st.node(r).address for r in extent.replicas],
                             state=extent.state, sealed_length=extent.sealed_length,
                             streams=streams, fragments=extent.fragments,
                             fragment_addresses=[st.node(f).address for f in extent.fragments],
                             ec_k=extent.ec_k, ec_m=extent.ec_m, ec_cuts=extent.ec_cuts,
                             ec_crcs=extent.ec_crcs, sealed_at=extent.sealed_at)

    def _stream_info(self, stream: s.Stream,
                     holders: Mapping[int, Sequence[str]] | None = None) -> pb.StreamInfo:
        """`stream` as the RPCs answer it; with `holders` (a listing's), each extent names
        every stream holding it (a split's children share their parent's extents)."""
        return self.replica.read(lambda st: pb.StreamInfo(
            name=stream.name, writer_epoch=stream.writer_epoch,
            extents=[self._extent_info(st, st.extent(e), (holders or {}).get(e, ()))
                     for e in stream.extents]))

    # ---- streams --------------------------------------------------------------------------

    @rpc.rpc_errors
    async def CreateStream(self, request: pb.StreamRequest,
                           context: aio.ServicerContext) -> pb.StreamInfo:
        """A new stream with its first extent already open, ready for appends."""
        self._require_leader()
        # Refuse a name in use, retired or invalid before an extent is made for it (the
        # commit checks again: the state may change meanwhile).
        self.replica.read(lambda st: st.check_new_name(request.name))
        extent_id, replicas = await self.leader.new_extent()
        results = await self.replica.propose(s.MultiModify((
            s.CreateStream(request.name),
            s.AddExtent(request.name, extent_id, replicas, expect_last=0))))
        return self._stream_info(results[-1])

    @rpc.rpc_errors
    async def OpenStream(self, request: pb.StreamRequest,
                         context: aio.ServicerContext) -> pb.StreamInfo:
        return self._stream_info(await self._confirmed_read(lambda st: st.stream(request.name)))

    @rpc.rpc_errors
    async def DeleteStream(self, request: pb.StreamRequest,
                           context: aio.ServicerContext) -> pb.Empty:
        self._require_leader()
        await self.replica.propose(s.DeleteStream(request.name))
        return pb.Empty()

    @rpc.rpc_errors
    async def RenameStream(self, request: pb.RenameRequest,
                           context: aio.ServicerContext) -> pb.StreamInfo:
        self._require_leader()
        return self._stream_info(await self.replica.propose(
            s.RenameStream(request.old, request.new)))

    @rpc.rpc_errors
    async def ListStreams(self, request: pb.ListStreamsRequest,
                          context: aio.ServicerContext) -> pb.ListStreamsReply:
        streams, holders = await self._confirmed_read(lambda st: (sorted(
            (v for k, v in st.streams.items() if k.startswith(request.prefix)),
            key=lambda v: v.name), _holders(st)))
        return pb.ListStreamsReply(streams=[self._stream_info(v, holders) for v in streams])

    @rpc.rpc_errors
    async def SealAndAdd(self, request: pb.SealAndAddRequest,
                         context: aio.ServicerContext) -> pb.StreamInfo:
        self._require_leader()
        return self._stream_info(await self.leader.seal_and_add(
            request.stream, request.last_extent_id, request.epoch,
            list(request.late_replicas)))

    @rpc.rpc_errors
    async def FenceStream(self, request: pb.FenceStreamRequest,
                          context: aio.ServicerContext) -> pb.StreamInfo:
        self._require_leader()
        return self._stream_info(await self.leader.fence_stream(request.name, request.epoch))

    @rpc.rpc_errors
    async def SealExtent(self, request: pb.SealExtentRequest,
                         context: aio.ServicerContext) -> pb.ExtentInfo:
        self._require_leader()
        extent = await self.leader.seal_one(request.extent_id)
        return self.replica.read(lambda st: self._extent_info(st, extent))

    @rpc.rpc_errors
    async def Concat(self, request: pb.ConcatRequest,
                     context: aio.ServicerContext) -> pb.StreamInfo:
        self._require_leader()
        return self._stream_info(await self.replica.propose(
            s.Concat(request.target, request.source)))

    @rpc.rpc_errors
    async def MultiModify(self, request: pb.MultiModifyRequest,
                          context: aio.ServicerContext) -> pb.MultiModifyReply:
        """Apply the ops atomically (state.MultiModify). Goes straight to Raft: a `fence` op
        is a guard (it raises or checks the writer epoch) and seals nothing, unlike the
        FenceStream RPC. The reply lists the streams it named that exist after it."""
        self._require_leader()
        commands = [_stream_op(op) for op in request.ops]
        await self.replica.propose(s.MultiModify(tuple(commands)))
        names = list(dict.fromkeys(n for op in request.ops for n in stream_ops.named(op)))
        alive = self.replica.read(lambda st: [st.streams[n] for n in names if n in st.streams])
        return pb.MultiModifyReply(streams=[self._stream_info(v) for v in alive])

    # ---- listings, heartbeats, status -----------------------------------------------------

    @rpc.rpc_errors
    async def ListExtents(self, request: pb.ListExtentsRequest,
                          context: aio.ServicerContext) -> pb.ListExtentsReply:
        self._require_leader()

        def listing(st: s.StreamManagerState) -> list[pb.ExtentInfo]:
            holders = _holders(st)
            return [self._extent_info(st, e, holders.get(e.extent_id, ()))
                    for e in sorted(st.extents.values(), key=lambda e: e.extent_id)]
        extents = await self._confirmed_read(listing)
        # No await in between: the busy ids are of the same moment as the listing.
        return pb.ListExtentsReply(extents=extents, busy=sorted(self.leader.busy_extents()))

    @rpc.rpc_errors
    async def ListNodes(self, request: pb.ListNodesRequest,
                        context: aio.ServicerContext) -> pb.ListNodesReply:
        nodes = await self._confirmed_read(
            lambda st: sorted(st.nodes.values(), key=lambda n: n.name))
        reply = pb.ListNodesReply()
        for node in nodes:
            used, extents = self.leader.usage(node.name)
            reply.nodes.append(pb.NodeInfo(
                name=node.name, address=node.address, fault_domain=node.fault_domain,
                upgrade_domain=node.upgrade_domain, state=node.state,
                suspect=self.leader.suspect(node.name),
                silent_s=round(self.leader.silent_s(node.name), 3), used_bytes=used,
                extents=extents))
        return reply

    @rpc.rpc_errors
    async def Heartbeat(self, request: pb.HeartbeatRequest,
                        context: aio.ServicerContext) -> pb.HeartbeatReply:
        self._require_leader()
        await self.leader.heartbeat(request.name, request.address, request.fault_domain,
                                    request.upgrade_domain, request.capacity_bytes,
                                    request.used_bytes, request.extents, request.unsealed)
        return pb.HeartbeatReply()

    # ---- erasure coding -------------------------------------------------------------------

    @rpc.rpc_errors
    async def GetExtent(self, request: pb.GetExtentRequest,
                        context: aio.ServicerContext) -> pb.ExtentInfo:
        return await self._confirmed_read(
            lambda st: self._extent_info(st, st.extent(request.extent_id)))

    @rpc.rpc_errors
    async def RecordErasureCoding(self, request: pb.RecordErasureCodingRequest,
                                  context: aio.ServicerContext) -> pb.ExtentInfo:
        self._require_leader()
        extent = await self.replica.propose(s.RecordErasureCoding(
            request.extent_id, tuple(request.fragments), request.k, request.m,
            tuple(request.cuts), tuple(request.crcs)))
        return self.replica.read(lambda st: self._extent_info(st, extent))

    @rpc.rpc_errors
    async def ReleaseReplicas(self, request: pb.ReleaseReplicasRequest,
                              context: aio.ServicerContext) -> pb.ExtentInfo:
        self._require_leader()
        extent = await self.replica.propose(s.ReleaseReplicas(request.extent_id,
                                                              tuple(request.nodes)))
        return self.replica.read(lambda st: self._extent_info(st, extent))

    @rpc.rpc_errors
    async def ReportFragment(self, request: pb.ReportFragmentRequest,
                             context: aio.ServicerContext) -> pb.Empty:
        self._require_leader()
        self.leader.fragment_repair.report(request.extent_id, request.index, request.reason)
        return pb.Empty()

    @rpc.rpc_errors
    async def DeleteExtent(self, request: pb.GetExtentRequest,
                           context: aio.ServicerContext) -> pb.ExtentInfo:
        self._require_leader()
        extent = await self.replica.propose(s.DeleteExtent(request.extent_id))
        return self.replica.read(lambda st: self._extent_info(st, extent))

    @rpc.rpc_errors
    async def DropExtents(self, request: pb.DropExtentsRequest,
                          context: aio.ServicerContext) -> pb.DropExtentsReply:
        self._require_leader()
        done = await self.replica.propose(s.DropExtents(request.stream, tuple(request.extents),
                                                        request.epoch))
        nbytes = self.replica.read(lambda st: sum(st.extent(e).sealed_length
                                                  for e in done.unreferenced))
        return pb.DropExtentsReply(stream=self._stream_info(done.stream), dropped=done.dropped,
                                   unreferenced=done.unreferenced, unreferenced_bytes=nbytes)

    @rpc.rpc_errors
    async def SetStreamPolicy(self, request: pb.StreamPolicy,
                              context: aio.ServicerContext) -> pb.StreamPolicy:
        self._require_leader()
        await self.replica.propose(s.SetStreamPolicy(request.pattern, request.ec_k,
                                                     request.ec_m, request.after_s))
        return request

    @rpc.rpc_errors
    async def ListStreamPolicies(self, request: pb.Empty,
                                 context: aio.ServicerContext) -> pb.ListStreamPoliciesReply:
        found = await self._confirmed_read(lambda st: sorted(st.policies.values(),
                                                             key=lambda p: p.pattern))
        return pb.ListStreamPoliciesReply(policies=[
            pb.StreamPolicy(pattern=p.pattern, ec_k=p.ec_k, ec_m=p.ec_m, after_s=p.after_s)
            for p in found])

    @rpc.rpc_errors
    async def Status(self, request: pb.StatusRequest,
                     context: aio.ServicerContext) -> pb.StatusReply:
        raft = self.replica.raft_status()
        counts = self.replica.read(lambda st: (len(st.streams), len(st.extents),
                                               len(st.nodes), st.digest()))
        return pb.StatusReply(
            name=self.name, leader=raft["role"] == "leader",
            leader_address=self._grpc_of_raft.get(raft["leader"], ""),
            applied_index=raft["last_applied"], state_digest=counts[3], streams=counts[0],
            extents=counts[1], nodes=counts[2])


def _holders(st: s.StreamManagerState) -> dict[int, list[str]]:
    """extent id -> the names of the streams holding it, sorted."""
    holders: dict[int, list[str]] = {}
    for name in sorted(st.streams):
        for extent_id in st.streams[name].extents:
            holders.setdefault(extent_id, []).append(name)
    return holders


def _stream_op(op: pb.StreamOp) -> object:
    kind = op.WhichOneof("op")
    if kind == "create":
        return s.CreateStream(op.create)
    if kind == "delete":
        return s.DeleteStream(op.delete)
    if kind == "rename":
        return s.RenameStream(op.rename.old, op.rename.new)
    if kind == "concat":
        return s.Concat(op.concat.target, op.concat.source)
    if kind == "fence":
        return s.FenceStream(op.fence.name, op.fence.epoch)
    if kind == "create_from":
        return s.CreateStreamFrom(op.create_from.name, tuple(op.create_from.extents))
    if kind == "retire":
        return s.RetireStream(op.retire)
    raise InvalidArgument("a multi-modify op names no change")
