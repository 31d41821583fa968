from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FragmentChunk(_message.Message):
    __slots__ = ("extent_id", "index", "length", "crc", "offset", "data")
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    CRC_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    index: int
    length: int
    crc: int
    offset: int
    data: bytes
    def __init__(self, extent_id: _Optional[int] = ..., index: _Optional[int] = ..., length: _Optional[int] = ..., crc: _Optional[int] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class FragmentRequest(_message.Message):
    __slots__ = ("extent_id", "index")
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    index: int
    def __init__(self, extent_id: _Optional[int] = ..., index: _Optional[int] = ...) -> None: ...

class FragmentReply(_message.Message):
    __slots__ = ("length", "crc")
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    CRC_FIELD_NUMBER: _ClassVar[int]
    length: int
    crc: int
    def __init__(self, length: _Optional[int] = ..., crc: _Optional[int] = ...) -> None: ...

class ReadFragmentRequest(_message.Message):
    __slots__ = ("extent_id", "index", "offset", "length")
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    index: int
    offset: int
    length: int
    def __init__(self, extent_id: _Optional[int] = ..., index: _Optional[int] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class ReadFragmentReply(_message.Message):
    __slots__ = ("data", "crc")
    DATA_FIELD_NUMBER: _ClassVar[int]
    CRC_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    crc: int
    def __init__(self, data: _Optional[bytes] = ..., crc: _Optional[int] = ...) -> None: ...

class ListFragmentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FragmentId(_message.Message):
    __slots__ = ("extent_id", "index")
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    index: int
    def __init__(self, extent_id: _Optional[int] = ..., index: _Optional[int] = ...) -> None: ...

class ListFragmentsReply(_message.Message):
    __slots__ = ("fragments",)
    FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
    fragments: _containers.RepeatedCompositeFieldContainer[FragmentId]
    def __init__(self, fragments: _Optional[_Iterable[_Union[FragmentId, _Mapping]]] = ...) -> None: ...

class Block(_message.Message):
    __slots__ = ("data", "crc")
    DATA_FIELD_NUMBER: _ClassVar[int]
    CRC_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    crc: int
    def __init__(self, data: _Optional[bytes] = ..., crc: _Optional[int] = ...) -> None: ...

class CreateExtentRequest(_message.Message):
    __slots__ = ("extent_id", "replicas")
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    replicas: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, extent_id: _Optional[int] = ..., replicas: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateExtentReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AppendRequest(_message.Message):
    __slots__ = ("request_id", "extent_id", "blocks", "traceparent")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    extent_id: int
    blocks: _containers.RepeatedCompositeFieldContainer[Block]
    traceparent: str
    def __init__(self, request_id: _Optional[int] = ..., extent_id: _Optional[int] = ..., blocks: _Optional[_Iterable[_Union[Block, _Mapping]]] = ..., traceparent: _Optional[str] = ...) -> None: ...

class AppendBatch(_message.Message):
    __slots__ = ("appends",)
    APPENDS_FIELD_NUMBER: _ClassVar[int]
    appends: _containers.RepeatedCompositeFieldContainer[AppendRequest]
    def __init__(self, appends: _Optional[_Iterable[_Union[AppendRequest, _Mapping]]] = ...) -> None: ...

class AppendAck(_message.Message):
    __slots__ = ("request_id", "offset", "end", "error_kind", "error_message", "late_replica")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    ERROR_KIND_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LATE_REPLICA_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    offset: int
    end: int
    error_kind: str
    error_message: str
    late_replica: str
    def __init__(self, request_id: _Optional[int] = ..., offset: _Optional[int] = ..., end: _Optional[int] = ..., error_kind: _Optional[str] = ..., error_message: _Optional[str] = ..., late_replica: _Optional[str] = ...) -> None: ...

class AppendAcks(_message.Message):
    __slots__ = ("acks",)
    ACKS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[AppendAck]
    def __init__(self, acks: _Optional[_Iterable[_Union[AppendAck, _Mapping]]] = ...) -> None: ...

class ForwardEntry(_message.Message):
    __slots__ = ("extent_id", "offset", "frames", "traceparent")
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    offset: int
    frames: bytes
    traceparent: str
    def __init__(self, extent_id: _Optional[int] = ..., offset: _Optional[int] = ..., frames: _Optional[bytes] = ..., traceparent: _Optional[str] = ...) -> None: ...

class ForwardBatch(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[ForwardEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[ForwardEntry, _Mapping]]] = ...) -> None: ...

class ForwardAck(_message.Message):
    __slots__ = ("extent_id", "durable_end", "error_kind", "error_message")
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    DURABLE_END_FIELD_NUMBER: _ClassVar[int]
    ERROR_KIND_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    durable_end: int
    error_kind: str
    error_message: str
    def __init__(self, extent_id: _Optional[int] = ..., durable_end: _Optional[int] = ..., error_kind: _Optional[str] = ..., error_message: _Optional[str] = ...) -> None: ...

class ForwardAcks(_message.Message):
    __slots__ = ("acks",)
    ACKS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[ForwardAck]
    def __init__(self, acks: _Optional[_Iterable[_Union[ForwardAck, _Mapping]]] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("extent_id", "offset", "length")
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    offset: int
    length: int
    def __init__(self, extent_id: _Optional[int] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class ReadReply(_message.Message):
    __slots__ = ("frames",)
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    frames: bytes
    def __init__(self, frames: _Optional[bytes] = ...) -> None: ...

class CommitLengthRequest(_message.Message):
    __slots__ = ("extent_id", "fence")
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    fence: bool
    def __init__(self, extent_id: _Optional[int] = ..., fence: _Optional[bool] = ...) -> None: ...

class CommitLengthReply(_message.Message):
    __slots__ = ("length", "sealed")
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    SEALED_FIELD_NUMBER: _ClassVar[int]
    length: int
    sealed: bool
    def __init__(self, length: _Optional[int] = ..., sealed: _Optional[bool] = ...) -> None: ...

class SealRequest(_message.Message):
    __slots__ = ("extent_id", "length", "sources")
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    length: int
    sources: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, extent_id: _Optional[int] = ..., length: _Optional[int] = ..., sources: _Optional[_Iterable[str]] = ...) -> None: ...

class SealReply(_message.Message):
    __slots__ = ("length",)
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    length: int
    def __init__(self, length: _Optional[int] = ...) -> None: ...

class SyncInitRequest(_message.Message):
    __slots__ = ("extent_id", "from_offset", "to_offset")
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    from_offset: int
    to_offset: int
    def __init__(self, extent_id: _Optional[int] = ..., from_offset: _Optional[int] = ..., to_offset: _Optional[int] = ...) -> None: ...

class SyncInitReply(_message.Message):
    __slots__ = ("available_end", "sealed")
    AVAILABLE_END_FIELD_NUMBER: _ClassVar[int]
    SEALED_FIELD_NUMBER: _ClassVar[int]
    available_end: int
    sealed: bool
    def __init__(self, available_end: _Optional[int] = ..., sealed: _Optional[bool] = ...) -> None: ...

class SyncReplicateRequest(_message.Message):
    __slots__ = ("extent_id", "from_offset", "to_offset")
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    from_offset: int
    to_offset: int
    def __init__(self, extent_id: _Optional[int] = ..., from_offset: _Optional[int] = ..., to_offset: _Optional[int] = ...) -> None: ...

class SyncChunk(_message.Message):
    __slots__ = ("offset", "frames")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    offset: int
    frames: bytes
    def __init__(self, offset: _Optional[int] = ..., frames: _Optional[bytes] = ...) -> None: ...

class DeleteExtentRequest(_message.Message):
    __slots__ = ("extent_id",)
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    def __init__(self, extent_id: _Optional[int] = ...) -> None: ...

class DeleteExtentReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListExtentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ExtentInfo(_message.Message):
    __slots__ = ("extent_id", "length", "sealed", "replicas")
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    SEALED_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    length: int
    sealed: bool
    replicas: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, extent_id: _Optional[int] = ..., length: _Optional[int] = ..., sealed: _Optional[bool] = ..., replicas: _Optional[_Iterable[str]] = ...) -> None: ...

class ListExtentsReply(_message.Message):
    __slots__ = ("extents",)
    EXTENTS_FIELD_NUMBER: _ClassVar[int]
    extents: _containers.RepeatedCompositeFieldContainer[ExtentInfo]
    def __init__(self, extents: _Optional[_Iterable[_Union[ExtentInfo, _Mapping]]] = ...) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CheckpointReply(_message.Message):
    __slots__ = ("journal_bytes",)
    JOURNAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    journal_bytes: int
    def __init__(self, journal_bytes: _Optional[int] = ...) -> None: ...

class NodeStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeStatusReply(_message.Message):
    __slots__ = ("name", "fault_domain", "upgrade_domain", "extents", "bytes", "journal_bytes", "pending_file_bytes", "pid", "journal_syncs", "journal_records")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FAULT_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    UPGRADE_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    EXTENTS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    PENDING_FILE_BYTES_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_SYNCS_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_RECORDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    fault_domain: str
    upgrade_domain: str
    extents: int
    bytes: int
    journal_bytes: int
    pending_file_bytes: int
    pid: int
    journal_syncs: int
    journal_records: int
    def __init__(self, name: _Optional[str] = ..., fault_domain: _Optional[str] = ..., upgrade_domain: _Optional[str] = ..., extents: _Optional[int] = ..., bytes: _Optional[int] = ..., journal_bytes: _Optional[int] = ..., pending_file_bytes: _Optional[int] = ..., pid: _Optional[int] = ..., journal_syncs: _Optional[int] = ..., journal_records: _Optional[int] = ...) -> None: ...

class ScrubExtentRequest(_message.Message):
    __slots__ = ("extent_id",)
    EXTENT_ID_FIELD_NUMBER: _ClassVar[int]
    extent_id: int
    def __init__(self, extent_id: _Optional[int] = ...) -> None: ...

class ScrubExtentReply(_message.Message):
    __slots__ = ("length", "sealed", "frames", "digest", "bad_offset", "reason")
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    SEALED_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    BAD_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    length: int
    sealed: bool
    frames: int
    digest: bytes
    bad_offset: int
    reason: str
    def __init__(self, length: _Optional[int] = ..., sealed: _Optional[bool] = ..., frames: _Optional[int] = ..., digest: _Optional[bytes] = ..., bad_offset: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...
