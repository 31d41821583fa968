"""Builders of the stream manager's multi-modify ops (pb.StreamOp), pure: a caller assembles
an atomic change readably, e.g. a split of B into C and D

    ops = [fence_op(f"partition/{b}/{k}", epoch) for k in KINDS]
    ops += [create_from_op(f"partition/{c}/{k}", extents[k]) for k in KINDS]
    ops += [create_from_op(f"partition/{d}/{k}", extents[k]) for k in KINDS]
    ops += [retire_op(f"partition/{b}/{k}") for k in KINDS]
    await sm.multi_modify(ops)

and the stream manager applies all of them or none (stream_manager.proto, StreamOp)."""

from __future__ import annotations

from collections.abc import Iterable

from common.proto import stream_manager_pb2 as pb


def fence_op(name: str, epoch: int) -> pb.StreamOp:
    """A guard: the whole multi-modify is refused (Fenced) if a writer with an epoch above
    `epoch` fenced stream `name`; at `epoch` or above it raises the writer epoch. Inside a
    multi-modify it seals nothing (the FenceStream RPC seals; call that first)."""
    return pb.StreamOp(fence=pb.FenceStreamRequest(name=name, epoch=epoch))


def create_from_op(name: str, extents: Iterable[int]) -> pb.StreamOp:
    """A new stream `name` holding exactly `extents` in order (shared with their other
    streams): each exists and is sealed or erasure-coded, none repeats."""
    return pb.StreamOp(create_from=pb.CreateFromRequest(name=name, extents=list(extents)))


def retire_op(name: str) -> pb.StreamOp:
    """Delete stream `name` and retire the name: it can never be created again."""
    return pb.StreamOp(retire=name)


def create_op(name: str) -> pb.StreamOp:
    """A new empty stream (no extent: unlike the CreateStream RPC, which opens one)."""
    return pb.StreamOp(create=name)


def delete_op(name: str) -> pb.StreamOp:
    """Delete stream `name`; its extents stay while another stream holds them."""
    return pb.StreamOp(delete=name)


def rename_op(old: str, new: str) -> pb.StreamOp:
    return pb.StreamOp(rename=pb.RenameRequest(old=old, new=new))


def concat_op(target: str, source: str) -> pb.StreamOp:
    """Append `source`'s extents to `target` (pointers only; both stay)."""
    return pb.StreamOp(concat=pb.ConcatRequest(target=target, source=source))


def named(op: pb.StreamOp) -> tuple[str, ...]:
    """The stream names `op` touches (what a multi-modify's reply reports on)."""
    kind = op.WhichOneof("op")
    if kind in ("create", "delete", "retire"):
        return (getattr(op, kind),)
    if kind == "rename":
        return (op.rename.old, op.rename.new)
    if kind == "concat":
        return (op.concat.target, op.concat.source)
    if kind == "fence":
        return (op.fence.name,)
    if kind == "create_from":
        return (op.create_from.name,)
    return ()
