"""The object table's order-preserving key encoding (§4).

A key is the tuple (account: str, pname: str, kind: int, row: bytes). Its encoding:

    escape(utf8(account)) 00 01  escape(utf8(pname)) 00 01  kind  row

where `escape` turns every 00 byte into 00 FF. The terminator 00 01 sorts below any escaped
byte (00 FF) and any plain byte (01..FF), so a string sorts before its extensions; UTF-8 byte
order is code-point order. `row` is the last component and is stored raw.

Contract: for any two tuples a, b (strings compared by their UTF-8 bytes)
`encode_key(*a) < encode_key(*b)` exactly when `a < b`, and `decode_key(encode_key(*a)) == a`
(property-tested in tests/unit/test_pl_keys.py). Every key of one partition name shares
`pname_prefix(account, pname)`; kinds order a name's rows: its meta row, then its tokens,
then its log records or its entities.

A partition name is a log or an entity group, never both (§5): its KIND_META row says which
(operations.py), and log records and entities have kinds of their own, so no key of one is
ever a key of the other — an entity whose row is 8 bytes cannot land on a log record.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from common.errors import InvalidArgument

# Key kinds. Until issue 15 log records and entities shared kind 2, so an entity put could
# overwrite a log's records. Keys written in that layout are not migrated (no stamp holding
# data was deployed): such a name reads as a log whose entities are hidden.
KIND_META = 0  # one row per name, row=b"": LogMeta for a log, the entity-group mark (rows.py)
KIND_TOKEN = 1  # one row per mutation token, row=token bytes: TokenEntry or EntityToken
KIND_RECORD = 2  # a log's records: one row per append, row = seq_row(its last record)
KIND_ENTITY = 3  # an entity group's rows, row = the user's row key
KIND_MAX = 0xFF

SEQ_BYTES = 8
# Every operation encodes a few keys of one partition name: their prefixes are remembered.
PREFIXES_CACHED = 16_384
_ESCAPE = b"\x00\xff"
_TERMINATOR = b"\x00\x01"


def _encode_component(text: str) -> bytes:
    return text.encode("utf-8").replace(b"\x00", _ESCAPE) + _TERMINATOR


def account_prefix(account: str) -> bytes:
    """The prefix of every key of `account`."""
    return _encode_component(account)


def pname_prefix(account: str, pname: str) -> bytes:
    """The prefix of every key of one partition name (a log or an entity group)."""
    return _encode_component(account) + _encode_component(pname)


@functools.lru_cache(maxsize=PREFIXES_CACHED)
def kind_prefix(account: str, pname: str, kind: int) -> bytes:
    """The prefix of every key of one kind within a partition name."""
    if not 0 <= kind <= KIND_MAX:
        raise InvalidArgument(f"key kind {kind} is not a byte")
    return pname_prefix(account, pname) + bytes((kind,))


def encode_key(account: str, pname: str, kind: int, row: bytes) -> bytes:
    return kind_prefix(account, pname, kind) + bytes(row)


def _decode_component(key: bytes, pos: int) -> tuple[str, int]:
    """The string starting at `pos` and the position after its terminator."""
    parts: list[bytes] = []
    while True:
        zero = key.find(b"\x00", pos)
        if zero < 0 or zero + 1 >= len(key):
            raise InvalidArgument(f"malformed key {key.hex()}: unterminated component")
        parts.append(key[pos:zero])
        marker = key[zero + 1]
        pos = zero + 2
        if marker == 0x01:
            break
        if marker != 0xFF:
            raise InvalidArgument(f"malformed key {key.hex()}: bad escape at {zero}")
        parts.append(b"\x00")
    try:
        return b"".join(parts).decode("utf-8"), pos
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"malformed key {key.hex()}: {exc}") from exc


def decode_key(key: bytes) -> tuple[str, str, int, bytes]:
    account, pos = _decode_component(key, 0)
    pname, pos = _decode_component(key, pos)
    if pos >= len(key):
        raise InvalidArgument(f"malformed key {key.hex()}: no kind byte")
    return account, pname, key[pos], key[pos + 1:]


def kind_offset(key: bytes) -> int:
    """Where the kind byte of an encoded key sits: `key[:i]` is its pname prefix, `key[i]` its
    kind, `key[i + 1:]` its row. Cheaper than decode_key (no string decoding): an escaped 00
    is 00 FF, so the first two 00 01 pairs are the terminators."""
    first = key.find(_TERMINATOR)
    second = key.find(_TERMINATOR, first + 2) if first >= 0 else -1
    if second < 0 or second + 2 >= len(key):
        raise InvalidArgument(f"malformed key {key.hex()}")
    return second + 2


def seq_row(seq: int) -> bytes:
    """The row of log record `seq`: 8 bytes big-endian, so records sort by sequence."""
    if not 0 <= seq < 1 << (8 * SEQ_BYTES):
        raise InvalidArgument(f"sequence number {seq} out of range")
    return seq.to_bytes(SEQ_BYTES, "big")


def row_seq(row: bytes) -> int:
    if len(row) != SEQ_BYTES:
        raise InvalidArgument(f"a log record's row is {SEQ_BYTES} bytes, not {len(row)}")
    return int.from_bytes(row, "big")


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with `prefix`; None is the end of
    the key space (the prefix is empty or all FF)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes((stripped[-1] + 1,))


def name_range(account: str, prefix: str) -> tuple[bytes, bytes]:
    """[low, high) of the keys of every name of `account` starting with `prefix`."""
    # A name's encoding begins with its escaped UTF-8 bytes: the prefix's, unterminated. The
    # smallest such name is the prefix itself (its terminator 00 01 sorts below any byte).
    names = account_prefix(account) + prefix.encode("utf-8").replace(b"\x00", b"\x00\xff")
    high = prefix_end(names)
    assert high is not None  # ends in the account's terminator 00 01 or a name's bytes
    return pname_prefix(account, prefix), high


@dataclass(frozen=True)
class KeyRange:
    """The keys [low, high) of a range partition; high None is the end of the key space."""

    low: bytes
    high: bytes | None

    def __post_init__(self) -> None:
        if self.high is not None and self.high <= self.low:
            raise InvalidArgument(f"empty key range [{self.low.hex()}, {self.high.hex()})")

    def contains(self, key: bytes) -> bool:
        return self.low <= key and (self.high is None or key < self.high)

    def to_dict(self) -> dict[str, Any]:
        return {"low": self.low.hex(), "high": None if self.high is None else self.high.hex()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KeyRange:
        high = d["high"]
        return cls(bytes.fromhex(d["low"]), None if high is None else bytes.fromhex(high))


WHOLE_KEY_SPACE = KeyRange(b"", None)
