"""The front end's side of Stamp's public protocol (protocol/frontend_v1.proto, issue 31):
the service `stamp.frontend.v1.FrontEnd`, served by the same FrontEndServicer as the
internal `stamp.frontend.FrontEnd`.

Each public message mirrors its internal namesake field for field (`mirror_problems` says
where one does not; a test keeps it empty), so a request's bytes are read straight into the
internal message (one parse, no copy of its records) and an answer's internal message is
sent as it is. What the internal message holds beyond the public one is not the caller's to
set: `read_request_batch` clears it before anything reads the request, so the signature,
which covers every field the caller sent, no longer matches one that set any (the request
is refused as Unauthenticated), and nothing internal can be smuggled in. The front end sets
none of the internal-only answer fields (`INTERNAL_ANSWER_FIELDS`: a partition server's load
report), so what it sends a caller is public.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor

from common.proto import frontend_pb2 as fe_pb
from common.proto import frontend_v1_pb2 as v1
from common.proto import partition_pb2 as pb

SERVICE = "stamp.frontend.v1.FrontEnd"
# Fields of internal answers that a front end never sets (module docstring). A Response's
# are CURP's (partition_layer/curp.py): an owner sets them only on a write its front end
# hinted, and a front end never passes them on.
INTERNAL_ANSWER_FIELDS = {"stamp.partition.ResponseBatch": {"pressure"},
                          "stamp.partition.Response": {"speculative", "epoch", "lsn",
                                                       "witnesses"}}


def internal_namesake(public: Descriptor | EnumDescriptor) -> Descriptor | EnumDescriptor:
    """The internal message (or enum) a public one mirrors: the same name in the partition
    protocol or, failing that, in the front end's."""
    for module in (pb, fe_pb):
        if public.name in module.DESCRIPTOR.message_types_by_name:
            return module.DESCRIPTOR.message_types_by_name[public.name]
        if public.name in module.DESCRIPTOR.enum_types_by_name:
            return module.DESCRIPTOR.enum_types_by_name[public.name]
    raise LookupError(f"no internal message mirrors {public.full_name}")


def mirror_problems() -> list[str]:
    """Where a public message or enum differs from its internal namesake in anything a
    parse could see (a field's number, name, type or label; an enum's values); [] when
    every public message can be read as its internal one."""
    problems: list[str] = []
    for enum in v1.DESCRIPTOR.enum_types_by_name.values():
        inner = internal_namesake(enum)
        values = {(v.name, v.number) for v in enum.values}
        if not values <= {(v.name, v.number) for v in inner.values}:
            problems.append(f"{enum.full_name}: values not in {inner.full_name}")
    for message in v1.DESCRIPTOR.message_types_by_name.values():
        inner = internal_namesake(message)
        assert isinstance(inner, Descriptor)
        for field in message.fields:
            twin = inner.fields_by_number.get(field.number)
            if twin is None:
                problems.append(f"{field.full_name}: field {field.number} is not in "
                                f"{inner.full_name}")
                continue
            problems += _field_problems(field, twin)
    return problems


def _field_problems(field: FieldDescriptor, twin: FieldDescriptor) -> list[str]:
    problems = []
    if (field.name, field.type, field.is_repeated) != (twin.name, twin.type, twin.is_repeated):
        problems.append(f"{field.full_name} is not {twin.full_name} (name, type or label)")
    if field.message_type is not None and (
            internal_namesake(field.message_type) is not twin.message_type):
        problems.append(f"{field.full_name}: {field.message_type.full_name} does not mirror "
                        f"{twin.message_type.full_name}")
    if field.enum_type is not None and internal_namesake(field.enum_type) is not twin.enum_type:
        problems.append(f"{field.full_name}: its enum does not mirror "
                        f"{twin.enum_type.full_name}")
    if (field.containing_oneof is None) != (twin.containing_oneof is None):
        problems.append(f"{field.full_name}: in a oneof on one side only")
    return problems


def internal_only(public: Descriptor) -> list[str]:
    """The fields of `public`'s internal namesake that `public` lacks, by name."""
    inner = internal_namesake(public)
    assert isinstance(inner, Descriptor)
    return sorted(f.name for f in inner.fields if f.number not in public.fields_by_number)


_REQUEST_INTERNAL = tuple(internal_only(v1.Request.DESCRIPTOR))


def read_request_batch(data: bytes) -> pb.RequestBatch:
    """A public RequestBatch's bytes as the internal message, without what is not public
    (module docstring)."""
    batch = pb.RequestBatch.FromString(data)
    for request in batch.requests:
        for name in _REQUEST_INTERNAL:
            request.ClearField(name)
    return batch


def add_public_servicer(servicer: Any, server: grpc.Server | Any) -> None:
    """Serve `servicer` (a FrontEndServicer) as the public service too."""
    def handler(kind: Callable[..., grpc.RpcMethodHandler], method: Any,
                read: Callable[[bytes], Any], answer: type) -> grpc.RpcMethodHandler:
        return kind(method, request_deserializer=read,
                    response_serializer=answer.SerializeToString)

    handlers = {
        "Call": handler(grpc.stream_stream_rpc_method_handler, servicer.Call,
                        read_request_batch, pb.ResponseBatch),
        "Subscribe": handler(grpc.unary_stream_rpc_method_handler, servicer.Subscribe,
                             pb.SubscribeRequest.FromString, pb.SubscribeReply),
        "Scan": handler(grpc.unary_stream_rpc_method_handler, servicer.Scan,
                        fe_pb.ScanRequest.FromString, fe_pb.ScanPage),
        "Status": handler(grpc.unary_unary_rpc_method_handler, servicer.Status,
                          fe_pb.FrontEndStatusRequest.FromString, fe_pb.FrontEndStatus),
        "ScanRanges": handler(grpc.unary_unary_rpc_method_handler, servicer.ScanRanges,
                              fe_pb.ScanRangesRequest.FromString, fe_pb.ScanRangesReply),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)
