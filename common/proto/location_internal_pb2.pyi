from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SyncedRange(_message.Message):
    __slots__ = ("low", "high", "has_high", "synced_ms", "lag_ops")
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    HAS_HIGH_FIELD_NUMBER: _ClassVar[int]
    SYNCED_MS_FIELD_NUMBER: _ClassVar[int]
    LAG_OPS_FIELD_NUMBER: _ClassVar[int]
    low: bytes
    high: bytes
    has_high: bool
    synced_ms: int
    lag_ops: int
    def __init__(self, low: _Optional[bytes] = ..., high: _Optional[bytes] = ..., has_high: _Optional[bool] = ..., synced_ms: _Optional[int] = ..., lag_ops: _Optional[int] = ...) -> None: ...

class SyncReport(_message.Message):
    __slots__ = ("stamp", "timestamp_ms", "ranges", "signature")
    STAMP_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    stamp: str
    timestamp_ms: int
    ranges: _containers.RepeatedCompositeFieldContainer[SyncedRange]
    signature: bytes
    def __init__(self, stamp: _Optional[str] = ..., timestamp_ms: _Optional[int] = ..., ranges: _Optional[_Iterable[_Union[SyncedRange, _Mapping]]] = ..., signature: _Optional[bytes] = ...) -> None: ...

class SyncReportReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
