from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class ArmRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: str
    def __init__(self, spec: _Optional[str] = ...) -> None: ...

class ArmReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DisarmRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DisarmReply(_message.Message):
    __slots__ = ("armed",)
    class ArmedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ARMED_FIELD_NUMBER: _ClassVar[int]
    armed: _containers.ScalarMap[str, str]
    def __init__(self, armed: _Optional[_Mapping[str, str]] = ...) -> None: ...

class IsolateRequest(_message.Message):
    __slots__ = ("peers",)
    PEERS_FIELD_NUMBER: _ClassVar[int]
    peers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, peers: _Optional[_Iterable[str]] = ...) -> None: ...

class HealRequest(_message.Message):
    __slots__ = ("peers",)
    PEERS_FIELD_NUMBER: _ClassVar[int]
    peers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, peers: _Optional[_Iterable[str]] = ...) -> None: ...

class IsolateReply(_message.Message):
    __slots__ = ("cut",)
    CUT_FIELD_NUMBER: _ClassVar[int]
    cut: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cut: _Optional[_Iterable[str]] = ...) -> None: ...
