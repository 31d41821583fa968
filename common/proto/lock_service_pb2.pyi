from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AcquireRequest(_message.Message):
    __slots__ = ("name", "holder", "ttl_s", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    holder: str
    ttl_s: float
    request_id: str
    def __init__(self, name: _Optional[str] = ..., holder: _Optional[str] = ..., ttl_s: _Optional[float] = ..., request_id: _Optional[str] = ...) -> None: ...

class AcquireReply(_message.Message):
    __slots__ = ("granted", "token", "holder", "holder_token")
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    HOLDER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    granted: bool
    token: int
    holder: str
    holder_token: int
    def __init__(self, granted: _Optional[bool] = ..., token: _Optional[int] = ..., holder: _Optional[str] = ..., holder_token: _Optional[int] = ...) -> None: ...

class WaitFreeRequest(_message.Message):
    __slots__ = ("name", "timeout_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    timeout_s: float
    def __init__(self, name: _Optional[str] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class WaitFreeReply(_message.Message):
    __slots__ = ("free",)
    FREE_FIELD_NUMBER: _ClassVar[int]
    free: bool
    def __init__(self, free: _Optional[bool] = ...) -> None: ...

class OpenSessionRequest(_message.Message):
    __slots__ = ("holder", "ttl_s", "request_id")
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    holder: str
    ttl_s: float
    request_id: str
    def __init__(self, holder: _Optional[str] = ..., ttl_s: _Optional[float] = ..., request_id: _Optional[str] = ...) -> None: ...

class RenewRequest(_message.Message):
    __slots__ = ("token", "ttl_s")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    token: int
    ttl_s: float
    def __init__(self, token: _Optional[int] = ..., ttl_s: _Optional[float] = ...) -> None: ...

class RenewReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RenewManyRequest(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[RenewRequest]
    def __init__(self, leases: _Optional[_Iterable[_Union[RenewRequest, _Mapping]]] = ...) -> None: ...

class RenewManyReply(_message.Message):
    __slots__ = ("ended",)
    ENDED_FIELD_NUMBER: _ClassVar[int]
    ended: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ended: _Optional[_Iterable[int]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: int
    def __init__(self, token: _Optional[int] = ...) -> None: ...

class ReleaseReply(_message.Message):
    __slots__ = ("existed",)
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    existed: bool
    def __init__(self, existed: _Optional[bool] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class GetReply(_message.Message):
    __slots__ = ("found", "value", "version")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    found: bool
    value: bytes
    version: int
    def __init__(self, found: _Optional[bool] = ..., value: _Optional[bytes] = ..., version: _Optional[int] = ...) -> None: ...

class PutRequest(_message.Message):
    __slots__ = ("key", "value", "expected_version", "lease_token", "fence_token", "request_id")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FENCE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    expected_version: int
    lease_token: int
    fence_token: int
    request_id: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., expected_version: _Optional[int] = ..., lease_token: _Optional[int] = ..., fence_token: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class PutReply(_message.Message):
    __slots__ = ("written", "version")
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    written: bool
    version: int
    def __init__(self, written: _Optional[bool] = ..., version: _Optional[int] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("key", "expected_version", "fence_token", "request_id")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    FENCE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    key: str
    expected_version: int
    fence_token: int
    request_id: str
    def __init__(self, key: _Optional[str] = ..., expected_version: _Optional[int] = ..., fence_token: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class DeleteReply(_message.Message):
    __slots__ = ("deleted", "version")
    DELETED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    version: int
    def __init__(self, deleted: _Optional[bool] = ..., version: _Optional[int] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("prefix", "limit", "with_values")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    WITH_VALUES_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    limit: int
    with_values: bool
    def __init__(self, prefix: _Optional[str] = ..., limit: _Optional[int] = ..., with_values: _Optional[bool] = ...) -> None: ...

class ListReply(_message.Message):
    __slots__ = ("keys", "values", "versions")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    values: _containers.RepeatedScalarFieldContainer[bytes]
    versions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., values: _Optional[_Iterable[bytes]] = ..., versions: _Optional[_Iterable[int]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("with_digest",)
    WITH_DIGEST_FIELD_NUMBER: _ClassVar[int]
    with_digest: bool
    def __init__(self, with_digest: _Optional[bool] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("name", "raft_address", "role", "leader", "term", "commit_index", "last_applied", "applied", "digest", "state_time", "leases", "keys", "journal_syncs")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_APPLIED_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    STATE_TIME_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_SYNCS_FIELD_NUMBER: _ClassVar[int]
    name: str
    raft_address: str
    role: str
    leader: str
    term: int
    commit_index: int
    last_applied: int
    applied: int
    digest: str
    state_time: float
    leases: int
    keys: int
    journal_syncs: int
    def __init__(self, name: _Optional[str] = ..., raft_address: _Optional[str] = ..., role: _Optional[str] = ..., leader: _Optional[str] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., last_applied: _Optional[int] = ..., applied: _Optional[int] = ..., digest: _Optional[str] = ..., state_time: _Optional[float] = ..., leases: _Optional[int] = ..., keys: _Optional[int] = ..., journal_syncs: _Optional[int] = ...) -> None: ...

class ListLeasesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LeaseInfo(_message.Message):
    __slots__ = ("token", "holder", "lock", "ttl_s", "expires_in_s", "keys")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    LOCK_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_IN_S_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    token: int
    holder: str
    lock: str
    ttl_s: float
    expires_in_s: float
    keys: int
    def __init__(self, token: _Optional[int] = ..., holder: _Optional[str] = ..., lock: _Optional[str] = ..., ttl_s: _Optional[float] = ..., expires_in_s: _Optional[float] = ..., keys: _Optional[int] = ...) -> None: ...

class ListLeasesReply(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[LeaseInfo]
    def __init__(self, leases: _Optional[_Iterable[_Union[LeaseInfo, _Mapping]]] = ...) -> None: ...
