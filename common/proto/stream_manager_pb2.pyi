from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StreamPolicy(_message.Message):
    __slots__ = ("pattern", "ec_k", "ec_m", "after_s")
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    EC_K_FIELD_NUMBER: _ClassVar[int]
    EC_M_FIELD_NUMBER: _ClassVar[int]
    AFTER_S_FIELD_NUMBER: _ClassVar[int]
    pattern: str
    ec_k: int
    ec_m: int
    after_s: float
    def __init__(self, pattern: _Optional[str] = ..., ec_k: _Optional[int] = ..., ec_m: _Optional[int] = ..., after_s: _Optional[float] = ...) -> None: ...

class ListStreamPoliciesReply(_message.Message):
    __slots__ = ("policies",)
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    policies: _containers.RepeatedCompositeFieldContainer[StreamPolicy]
    def __init__(self, policies: _Optional[_Iterable[_Union[StreamPolicy, _Mapping]]] = ...) -> None: ...

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ExtentInfo(_message.Message):
    __slots__ = ("extent_id", "replicas", "addresses", "state", "sealed_length", "streams", "fragments", "fragment_addresses", "ec_k", "ec_m", "ec_cuts", "ec_crcs", "sealed_at")
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SEALED_LENGTH_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
    FRAGMENT_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    EC_K_FIELD_NUMBER: _ClassVar[int]
    EC_M_FIELD_NUMBER: _ClassVar[int]
    EC_CUTS_FIELD_NUMBER: _ClassVar[int]
    EC_CRCS_FIELD_NUMBER: _ClassVar[int]
    SEALED_AT_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    replicas: _containers.RepeatedScalarFieldContainer[str]
    addresses: _containers.RepeatedScalarFieldContainer[str]
    state: str
    sealed_length: int
    streams: _containers.RepeatedScalarFieldContainer[str]
    fragments: _containers.RepeatedScalarFieldContainer[str]
    fragment_addresses: _containers.RepeatedScalarFieldContainer[str]
    ec_k: int
    ec_m: int
    ec_cuts: _containers.RepeatedScalarFieldContainer[int]
    ec_crcs: _containers.RepeatedScalarFieldContainer[int]
    sealed_at: float
    def __init__(self, extent_id: _Optional[int] = ..., replicas: _Optional[_Iterable[str]] = ..., addresses: _Optional[_Iterable[str]] = ..., state: _Optional[str] = ..., sealed_length: _Optional[int] = ..., streams: _Optional[_Iterable[str]] = ..., fragments: _Optional[_Iterable[str]] = ..., fragment_addresses: _Optional[_Iterable[str]] = ..., ec_k: _Optional[int] = ..., ec_m: _Optional[int] = ..., ec_cuts: _Optional[_Iterable[int]] = ..., ec_crcs: _Optional[_Iterable[int]] = ..., sealed_at: _Optional[float] = ...) -> None: ...

class GetExtentRequest(_message.Message):
    __slots__ = ("extent_id",)
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    def __init__(self, extent_id: _Optional[int] = ...) -> None: ...

class RecordErasureCodingRequest(_message.Message):
    __slots__ = ("extent_id", "fragments", "k", "m", "cuts", "crcs")
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    M_FIELD_NUMBER: _ClassVar[int]
    CUTS_FIELD_NUMBER: _ClassVar[int]
    CRCS_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    fragments: _containers.RepeatedScalarFieldContainer[str]
    k: int
    m: int
    cuts: _containers.RepeatedScalarFieldContainer[int]
    crcs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, extent_id: _Optional[int] = ..., fragments: _Optional[_Iterable[str]] = ..., k: _Optional[int] = ..., m: _Optional[int] = ..., cuts: _Optional[_Iterable[int]] = ..., crcs: _Optional[_Iterable[int]] = ...) -> None: ...

class ReleaseReplicasRequest(_message.Message):
    __slots__ = ("extent_id", "nodes")
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    nodes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, extent_id: _Optional[int] = ..., nodes: _Optional[_Iterable[str]] = ...) -> None: ...

class DropExtentsRequest(_message.Message):
    __slots__ = ("stream", "extents", "epoch")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    EXTENTS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    stream: str
    extents: _containers.RepeatedScalarFieldContainer[int]
    epoch: int
    def __init__(self, stream: _Optional[str] = ..., extents: _Optional[_Iterable[int]] = ..., epoch: _Optional[int] = ...) -> None: ...

class DropExtentsReply(_message.Message):
    __slots__ = ("stream", "dropped", "unreferenced", "unreferenced_bytes")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    UNREFERENCED_FIELD_NUMBER: _ClassVar[int]
    UNREFERENCED_BYTES_FIELD_NUMBER: _ClassVar[int]
    stream: StreamInfo
    dropped: _containers.RepeatedScalarFieldContainer[int]
    unreferenced: _containers.RepeatedScalarFieldContainer[int]
    unreferenced_bytes: int
    def __init__(self, stream: _Optional[_Union[StreamInfo, _Mapping]] = ..., dropped: _Optional[_Iterable[int]] = ..., unreferenced: _Optional[_Iterable[int]] = ..., unreferenced_bytes: _Optional[int] = ...) -> None: ...

class ReportFragmentRequest(_message.Message):
    __slots__ = ("extent_id", "index", "reason")
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    index: int
    reason: str
    def __init__(self, extent_id: _Optional[int] = ..., index: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class StreamInfo(_message.Message):
    __slots__ = ("name", "extents", "writer_epoch")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXTENTS_FIELD_NUMBER: _ClassVar[int]
    WRITER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    name: str
    extents: _containers.RepeatedCompositeFieldContainer[ExtentInfo]
    writer_epoch: int
    def __init__(self, name: _Optional[str] = ..., extents: _Optional[_Iterable[_Union[ExtentInfo, _Mapping]]] = ..., writer_epoch: _Optional[int] = ...) -> None: ...

class StreamRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class RenameRequest(_message.Message):
    __slots__ = ("old", "new")
    OLD_FIELD_NUMBER: _ClassVar[int]
    NEW_FIELD_NUMBER: _ClassVar[int]
    old: str
    new: str
    def __init__(self, old: _Optional[str] = ..., new: _Optional[str] = ...) -> None: ...

class ListStreamsRequest(_message.Message):
    __slots__ = ("prefix",)
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    def __init__(self, prefix: _Optional[str] = ...) -> None: ...

class ListStreamsReply(_message.Message):
    __slots__ = ("streams",)
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    streams: _containers.RepeatedCompositeFieldContainer[StreamInfo]
    def __init__(self, streams: _Optional[_Iterable[_Union[StreamInfo, _Mapping]]] = ...) -> None: ...

class SealAndAddRequest(_message.Message):
    __slots__ = ("stream", "last_extent_id", "epoch", "late_replicas")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LAST_EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LATE_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    stream: str
    last_extent_id: int
    epoch: int
    late_replicas: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, stream: _Optional[str] = ..., last_extent_id: _Optional[int] = ..., epoch: _Optional[int] = ..., late_replicas: _Optional[_Iterable[str]] = ...) -> None: ...

class FenceStreamRequest(_message.Message):
    __slots__ = ("name", "epoch")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    name: str
    epoch: int
    def __init__(self, name: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class SealExtentRequest(_message.Message):
    __slots__ = ("extent_id",)
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    def __init__(self, extent_id: _Optional[int] = ...) -> None: ...

class ConcatRequest(_message.Message):
    __slots__ = ("target", "source")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    target: str
    source: str
    def __init__(self, target: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...

class CreateFromRequest(_message.Message):
    __slots__ = ("name", "extents")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXTENTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    extents: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., extents: _Optional[_Iterable[int]] = ...) -> None: ...

class StreamOp(_message.Message):
    __slots__ = ("create", "delete", "rename", "concat", "fence", "create_from", "retire")
    CREATE_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    RENAME_FIELD_NUMBER: _ClassVar[int]
    CONCAT_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    CREATE_FROM_FIELD_NUMBER: _ClassVar[int]
    RETIRE_FIELD_NUMBER: _ClassVar[int]
    create: str
    delete: str
    rename: RenameRequest
    concat: ConcatRequest
    fence: FenceStreamRequest
    create_from: CreateFromRequest
    retire: str
    def __init__(self, create: _Optional[str] = ..., delete: _Optional[str] = ..., rename: _Optional[_Union[RenameRequest, _Mapping]] = ..., concat: _Optional[_Union[ConcatRequest, _Mapping]] = ..., fence: _Optional[_Union[FenceStreamRequest, _Mapping]] = ..., create_from: _Optional[_Union[CreateFromRequest, _Mapping]] = ..., retire: _Optional[str] = ...) -> None: ...

class MultiModifyRequest(_message.Message):
    __slots__ = ("ops",)
    OPS_FIELD_NUMBER: _ClassVar[int]
    ops: _containers.RepeatedCompositeFieldContainer[StreamOp]
    def __init__(self, ops: _Optional[_Iterable[_Union[StreamOp, _Mapping]]] = ...) -> None: ...

class MultiModifyReply(_message.Message):
    __slots__ = ("streams",)
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    streams: _containers.RepeatedCompositeFieldContainer[StreamInfo]
    def __init__(self, streams: _Optional[_Iterable[_Union[StreamInfo, _Mapping]]] = ...) -> None: ...

class ListExtentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListExtentsReply(_message.Message):
    __slots__ = ("extents", "busy")
    EXTENTS_FIELD_NUMBER: _ClassVar[int]
    BUSY_FIELD_NUMBER: _ClassVar[int]
    extents: _containers.RepeatedCompositeFieldContainer[ExtentInfo]
    busy: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, extents: _Optional[_Iterable[_Union[ExtentInfo, _Mapping]]] = ..., busy: _Optional[_Iterable[int]] = ...) -> None: ...

class NodeInfo(_message.Message):
    __slots__ = ("name", "address", "fault_domain", "upgrade_domain", "state", "suspect", "silent_s", "used_bytes", "extents")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    FAULT_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    UPGRADE_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUSPECT_FIELD_NUMBER: _ClassVar[int]
    SILENT_S_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    EXTENTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    fault_domain: str
    upgrade_domain: str
    state: str
    suspect: bool
    silent_s: float
    used_bytes: int
    extents: int
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., fault_domain: _Optional[str] = ..., upgrade_domain: _Optional[str] = ..., state: _Optional[str] = ..., suspect: _Optional[bool] = ..., silent_s: _Optional[float] = ..., used_bytes: _Optional[int] = ..., extents: _Optional[int] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListNodesReply(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeInfo]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeInfo, _Mapping]]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("name", "address", "fault_domain", "upgrade_domain", "capacity_bytes", "used_bytes", "extents", "unsealed")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    FAULT_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    UPGRADE_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    EXTENTS_FIELD_NUMBER: _ClassVar[int]
    UNSEALED_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    fault_domain: str
    upgrade_domain: str
    capacity_bytes: int
    used_bytes: int
    extents: int
    unsealed: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., fault_domain: _Optional[str] = ..., upgrade_domain: _Optional[str] = ..., capacity_bytes: _Optional[int] = ..., used_bytes: _Optional[int] = ..., extents: _Optional[int] = ..., unsealed: _Optional[_Iterable[int]] = ...) -> None: ...

class HeartbeatReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("name", "leader", "leader_address", "applied_index", "state_digest", "streams", "extents", "nodes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    STATE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    EXTENTS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    name: str
    leader: bool
    leader_address: str
    applied_index: int
    state_digest: str
    streams: int
    extents: int
    nodes: int
    def __init__(self, name: _Optional[str] = ..., leader: _Optional[bool] = ..., leader_address: _Optional[str] = ..., applied_index: _Optional[int] = ..., state_digest: _Optional[str] = ..., streams: _Optional[int] = ..., extents: _Optional[int] = ..., nodes: _Optional[int] = ...) -> None: ...
