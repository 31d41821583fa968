"""Append blobs on the partition layer, as pure decisions (the Azure Blob REST subset of DESIGN
§6; I/O in frontend/blob_store.py, HTTP in frontend/blob_server.py).

The mapping:
- A container is an entity group of its account, `$c/CONTAINER/GEN` (GEN fixed when the
  container is created: one deleted and created again starts empty). Containers are rows of
  the account's entity group `$containers`. `$` is outside the SDK's names
  (frontend/names.py), so neither can meet a log or an entity group of the Stamp SDK.
- An append blob is, in its container's group, a properties row `b/NAME` (length, appends,
  sealed, metadata, content headers, its generation, the last append) and its bytes as
  records: rows `d/NAME \\0 GEN END`, END the blob offset where the record ends (8 bytes, big
  endian). Key order is offset order, so the record holding byte X is the first row at or
  after END = X + 1: that is the offset index, and a ranged read touches only the records
  it returns.
- An Append Block is one atomic batch of the group: the properties row, written on the
  condition that its ETag is the one the decision was made on, and the block cut into
  records of at most `blob_record_bytes_max`. Two appenders racing for a position: one
  batch commits, the other's condition fails and it decides again on what is there now.
- The blob's ETag is its properties row's ETag: it changes with every append, metadata write
  and seal.

Why the records live in an entity group and not in a log of the partition layer (§5): an
append blob behaves as a log (append-only records, read by position through the offset
index), but the service's appends are conditional (appendpos, maxsize, If-Match, sealed) and
change the blob's ETag, length and block count with the bytes, atomically. A log's append is
unconditional, and a name is a log or an entity group, never both, so no log append can be
made atomic with a properties row; an entity group's batch is exactly that (conditions on
one row, several rows written all or none), and keys in offset order give the index.

Contract: `decide_append` either raises BlobError (the service's status and code) or says
what to write; it never reads the clock (the caller passes `now_ms`).
"""

from __future__ import annotations

import email.utils
import functools
import json
import re
from dataclasses import asdict, dataclass, field, replace

CONTAINERS_GROUP = "$containers"
PROPS_PREFIX = b"b/"
DATA_PREFIX = b"d/"
NAME_END = b"\x00"
OFFSET_BYTES = 8
# A blob name's UTF-8 bytes: Azure allows 1024 characters; a data row's key (prefix, name,
# separator, generation, offset) must stay within partition.row_bytes_max (1 KiB).
BLOB_NAME_BYTES_MAX = 960
GEN_BYTES = 8
BLOB_TYPE = "AppendBlob"
HTTP_DATES_CACHED_MAX = 64
# Azure's limit on a blob's or container's metadata: names and values together.
METADATA_BYTES_MAX = 8 * 1024
# The methods of every read blob_handlers.route serves (HTTP's safe methods): any other
# method writes (refused at an account's secondary: blob_server.py; a forwarded read's
# answer is streamed: blob_forward.py).
READ_METHODS = frozenset({"GET", "HEAD"})
# Azure's rule for metadata names: C# identifiers (here their ASCII part: header names are
# ASCII). They become XML element names in List Blobs / List Containers.
METADATA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Characters XML 1.0 cannot carry, escaped or not (C0 controls but tab, LF and CR;
# surrogates; U+FFFE, U+FFFF), and DEL; CR and LF too, which an XML reader rewrites: a name
# holding one would list as another name. A blob name, a metadata value, or a List
# parameter echoed in XML holds none of them.
XML_UNSAFE = re.compile("[\x00-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


class BlobError(Exception):
    """An answer of the service other than success: HTTP status, x-ms-error-code, message."""

    def __init__(self, status: int, code: str, message: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


def container_group(container: str, gen: str) -> str:
    return f"$c/{container}/{gen}"


def props_row(name: str) -> bytes:
    return PROPS_PREFIX + name.encode()


def name_of_props_row(row: bytes) -> str:
    return row[len(PROPS_PREFIX):].decode()


def data_row(name: str, gen: str, end: int) -> bytes:
    return data_prefix(name, gen) + end.to_bytes(OFFSET_BYTES, "big")


def data_prefix(name: str, gen: str) -> bytes:
    return DATA_PREFIX + name.encode() + NAME_END + bytes.fromhex(gen)


def end_of_data_row(row: bytes) -> int:
    return int.from_bytes(row[-OFFSET_BYTES:], "big")


def check_blob_name(name: str) -> str:
    if (not name or len(name.encode("utf-8", "surrogateescape")) > BLOB_NAME_BYTES_MAX
            or XML_UNSAFE.search(name)):
        raise BlobError(400, "InvalidResourceName",
                        f"a blob name has 1 to {BLOB_NAME_BYTES_MAX} UTF-8 bytes and no "
                        f"control characters")
    return name


def check_metadata(metadata: dict[str, str]) -> dict[str, str]:
    """`metadata` if Azure would take it: names C# identifiers, distinct regardless of case,
    values printable ASCII (tab allowed: HTTP header values), at most METADATA_BYTES_MAX
    in all; else 400 InvalidMetadata or MetadataTooLarge."""
    seen: set[str] = set()
    total = 0
    for name, value in metadata.items():
        if not METADATA_NAME.fullmatch(name) or name.lower() in seen:
            raise BlobError(400, "InvalidMetadata", "The metadata specified is invalid: a "
                            "metadata name is a C# identifier (a letter or _, then letters, "
                            "digits or _), given once.")
        if not value.isascii() or XML_UNSAFE.search(value.replace("\t", " ")):
            raise BlobError(400, "InvalidMetadata", "The metadata specified is invalid: a "
                            "metadata value is printable ASCII.")
        seen.add(name.lower())
        total += len(name) + len(value)
    if total > METADATA_BYTES_MAX:
        raise BlobError(400, "MetadataTooLarge", f"The size of the specified metadata exceeds "
                        f"the maximum size permitted ({METADATA_BYTES_MAX} bytes).")
    return metadata


# ---- ETags and dates -----------------------------------------------------------------------

def http_etag(row_etag: str) -> str:
    """The service's form of a row's ETag ('"1a2b"' -> '"0x1A2B"')."""
    return f'"0x{row_etag.strip(chr(34)).upper()}"'


def row_etag(http: str) -> str:
    """The row ETag an HTTP ETag names ('' when it names none of ours: it matches nothing)."""
    text = http.strip().strip('"')
    if not text.startswith("0x") or not text[2:]:
        return ""
    try:
        return f'"{int(text[2:], 16):x}"'
    except ValueError:
        return ""


def http_date(ms: int) -> str:
    """An HTTP date (whole seconds) of `ms` since the epoch."""
    return _http_date_of_second(ms // 1000)


@functools.lru_cache(maxsize=HTTP_DATES_CACHED_MAX)
def _http_date_of_second(second: int) -> str:
    # Every answer carries a date or two, mostly of this second or the last few: formatting
    # them once each is a few microseconds less per request.
    return email.utils.formatdate(second, usegmt=True)


# ---- properties ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Props:
    """An append blob's properties row. `last` is the last append, (offset, length, CRC32C
    of its bytes): a retry of it (same position, same bytes) is answered as done."""

    gen: str
    created_ms: int
    modified_ms: int
    length: int = 0
    appends: int = 0
    sealed: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    content: dict[str, str] = field(default_factory=dict)  # content headers as set
    last: tuple[int, int, int] | None = None

    def encode(self) -> bytes:
        # Field by field, not dataclasses.asdict: this runs once per Append Block, and
        # asdict's deep copy cost more than the rest of the encoding in a profile.
        return json.dumps({"gen": self.gen, "created_ms": self.created_ms,
                           "modified_ms": self.modified_ms, "length": self.length,
                           "appends": self.appends, "sealed": self.sealed,
                           "metadata": self.metadata, "content": self.content,
                           "last": self.last}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Props:
        raw = json.loads(data)
        last = raw.pop("last", None)
        return cls(**raw, last=tuple(last) if last is not None else None)


@dataclass(frozen=True)
class Container:
    """A container's row in `$containers`; `deleted_ms` set while its name stays taken."""

    gen: str
    created_ms: int
    metadata: dict[str, str] = field(default_factory=dict)
    deleted_ms: int = 0

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> Container:
        return cls(**json.loads(data))


# ---- conditions ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Conditions:
    """The conditions a request states (HTTP If-* and x-ms-blob-condition-* headers)."""

    if_match: str | None = None  # an HTTP ETag or "*"
    if_none_match: str | None = None
    appendpos: int | None = None
    maxsize: int | None = None
    if_modified_since_s: int | None = None  # HTTP dates: whole seconds since the epoch
    if_unmodified_since_s: int | None = None


def check_etag_conditions(conds: Conditions, etag: str | None, read: bool,
                          modified_ms: int | None = None) -> None:
    """If-Match / If-None-Match against the resource's row ETag (None: no such resource),
    If-Modified-Since / If-Unmodified-Since against its last modification (`modified_ms`).
    A read whose If-None-Match matches, or that is not modified since, is 304 Not Modified;
    every other failed condition is 412 ConditionNotMet."""
    _check_dates(conds, modified_ms, read)
    wanted = conds.if_match
    if wanted is not None and (etag is None or (wanted.strip() != "*"
                                                and row_etag(wanted) != etag)):
        raise BlobError(412, "ConditionNotMet",
                        "The condition specified using HTTP conditional header(s) is not met.")
    if conds.if_none_match is not None and etag is not None:
        wanted = conds.if_none_match.strip()
        if wanted == "*" or row_etag(wanted) == etag:
            if read:
                raise BlobError(304, "ConditionNotMet", "Not modified.")
            raise BlobError(412, "ConditionNotMet",
                            "The condition specified using HTTP conditional header(s) is not "
                            "met.")


def _check_dates(conds: Conditions, modified_ms: int | None, read: bool) -> None:
    if modified_ms is None:
        return
    modified_s = modified_ms // 1000  # HTTP dates have whole seconds
    if conds.if_unmodified_since_s is not None and modified_s > conds.if_unmodified_since_s:
        raise BlobError(412, "ConditionNotMet",
                        "The condition specified using HTTP conditional header(s) is not met.")
    if conds.if_modified_since_s is not None and modified_s <= conds.if_modified_since_s:
        if read:
            raise BlobError(304, "ConditionNotMet", "Not modified.")
        raise BlobError(412, "ConditionNotMet",
                        "The condition specified using HTTP conditional header(s) is not met.")


@dataclass(frozen=True)
class Dedup:
    """The append is a retry of the blob's last append: answer it as done, write nothing."""

    offset: int


@dataclass(frozen=True)
class Write:
    """Write `props` (on the condition of the ETag decided on) and the block at `offset`."""

    offset: int
    props: Props


def decide_append(props: Props, etag: str, size: int, crc: int, conds: Conditions,
                  now_ms: int, appends_max: int) -> Dedup | Write:
    """What an Append Block of `size` bytes with CRC32C `crc` does to the blob `props`
    (its row ETag `etag`), under `conds`; BlobError when the service refuses it.

    A request with an append position whose bytes are exactly the blob's last append at that
    position is answered as done (Dedup): it is a retry of an append whose answer was lost
    (the SDK's chunked upload states the position of every block after its first), and
    the blob already holds what it asks for."""
    last = props.last
    if (conds.appendpos is not None and last is not None and conds.appendpos == last[0]
            and (size, crc) == (last[1], last[2]) and props.length == last[0] + last[1]):
        return Dedup(last[0])
    check_etag_conditions(conds, etag, read=False, modified_ms=props.modified_ms)
    if props.sealed:
        raise BlobError(409, "BlobIsSealed", "The blob is sealed and its contents cannot be "
                        "modified.")
    if conds.maxsize is not None and props.length + size > conds.maxsize:
        raise BlobError(412, "MaxBlobSizeConditionNotMet",
                        "The max blob size condition specified was not met.")
    if conds.appendpos is not None and conds.appendpos != props.length:
        raise BlobError(412, "AppendPositionConditionNotMet",
                        "The append position condition specified was not met.")
    if props.appends >= appends_max:
        raise BlobError(409, "BlockCountExceedsLimit",
                        f"The committed block count cannot exceed the maximum limit of "
                        f"{appends_max} blocks.")
    grown = replace(props, length=props.length + size, appends=props.appends + 1,
                    modified_ms=now_ms, last=(props.length, size, crc))
    return Write(props.length, grown)


def records_of(block: bytes, offset: int, record_bytes: int) -> list[tuple[int, bytes]]:
    """`block`, appended at `offset`, cut into records: (end offset, bytes) each."""
    view = memoryview(block)
    return [(offset + min(at + record_bytes, len(block)),
             bytes(view[at:at + record_bytes])) for at in range(0, len(block), record_bytes)]


# ---- ranges --------------------------------------------------------------------------------

def parse_range(text: str | None, size: int) -> tuple[int, int] | None:
    """The byte range [start, end) a Range / x-ms-range header asks of a blob of `size`
    bytes (None: the whole blob); 416 InvalidRange when it starts at or past the end."""
    if text is None or not text.strip():
        return None
    unit, _, spec = text.strip().partition("=")
    first, dash, last = spec.partition("-")
    try:
        if unit != "bytes" or not dash or "," in spec:
            raise ValueError(text)
        if not first:  # a suffix: the last N bytes
            count = int(last)
            if count <= 0:
                raise ValueError(text)
            return (max(0, size - count), size) if size else _unsatisfiable(size)
        start = int(first)
        end = int(last) + 1 if last else None
        if start < 0 or (end is not None and end <= start):
            raise ValueError(text)
    except ValueError:
        return None  # the service ignores a malformed range and returns the whole blob
    if start >= size:
        return _unsatisfiable(size)
    return start, size if end is None else min(end, size)


def _unsatisfiable(size: int) -> tuple[int, int]:
    raise BlobError(416, "InvalidRange", "The range specified is invalid for the current "
                    "size of the resource.", {"Content-Range": f"bytes */{size}"})
