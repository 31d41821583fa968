from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACCEPTED: _ClassVar[Verdict]
    CONFLICT: _ClassVar[Verdict]
    FENCED: _ClassVar[Verdict]
    FULL: _ClassVar[Verdict]
    EXPIRED: _ClassVar[Verdict]
ACCEPTED: Verdict
CONFLICT: Verdict
FENCED: Verdict
FULL: Verdict
EXPIRED: Verdict

class WitnessRecord(_message.Message):
    __slots__ = ("token", "epoch", "exclusive", "shared", "payload", "deadline_ms")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    token: bytes
    epoch: int
    exclusive: _containers.RepeatedScalarFieldContainer[bytes]
    shared: _containers.RepeatedScalarFieldContainer[bytes]
    payload: bytes
    deadline_ms: int
    def __init__(self, token: _Optional[bytes] = ..., epoch: _Optional[int] = ..., exclusive: _Optional[_Iterable[bytes]] = ..., shared: _Optional[_Iterable[bytes]] = ..., payload: _Optional[bytes] = ..., deadline_ms: _Optional[int] = ...) -> None: ...

class RecordRequest(_message.Message):
    __slots__ = ("partition_id", "records", "id")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    records: _containers.RepeatedCompositeFieldContainer[WitnessRecord]
    id: int
    def __init__(self, partition_id: _Optional[int] = ..., records: _Optional[_Iterable[_Union[WitnessRecord, _Mapping]]] = ..., id: _Optional[int] = ...) -> None: ...

class RecordReply(_message.Message):
    __slots__ = ("verdicts", "id", "error", "message")
    VERDICTS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    verdicts: _containers.RepeatedScalarFieldContainer[Verdict]
    id: int
    error: str
    message: str
    def __init__(self, verdicts: _Optional[_Iterable[_Union[Verdict, str]]] = ..., id: _Optional[int] = ..., error: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class RecordRequests(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[RecordRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[RecordRequest, _Mapping]]] = ...) -> None: ...

class RecordReplies(_message.Message):
    __slots__ = ("replies",)
    REPLIES_FIELD_NUMBER: _ClassVar[int]
    replies: _containers.RepeatedCompositeFieldContainer[RecordReply]
    def __init__(self, replies: _Optional[_Iterable[_Union[RecordReply, _Mapping]]] = ...) -> None: ...

class DropRequest(_message.Message):
    __slots__ = ("partition_id", "tokens", "epoch", "durable")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    tokens: _containers.RepeatedScalarFieldContainer[bytes]
    epoch: int
    durable: bool
    def __init__(self, partition_id: _Optional[int] = ..., tokens: _Optional[_Iterable[bytes]] = ..., epoch: _Optional[int] = ..., durable: _Optional[bool] = ...) -> None: ...

class DropReply(_message.Message):
    __slots__ = ("dropped",)
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    dropped: int
    def __init__(self, dropped: _Optional[int] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("partition_id", "older_than_ms", "epoch")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    OLDER_THAN_MS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    older_than_ms: int
    epoch: int
    def __init__(self, partition_id: _Optional[int] = ..., older_than_ms: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class ListReply(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[WitnessRecord]
    def __init__(self, records: _Optional[_Iterable[_Union[WitnessRecord, _Mapping]]] = ...) -> None: ...

class FenceRequest(_message.Message):
    __slots__ = ("partition_id", "epoch")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    epoch: int
    def __init__(self, partition_id: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class FenceReply(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[WitnessRecord]
    def __init__(self, records: _Optional[_Iterable[_Union[WitnessRecord, _Mapping]]] = ...) -> None: ...

class ClearRequest(_message.Message):
    __slots__ = ("partition_id", "epoch")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    epoch: int
    def __init__(self, partition_id: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class ClearReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DropPartitionRequest(_message.Message):
    __slots__ = ("partition_id",)
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    def __init__(self, partition_id: _Optional[int] = ...) -> None: ...

class DropPartitionReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("records", "bytes", "partitions")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    records: int
    bytes: int
    partitions: int
    def __init__(self, records: _Optional[int] = ..., bytes: _Optional[int] = ..., partitions: _Optional[int] = ...) -> None: ...
