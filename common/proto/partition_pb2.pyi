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
    def __init__(self, row: _Optional[bytes] = ..., value: _Optional[bytes] = ..., if_match: _Optional[str] = ..., if_none_match: _Optional[bool] = ..., value_crc: _Optional[int] = ...) -> None: ...

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
    def __init__(self, kind: _Optional[str] = ..., row: _Optional[bytes] = ..., value: _Optional[bytes] = ..., if_match: _Optional[str] = ..., if_none_match: _Optional[bool] = ..., value_crc: _Optional[int] = ...) -> None: ...

class BatchOp(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[BatchItem]
    def __init__(self, items: _Optional[_Iterable[_Union[BatchItem, _Mapping]]] = ...) -> None: ...

class ScanOp(_message.Message):
    __slots__ = ("start_pname", "start_row", "has_end", "end_pname", "end_row", "limit")
    START_PNAME_FIELD_NUMBER: _ClassVar[int]
    START_ROW_FIELD_NUMBER: _ClassVar[int]
    HAS_END_FIELD_NUMBER: _ClassVar[int]
    END_PNAME_FIELD_NUMBER: _ClassVar[int]
    END_ROW_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    start_pname: str
    start_row: bytes
    has_end: bool
    end_pname: str
    end_row: bytes
    limit: int
    def __init__(self, start_pname: _Optional[str] = ..., start_row: _Optional[bytes] = ..., has_end: _Optional[bool] = ..., end_pname: _Optional[str] = ..., end_row: _Optional[bytes] = ..., limit: _Optional[int] = ...) -> None: ...

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

class ReplicateOp(_message.Message):
    __slots__ = ("keys", "rows", "clear")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    rows: _containers.RepeatedScalarFieldContainer[bytes]
    clear: bool
    def __init__(self, keys: _Optional[_Iterable[bytes]] = ..., rows: _Optional[_Iterable[bytes]] = ..., clear: _Optional[bool] = ...) -> None: ...

class Request(_message.Message):
    __slots__ = ("id", "account", "pname", "token", "auth", "timeout_ms", "deadline_ms", "traceparent", "version_hint", "curp_epoch", "append", "read", "trim", "seal", "peek", "put", "get", "delete", "batch", "scan", "replicate", "sync")
    ID_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    PNAME_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    AUTH_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_HINT_FIELD_NUMBER: _ClassVar[int]
    CURP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    APPEND_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    TRIM_FIELD_NUMBER: _ClassVar[int]
    SEAL_FIELD_NUMBER: _ClassVar[int]
    PEEK_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    GET_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    SCAN_FIELD_NUMBER: _ClassVar[int]
    REPLICATE_FIELD_NUMBER: _ClassVar[int]
    SYNC_FIELD_NUMBER: _ClassVar[int]
    id: int
    account: str
    pname: str
    token: str
    auth: Auth
    timeout_ms: int
    deadline_ms: int
    traceparent: str
    version_hint: int
    curp_epoch: int
    append: AppendOp
    read: ReadOp
    trim: TrimOp
    seal: Empty
    peek: Empty
    put: PutOp
    get: GetOp
    delete: DeleteOp
    batch: BatchOp
    scan: ScanOp
    replicate: ReplicateOp
    sync: SyncOp
    def __init__(self, id: _Optional[int] = ..., account: _Optional[str] = ..., pname: _Optional[str] = ..., token: _Optional[str] = ..., auth: _Optional[_Union[Auth, _Mapping]] = ..., timeout_ms: _Optional[int] = ..., deadline_ms: _Optional[int] = ..., traceparent: _Optional[str] = ..., version_hint: _Optional[int] = ..., curp_epoch: _Optional[int] = ..., append: _Optional[_Union[AppendOp, _Mapping]] = ..., read: _Optional[_Union[ReadOp, _Mapping]] = ..., trim: _Optional[_Union[TrimOp, _Mapping]] = ..., seal: _Optional[_Union[Empty, _Mapping]] = ..., peek: _Optional[_Union[Empty, _Mapping]] = ..., put: _Optional[_Union[PutOp, _Mapping]] = ..., get: _Optional[_Union[GetOp, _Mapping]] = ..., delete: _Optional[_Union[DeleteOp, _Mapping]] = ..., batch: _Optional[_Union[BatchOp, _Mapping]] = ..., scan: _Optional[_Union[ScanOp, _Mapping]] = ..., replicate: _Optional[_Union[ReplicateOp, _Mapping]] = ..., sync: _Optional[_Union[SyncOp, _Mapping]] = ...) -> None: ...

class SyncOp(_message.Message):
    __slots__ = ("epoch", "lsn")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LSN_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    lsn: int
    def __init__(self, epoch: _Optional[int] = ..., lsn: _Optional[int] = ...) -> None: ...

class Response(_message.Message):
    __slots__ = ("id", "error", "message", "first_seq", "next_seq", "records", "value", "etag", "etags", "items", "more", "retry_after_s", "value_crc", "speculative", "epoch", "lsn", "witnesses")
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
    SPECULATIVE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LSN_FIELD_NUMBER: _ClassVar[int]
    WITNESSES_FIELD_NUMBER: _ClassVar[int]
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
    speculative: bool
    epoch: int
    lsn: int
    witnesses: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[int] = ..., error: _Optional[str] = ..., message: _Optional[str] = ..., first_seq: _Optional[int] = ..., next_seq: _Optional[int] = ..., records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., value: _Optional[bytes] = ..., etag: _Optional[str] = ..., etags: _Optional[_Iterable[str]] = ..., items: _Optional[_Iterable[_Union[ScanItem, _Mapping]]] = ..., more: _Optional[bool] = ..., retry_after_s: _Optional[float] = ..., value_crc: _Optional[int] = ..., speculative: _Optional[bool] = ..., epoch: _Optional[int] = ..., lsn: _Optional[int] = ..., witnesses: _Optional[_Iterable[str]] = ...) -> None: ...

class RequestBatch(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[Request]
    def __init__(self, requests: _Optional[_Iterable[_Union[Request, _Mapping]]] = ...) -> None: ...

class ResponseBatch(_message.Message):
    __slots__ = ("responses", "pressure")
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    PRESSURE_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[Response]
    pressure: ServerPressure
    def __init__(self, responses: _Optional[_Iterable[_Union[Response, _Mapping]]] = ..., pressure: _Optional[_Union[ServerPressure, _Mapping]] = ...) -> None: ...

class ServerPressure(_message.Message):
    __slots__ = ("server", "queue_ops", "p99_ms")
    SERVER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OPS_FIELD_NUMBER: _ClassVar[int]
    P99_MS_FIELD_NUMBER: _ClassVar[int]
    server: str
    queue_ops: int
    p99_ms: float
    def __init__(self, server: _Optional[str] = ..., queue_ops: _Optional[int] = ..., p99_ms: _Optional[float] = ...) -> None: ...

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

class PartitionScanRequest(_message.Message):
    __slots__ = ("account", "start_key", "end_key", "has_end", "mode", "page_rows", "page_bytes", "limit")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    START_KEY_FIELD_NUMBER: _ClassVar[int]
    END_KEY_FIELD_NUMBER: _ClassVar[int]
    HAS_END_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    PAGE_ROWS_FIELD_NUMBER: _ClassVar[int]
    PAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    account: str
    start_key: bytes
    end_key: bytes
    has_end: bool
    mode: ScanMode
    page_rows: int
    page_bytes: int
    limit: int
    def __init__(self, account: _Optional[str] = ..., start_key: _Optional[bytes] = ..., end_key: _Optional[bytes] = ..., has_end: _Optional[bool] = ..., mode: _Optional[_Union[ScanMode, str]] = ..., page_rows: _Optional[int] = ..., page_bytes: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class PartitionScanPage(_message.Message):
    __slots__ = ("items", "resume_key", "done")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    RESUME_KEY_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ScanItem]
    resume_key: bytes
    done: bool
    def __init__(self, items: _Optional[_Iterable[_Union[ScanItem, _Mapping]]] = ..., resume_key: _Optional[bytes] = ..., done: _Optional[bool] = ...) -> None: ...

class SubscribeReply(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[Record]
    def __init__(self, records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ...) -> None: ...

class KeyRange(_message.Message):
    __slots__ = ("low", "high", "has_high")
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    HAS_HIGH_FIELD_NUMBER: _ClassVar[int]
    low: bytes
    high: bytes
    has_high: bool
    def __init__(self, low: _Optional[bytes] = ..., high: _Optional[bytes] = ..., has_high: _Optional[bool] = ...) -> None: ...

class LoadRequest(_message.Message):
    __slots__ = ("partition_id", "range", "map_version", "create_if_missing")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    MAP_VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATE_IF_MISSING_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    range: KeyRange
    map_version: int
    create_if_missing: bool
    def __init__(self, partition_id: _Optional[int] = ..., range: _Optional[_Union[KeyRange, _Mapping]] = ..., map_version: _Optional[int] = ..., create_if_missing: _Optional[bool] = ...) -> None: ...

class LoadReply(_message.Message):
    __slots__ = ("seconds", "replayed_ops", "replayed_bytes", "runs", "epoch")
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_OPS_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_BYTES_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    seconds: float
    replayed_ops: int
    replayed_bytes: int
    runs: int
    epoch: int
    def __init__(self, seconds: _Optional[float] = ..., replayed_ops: _Optional[int] = ..., replayed_bytes: _Optional[int] = ..., runs: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class UnloadRequest(_message.Message):
    __slots__ = ("partition_id",)
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    def __init__(self, partition_id: _Optional[int] = ...) -> None: ...

class UnloadReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PartitionLoad(_message.Message):
    __slots__ = ("partition_id", "state", "ops_per_s", "bytes_per_s", "p50_ms", "p99_ms", "size_bytes", "memtable_bytes", "runs", "epoch", "range", "queue_ops", "samples", "size_split_key", "requests_sampled", "geo", "geo_lag_ops", "geo_synced_s")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    OPS_PER_S_FIELD_NUMBER: _ClassVar[int]
    BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    P50_MS_FIELD_NUMBER: _ClassVar[int]
    P99_MS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMTABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OPS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SIZE_SPLIT_KEY_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_SAMPLED_FIELD_NUMBER: _ClassVar[int]
    GEO_FIELD_NUMBER: _ClassVar[int]
    GEO_LAG_OPS_FIELD_NUMBER: _ClassVar[int]
    GEO_SYNCED_S_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    state: str
    ops_per_s: float
    bytes_per_s: float
    p50_ms: float
    p99_ms: float
    size_bytes: int
    memtable_bytes: int
    runs: int
    epoch: int
    range: KeyRange
    queue_ops: int
    samples: _containers.RepeatedCompositeFieldContainer[LoadSample]
    size_split_key: bytes
    requests_sampled: int
    geo: bool
    geo_lag_ops: int
    geo_synced_s: float
    def __init__(self, partition_id: _Optional[int] = ..., state: _Optional[str] = ..., ops_per_s: _Optional[float] = ..., bytes_per_s: _Optional[float] = ..., p50_ms: _Optional[float] = ..., p99_ms: _Optional[float] = ..., size_bytes: _Optional[int] = ..., memtable_bytes: _Optional[int] = ..., runs: _Optional[int] = ..., epoch: _Optional[int] = ..., range: _Optional[_Union[KeyRange, _Mapping]] = ..., queue_ops: _Optional[int] = ..., samples: _Optional[_Iterable[_Union[LoadSample, _Mapping]]] = ..., size_split_key: _Optional[bytes] = ..., requests_sampled: _Optional[int] = ..., geo: _Optional[bool] = ..., geo_lag_ops: _Optional[int] = ..., geo_synced_s: _Optional[float] = ...) -> None: ...

class LoadSample(_message.Message):
    __slots__ = ("key", "left", "right", "contained")
    KEY_FIELD_NUMBER: _ClassVar[int]
    LEFT_FIELD_NUMBER: _ClassVar[int]
    RIGHT_FIELD_NUMBER: _ClassVar[int]
    CONTAINED_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    left: int
    right: int
    contained: int
    def __init__(self, key: _Optional[bytes] = ..., left: _Optional[int] = ..., right: _Optional[int] = ..., contained: _Optional[int] = ...) -> None: ...

class SplitRequest(_message.Message):
    __slots__ = ("partition_id", "key", "left_id", "right_id", "map_version")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    LEFT_ID_FIELD_NUMBER: _ClassVar[int]
    RIGHT_ID_FIELD_NUMBER: _ClassVar[int]
    MAP_VERSION_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    key: bytes
    left_id: int
    right_id: int
    map_version: int
    def __init__(self, partition_id: _Optional[int] = ..., key: _Optional[bytes] = ..., left_id: _Optional[int] = ..., right_id: _Optional[int] = ..., map_version: _Optional[int] = ...) -> None: ...

class SplitReply(_message.Message):
    __slots__ = ("seconds", "unavailable_s", "left", "right", "left_epoch", "right_epoch")
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_S_FIELD_NUMBER: _ClassVar[int]
    LEFT_FIELD_NUMBER: _ClassVar[int]
    RIGHT_FIELD_NUMBER: _ClassVar[int]
    LEFT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    RIGHT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    seconds: float
    unavailable_s: float
    left: KeyRange
    right: KeyRange
    left_epoch: int
    right_epoch: int
    def __init__(self, seconds: _Optional[float] = ..., unavailable_s: _Optional[float] = ..., left: _Optional[_Union[KeyRange, _Mapping]] = ..., right: _Optional[_Union[KeyRange, _Mapping]] = ..., left_epoch: _Optional[int] = ..., right_epoch: _Optional[int] = ...) -> None: ...

class MergeRequest(_message.Message):
    __slots__ = ("left_id", "right_id", "merged_id", "map_version")
    LEFT_ID_FIELD_NUMBER: _ClassVar[int]
    RIGHT_ID_FIELD_NUMBER: _ClassVar[int]
    MERGED_ID_FIELD_NUMBER: _ClassVar[int]
    MAP_VERSION_FIELD_NUMBER: _ClassVar[int]
    left_id: int
    right_id: int
    merged_id: int
    map_version: int
    def __init__(self, left_id: _Optional[int] = ..., right_id: _Optional[int] = ..., merged_id: _Optional[int] = ..., map_version: _Optional[int] = ...) -> None: ...

class MergeReply(_message.Message):
    __slots__ = ("seconds", "unavailable_s", "range", "epoch")
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_S_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    seconds: float
    unavailable_s: float
    range: KeyRange
    epoch: int
    def __init__(self, seconds: _Optional[float] = ..., unavailable_s: _Optional[float] = ..., range: _Optional[_Union[KeyRange, _Mapping]] = ..., epoch: _Optional[int] = ...) -> None: ...

class GeoCopyRequest(_message.Message):
    __slots__ = ("partition_id", "account")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    account: str
    def __init__(self, partition_id: _Optional[int] = ..., account: _Optional[str] = ...) -> None: ...

class GeoCopyReply(_message.Message):
    __slots__ = ("lsn", "rows", "bytes", "target")
    LSN_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    lsn: int
    rows: int
    bytes: int
    target: str
    def __init__(self, lsn: _Optional[int] = ..., rows: _Optional[int] = ..., bytes: _Optional[int] = ..., target: _Optional[str] = ...) -> None: ...

class ReleaseExtentsRequest(_message.Message):
    __slots__ = ("partition_id", "dry_run")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    dry_run: bool
    def __init__(self, partition_id: _Optional[int] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class StreamRelease(_message.Message):
    __slots__ = ("kind", "stream", "dropped", "dropped_bytes", "unreferenced", "unreferenced_bytes")
    KIND_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_BYTES_FIELD_NUMBER: _ClassVar[int]
    UNREFERENCED_FIELD_NUMBER: _ClassVar[int]
    UNREFERENCED_BYTES_FIELD_NUMBER: _ClassVar[int]
    kind: str
    stream: str
    dropped: _containers.RepeatedScalarFieldContainer[int]
    dropped_bytes: int
    unreferenced: _containers.RepeatedScalarFieldContainer[int]
    unreferenced_bytes: int
    def __init__(self, kind: _Optional[str] = ..., stream: _Optional[str] = ..., dropped: _Optional[_Iterable[int]] = ..., dropped_bytes: _Optional[int] = ..., unreferenced: _Optional[_Iterable[int]] = ..., unreferenced_bytes: _Optional[int] = ...) -> None: ...

class ReleaseExtentsReply(_message.Message):
    __slots__ = ("partition_id", "streams", "skipped")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    streams: _containers.RepeatedCompositeFieldContainer[StreamRelease]
    skipped: str
    def __init__(self, partition_id: _Optional[int] = ..., streams: _Optional[_Iterable[_Union[StreamRelease, _Mapping]]] = ..., skipped: _Optional[str] = ...) -> None: ...

class ServerStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ServerLoad(_message.Message):
    __slots__ = ("name", "address", "partitions", "registration")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REGISTRATION_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionLoad]
    registration: int
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionLoad, _Mapping]]] = ..., registration: _Optional[int] = ...) -> None: ...

class HeartbeatReply(_message.Message):
    __slots__ = ("not_yours",)
    NOT_YOURS_FIELD_NUMBER: _ClassVar[int]
    not_yours: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, not_yours: _Optional[_Iterable[int]] = ...) -> None: ...

class PartitionEntry(_message.Message):
    __slots__ = ("id", "range", "server", "address")
    ID_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    id: int
    range: KeyRange
    server: str
    address: str
    def __init__(self, id: _Optional[int] = ..., range: _Optional[_Union[KeyRange, _Mapping]] = ..., server: _Optional[str] = ..., address: _Optional[str] = ...) -> None: ...

class PartitionMap(_message.Message):
    __slots__ = ("version", "partitions")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    version: int
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionEntry]
    def __init__(self, version: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[PartitionEntry, _Mapping]]] = ...) -> None: ...

class GetMapRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MoveRequest(_message.Message):
    __slots__ = ("partition_id", "server")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    server: str
    def __init__(self, partition_id: _Optional[int] = ..., server: _Optional[str] = ...) -> None: ...

class SplitPartitionRequest(_message.Message):
    __slots__ = ("partition_id", "key", "trigger")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    key: bytes
    trigger: str
    def __init__(self, partition_id: _Optional[int] = ..., key: _Optional[bytes] = ..., trigger: _Optional[str] = ...) -> None: ...

class MergePartitionsRequest(_message.Message):
    __slots__ = ("left_id", "right_id", "trigger")
    LEFT_ID_FIELD_NUMBER: _ClassVar[int]
    RIGHT_ID_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    left_id: int
    right_id: int
    trigger: str
    def __init__(self, left_id: _Optional[int] = ..., right_id: _Optional[int] = ..., trigger: _Optional[str] = ...) -> None: ...

class PartitionOpReply(_message.Message):
    __slots__ = ("done", "map")
    DONE_FIELD_NUMBER: _ClassVar[int]
    MAP_FIELD_NUMBER: _ClassVar[int]
    done: HistoryEntry
    map: PartitionMap
    def __init__(self, done: _Optional[_Union[HistoryEntry, _Mapping]] = ..., map: _Optional[_Union[PartitionMap, _Mapping]] = ...) -> None: ...

class HistoryEntry(_message.Message):
    __slots__ = ("op", "trigger", "from_ids", "to_ids", "key", "server", "started_at", "seconds", "unavailable_s", "result", "map_version")
    OP_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    FROM_IDS_FIELD_NUMBER: _ClassVar[int]
    TO_IDS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_S_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    MAP_VERSION_FIELD_NUMBER: _ClassVar[int]
    op: str
    trigger: str
    from_ids: _containers.RepeatedScalarFieldContainer[int]
    to_ids: _containers.RepeatedScalarFieldContainer[int]
    key: bytes
    server: str
    started_at: float
    seconds: float
    unavailable_s: float
    result: str
    map_version: int
    def __init__(self, op: _Optional[str] = ..., trigger: _Optional[str] = ..., from_ids: _Optional[_Iterable[int]] = ..., to_ids: _Optional[_Iterable[int]] = ..., key: _Optional[bytes] = ..., server: _Optional[str] = ..., started_at: _Optional[float] = ..., seconds: _Optional[float] = ..., unavailable_s: _Optional[float] = ..., result: _Optional[str] = ..., map_version: _Optional[int] = ...) -> None: ...

class HistoryRequest(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class HistoryReply(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[HistoryEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[HistoryEntry, _Mapping]]] = ...) -> None: ...

class BalanceRequest(_message.Message):
    __slots__ = ("dry_run",)
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    dry_run: bool
    def __init__(self, dry_run: _Optional[bool] = ...) -> None: ...

class BalanceAction(_message.Message):
    __slots__ = ("op", "partition_ids", "key", "server", "trigger", "reason")
    OP_FIELD_NUMBER: _ClassVar[int]
    PARTITION_IDS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    op: str
    partition_ids: _containers.RepeatedScalarFieldContainer[int]
    key: bytes
    server: str
    trigger: str
    reason: str
    def __init__(self, op: _Optional[str] = ..., partition_ids: _Optional[_Iterable[int]] = ..., key: _Optional[bytes] = ..., server: _Optional[str] = ..., trigger: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class BalanceReply(_message.Message):
    __slots__ = ("actions", "skipped")
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    actions: _containers.RepeatedCompositeFieldContainer[BalanceAction]
    skipped: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, actions: _Optional[_Iterable[_Union[BalanceAction, _Mapping]]] = ..., skipped: _Optional[_Iterable[str]] = ...) -> None: ...

class ManagerStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ManagerStatusReply(_message.Message):
    __slots__ = ("name", "leader", "leader_address", "map_version", "servers")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MAP_VERSION_FIELD_NUMBER: _ClassVar[int]
    SERVERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    leader: bool
    leader_address: str
    map_version: int
    servers: _containers.RepeatedCompositeFieldContainer[ServerLoad]
    def __init__(self, name: _Optional[str] = ..., leader: _Optional[bool] = ..., leader_address: _Optional[str] = ..., map_version: _Optional[int] = ..., servers: _Optional[_Iterable[_Union[ServerLoad, _Mapping]]] = ...) -> None: ...
