from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ResolveRequest(_message.Message):
    __slots__ = ("account",)
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    account: str
    def __init__(self, account: _Optional[str] = ...) -> None: ...

class StampEndpoints(_message.Message):
    __slots__ = ("name", "region", "front_ends", "blob_endpoints")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    FRONT_ENDS_FIELD_NUMBER: _ClassVar[int]
    BLOB_ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    region: str
    front_ends: _containers.RepeatedScalarFieldContainer[str]
    blob_endpoints: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., region: _Optional[str] = ..., front_ends: _Optional[_Iterable[str]] = ..., blob_endpoints: _Optional[_Iterable[str]] = ...) -> None: ...

class ResolveReply(_message.Message):
    __slots__ = ("account", "primary", "secondary", "secondary_state", "epoch", "ttl_ms", "last_sync_ms")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_FIELD_NUMBER: _ClassVar[int]
    SECONDARY_FIELD_NUMBER: _ClassVar[int]
    SECONDARY_STATE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_SYNC_MS_FIELD_NUMBER: _ClassVar[int]
    account: str
    primary: StampEndpoints
    secondary: StampEndpoints
    secondary_state: str
    epoch: int
    ttl_ms: int
    last_sync_ms: int
    def __init__(self, account: _Optional[str] = ..., primary: _Optional[_Union[StampEndpoints, _Mapping]] = ..., secondary: _Optional[_Union[StampEndpoints, _Mapping]] = ..., secondary_state: _Optional[str] = ..., epoch: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., last_sync_ms: _Optional[int] = ...) -> None: ...
