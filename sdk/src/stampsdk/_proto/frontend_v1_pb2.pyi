from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScanMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCAN_ENTITIES: _ClassVar[ScanMode]
    SCAN_LOG_NAMES: _ClassVar[ScanMode]
SCAN_ENTITIES: ScanMode
SCAN_LOG_NAMES: ScanMode

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Auth(_message.Message):
    __slots__ = ("account", "timestamp_ms", "signature", "sas")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    SAS_FIELD_NUMBER: _ClassVar[int]
    account: str
    timestamp_ms: int
    signature: bytes
    sas: str
    def __init__(self, account: _Optional[str] = ..., timestamp_ms: _Optional[int] = ..., signature: _Optional[bytes] = ..., sas: _Optional[str] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("seq", "data", "crc")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CRC_FIELD_NUMBER: _ClassVar[int]
    seq: int
    data: bytes
    crc: int
    def __init__(self, seq: _Optional[int] = ..., data: _Optional[bytes] = ..., crc: _Optional[int] = ...) -> None: ...

class AppendOp(_message.Message):
    __slots__ = ("records", "token", "crcs")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    CRCS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedScalarFieldContainer[bytes]
    token: str
    crcs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, records: _Optional[_Iterable[bytes]] = ..., token: _Optional[str] = ..., crcs: _Optional[_Iterable[int]] = ...) -> None: ...

class ReadOp(_message.Message):
    __slots__ = ("from_seq", "limit")
    FROM_SEQ_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    from_seq: int
    limit: int
    def __init__(self, from_seq: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class TrimOp(_message.Message):
    __slots__ = ("upto_seq",)
    UPTO_SEQ_FIELD_NUMBER: _ClassVar[int]
    upto_seq: int
    def __init__(self, upto_seq: _Optional[int] = ...) -> None: ...

class PutOp(_message.Message):
    __slots__ = ("row", "value", "if_match", "if_none_match", "value_crc")
    ROW_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    IF_MATCH_FIELD_NUMBER: _ClassVar[int]
    IF_NONE_MATCH_FIELD_NUMBER: _ClassVar[int]
    VALUE_CRC_FIELD_NUMBER: _ClassVar[int]
    row: bytes
    value: bytes
    if_match: str
    if_none_match: bool
    value_crc: int
    def __init__(self, row: _Optional[bytes] = ..., value: _Optional[bytes] = ..., if_match: _Optional[str] = ..., if_none_match: bool = ..., value_crc: _Optional[int] = ...) -> None: ...

class GetOp(_message.Message):
    __slots__ = ("row",)
    ROW_FIELD_NUMBER: _ClassVar[int]
    row: bytes
    def __init__(self, row: _Optional[bytes] = ...) -> None: ...

class DeleteOp(_message.Message):
    __slots__ = ("row", "if_match")
    ROW_FIELD_NUMBER: _ClassVar[int]
    IF_MATCH_FIELD_NUMBER: _ClassVar[int]
    row: bytes
    if_match: str
    def __init__(self, row: _Optional[bytes] = ..., if_match: _Optional[str] = ...) -> None: ...

class BatchItem(_message.Message):
    __slots__ = ("kind", "row", "value", "if_match", "if_none_match", "value_crc")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    IF_MATCH_FIELD_NUMBER: _ClassVar[int]
    IF_NONE_MATCH_FIELD_NUMBER: _ClassVar[int]
    VALUE_CRC_FIELD_NUMBER: _ClassVar[int]
    kind: str
    row: bytes
    value: bytes
    if_match: str
    if_none_match: bool
    value_crc: int
    def __init__(self, kind: _Optional[str] = ..., row: _Optional[bytes] = ..., value: _Optional[bytes] = ..., if_match: _Optional[str] = ..., if_none_match: bool = ..., value_crc: _Optional[int] = ...) -> None: ...

class BatchOp(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[BatchItem]
    def __init__(self, items: _Optional[_Iterable[_Union[BatchItem, _Mapping]]] = ...) -> None: ...

class Request(_message.Message):
    __slots__ = ("id", "account", "pname", "token", "auth", "timeout_ms", "traceparent", "append", "read", "trim", "seal", "peek", "put", "get", "delete", "batch")
    ID_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    PNAME_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    AUTH_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    APPEND_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    TRIM_FIELD_NUMBER: _ClassVar[int]
    SEAL_FIELD_NUMBER: _ClassVar[int]
    PEEK_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    GET_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    id: int
    account: str
    pname: str
    token: str
    auth: Auth
    timeout_ms: int
    traceparent: str
    append: AppendOp
    read: ReadOp
    trim: TrimOp
    seal: Empty
    peek: Empty
    put: PutOp
    get: GetOp
    delete: DeleteOp
    batch: BatchOp
    def __init__(self, id: _Optional[int] = ..., account: _Optional[str] = ..., pname: _Optional[str] = ..., token: _Optional[str] = ..., auth: _Optional[_Union[Auth, _Mapping]] = ..., timeout_ms: _Optional[int] = ..., traceparent: _Optional[str] = ..., append: _Optional[_Union[AppendOp, _Mapping]] = ..., read: _Optional[_Union[ReadOp, _Mapping]] = ..., trim: _Optional[_Union[TrimOp, _Mapping]] = ..., seal: _Optional[_Union[Empty, _Mapping]] = ..., peek: _Optional[_Union[Empty, _Mapping]] = ..., put: _Optional[_Union[PutOp, _Mapping]] = ..., get: _Optional[_Union[GetOp, _Mapping]] = ..., delete: _Optional[_Union[DeleteOp, _Mapping]] = ..., batch: _Optional[_Union[BatchOp, _Mapping]] = ...) -> None: ...

class ScanItem(_message.Message):
    __slots__ = ("pname", "row", "value", "etag", "crc")
    PNAME_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    CRC_FIELD_NUMBER: _ClassVar[int]
    pname: str
    row: bytes
    value: bytes
    etag: str
    crc: int
    def __init__(self, pname: _Optional[str] = ..., row: _Optional[bytes] = ..., value: _Optional[bytes] = ..., etag: _Optional[str] = ..., crc: _Optional[int] = ...) -> None: ...

class Response(_message.Message):
    __slots__ = ("id", "error", "message", "first_seq", "next_seq", "records", "value", "etag", "etags", "items", "more", "retry_after_s", "value_crc")
    ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    ETAGS_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_S_FIELD_NUMBER: _ClassVar[int]
    VALUE_CRC_FIELD_NUMBER: _ClassVar[int]
    id: int
    error: str
    message: str
    first_seq: int
    next_seq: int
    records: _containers.RepeatedCompositeFieldContainer[Record]
    value: bytes
    etag: str
    etags: _containers.RepeatedScalarFieldContainer[str]
    items: _containers.RepeatedCompositeFieldContainer[ScanItem]
    more: bool
    retry_after_s: float
    value_crc: int
    def __init__(self, id: _Optional[int] = ..., error: _Optional[str] = ..., message: _Optional[str] = ..., first_seq: _Optional[int] = ..., next_seq: _Optional[int] = ..., records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., value: _Optional[bytes] = ..., etag: _Optional[str] = ..., etags: _Optional[_Iterable[str]] = ..., items: _Optional[_Iterable[_Union[ScanItem, _Mapping]]] = ..., more: bool = ..., retry_after_s: _Optional[float] = ..., value_crc: _Optional[int] = ...) -> None: ...

class RequestBatch(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[Request]
    def __init__(self, requests: _Optional[_Iterable[_Union[Request, _Mapping]]] = ...) -> None: ...

class ResponseBatch(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[Response]
    def __init__(self, responses: _Optional[_Iterable[_Union[Response, _Mapping]]] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("account", "pname", "from_seq", "auth")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    PNAME_FIELD_NUMBER: _ClassVar[int]
    FROM_SEQ_FIELD_NUMBER: _ClassVar[int]
    AUTH_FIELD_NUMBER: _ClassVar[int]
    account: str
    pname: str
    from_seq: int
    auth: Auth
    def __init__(self, account: _Optional[str] = ..., pname: _Optional[str] = ..., from_seq: _Optional[int] = ..., auth: _Optional[_Union[Auth, _Mapping]] = ...) -> None: ...

class SubscribeReply(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[Record]
    def __init__(self, records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ...) -> None: ...

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
    auth: Auth
    account: str
    start_pname: str
    start_row: bytes
    has_end: bool
    end_pname: str
    end_row: bytes
    mode: ScanMode
    prefix: str
    limit: int
    page_rows: int
    continuation: bytes
    def __init__(self, auth: _Optional[_Union[Auth, _Mapping]] = ..., account: _Optional[str] = ..., start_pname: _Optional[str] = ..., start_row: _Optional[bytes] = ..., has_end: bool = ..., end_pname: _Optional[str] = ..., end_row: _Optional[bytes] = ..., mode: _Optional[_Union[ScanMode, str]] = ..., prefix: _Optional[str] = ..., limit: _Optional[int] = ..., page_rows: _Optional[int] = ..., continuation: _Optional[bytes] = ...) -> None: ...

class ScanPage(_message.Message):
    __slots__ = ("items", "continuation")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    CONTINUATION_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ScanItem]
    continuation: bytes
    def __init__(self, items: _Optional[_Iterable[_Union[ScanItem, _Mapping]]] = ..., continuation: _Optional[bytes] = ...) -> None: ...

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
    auth: Auth
    account: str
    def __init__(self, auth: _Optional[_Union[Auth, _Mapping]] = ..., account: _Optional[str] = ...) -> None: ...

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
    def __init__(self, partition_id: _Optional[int] = ..., start_pname: _Optional[str] = ..., start_row: _Optional[bytes] = ..., has_end: bool = ..., end_pname: _Optional[str] = ..., end_row: _Optional[bytes] = ..., size_bytes: _Optional[int] = ..., middle_pname: _Optional[str] = ...) -> None: ...

class ScanRangesReply(_message.Message):
    __slots__ = ("ranges", "map_version")
    RANGES_FIELD_NUMBER: _ClassVar[int]
    MAP_VERSION_FIELD_NUMBER: _ClassVar[int]
    ranges: _containers.RepeatedCompositeFieldContainer[AccountRange]
    map_version: int
    def __init__(self, ranges: _Optional[_Iterable[_Union[AccountRange, _Mapping]]] = ..., map_version: _Optional[int] = ...) -> None: ...
