from common.proto import partition_pb2 as _partition_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReplicateCall(_message.Message):
    __slots__ = ("source_stamp", "target_stamp", "account", "epoch", "requests", "timestamp_ms", "signature")
    SOURCE_STAMP_FIELD_NUMBER: _ClassVar[int]
    TARGET_STAMP_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    source_stamp: str
    target_stamp: str
    account: str
    epoch: int
    requests: _containers.RepeatedCompositeFieldContainer[_partition_pb2.Request]
    timestamp_ms: int
    signature: bytes
    def __init__(self, source_stamp: _Optional[str] = ..., target_stamp: _Optional[str] = ..., account: _Optional[str] = ..., epoch: _Optional[int] = ..., requests: _Optional[_Iterable[_Union[_partition_pb2.Request, _Mapping]]] = ..., timestamp_ms: _Optional[int] = ..., signature: _Optional[bytes] = ...) -> None: ...

class ReplicateAnswer(_message.Message):
    __slots__ = ("applied",)
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    applied: int
    def __init__(self, applied: _Optional[int] = ...) -> None: ...

class ScanRequest(_message.Message):
    __slots__ = ("auth", "account", "start_pname", "start_row", "has_end", "end_pname", "end_row", "mode", "prefix", "limit", "page_rows", "continuation")
    AUTH_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    START_PNAME_FIELD_NUMBER: _ClassVar[int]
    START_ROW_FIELD_NUMBER: _ClassVar[int]
    HAS_END_FIELD_NUMBER: _ClassVar[int]
    END_PNAME_FIELD_NUMBER: _ClassVar[int]
    END_ROW_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_ROWS_FIELD_NUMBER: _ClassVar[int]
    CONTINUATION_FIELD_NUMBER: _ClassVar[int]
    auth: _partition_pb2.Auth
    account: str
    start_pname: str
    start_row: bytes
    has_end: bool
    end_pname: str
    end_row: bytes
    mode: _partition_pb2.ScanMode
    prefix: str
    limit: int
    page_rows: int
    continuation: bytes
    def __init__(self, auth: _Optional[_Union[_partition_pb2.Auth, _Mapping]] = ..., account: _Optional[str] = ..., start_pname: _Optional[str] = ..., start_row: _Optional[bytes] = ..., has_end: _Optional[bool] = ..., end_pname: _Optional[str] = ..., end_row: _Optional[bytes] = ..., mode: _Optional[_Union[_partition_pb2.ScanMode, str]] = ..., prefix: _Optional[str] = ..., limit: _Optional[int] = ..., page_rows: _Optional[int] = ..., continuation: _Optional[bytes] = ...) -> None: ...

class ScanPage(_message.Message):
    __slots__ = ("items", "continuation")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    CONTINUATION_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[_partition_pb2.ScanItem]
    continuation: bytes
    def __init__(self, items: _Optional[_Iterable[_Union[_partition_pb2.ScanItem, _Mapping]]] = ..., continuation: _Optional[bytes] = ...) -> None: ...

class FrontEndStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FrontEndStatus(_message.Message):
    __slots__ = ("name", "address", "requests", "refused_unauthenticated", "refused_permission", "refused_invalid", "throttled", "accounts_cached", "map_version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_UNAUTHENTICATED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_PERMISSION_FIELD_NUMBER: _ClassVar[int]
    REFUSED_INVALID_FIELD_NUMBER: _ClassVar[int]
    THROTTLED_FIELD_NUMBER: _ClassVar[int]
    ACCOUNTS_CACHED_FIELD_NUMBER: _ClassVar[int]
    MAP_VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    requests: int
    refused_unauthenticated: int
    refused_permission: int
    refused_invalid: int
    throttled: int
    accounts_cached: int
    map_version: int
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., requests: _Optional[int] = ..., refused_unauthenticated: _Optional[int] = ..., refused_permission: _Optional[int] = ..., refused_invalid: _Optional[int] = ..., throttled: _Optional[int] = ..., accounts_cached: _Optional[int] = ..., map_version: _Optional[int] = ...) -> None: ...

class ScanRangesRequest(_message.Message):
    __slots__ = ("auth", "account")
    AUTH_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    auth: _partition_pb2.Auth
    account: str
    def __init__(self, auth: _Optional[_Union[_partition_pb2.Auth, _Mapping]] = ..., account: _Optional[str] = ...) -> None: ...

class AccountRange(_message.Message):
    __slots__ = ("partition_id", "start_pname", "start_row", "has_end", "end_pname", "end_row", "size_bytes", "middle_pname")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    START_PNAME_FIELD_NUMBER: _ClassVar[int]
    START_ROW_FIELD_NUMBER: _ClassVar[int]
    HAS_END_FIELD_NUMBER: _ClassVar[int]
    END_PNAME_FIELD_NUMBER: _ClassVar[int]
    END_ROW_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MIDDLE_PNAME_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    start_pname: str
    start_row: bytes
    has_end: bool
    end_pname: str
    end_row: bytes
    size_bytes: int
    middle_pname: str
    def __init__(self, partition_id: _Optional[int] = ..., start_pname: _Optional[str] = ..., start_row: _Optional[bytes] = ..., has_end: _Optional[bool] = ..., end_pname: _Optional[str] = ..., end_row: _Optional[bytes] = ..., size_bytes: _Optional[int] = ..., middle_pname: _Optional[str] = ...) -> None: ...

class ScanRangesReply(_message.Message):
    __slots__ = ("ranges", "map_version")
    RANGES_FIELD_NUMBER: _ClassVar[int]
    MAP_VERSION_FIELD_NUMBER: _ClassVar[int]
    ranges: _containers.RepeatedCompositeFieldContainer[AccountRange]
    map_version: int
    def __init__(self, ranges: _Optional[_Iterable[_Union[AccountRange, _Mapping]]] = ..., map_version: _Optional[int] = ...) -> None: ...
