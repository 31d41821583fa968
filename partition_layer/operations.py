"""Log and entity operations as pure decisions (§5): given the rows an operation reads, what
it answers and which rows it writes. No I/O, no clock: the partition's committer reads the
rows first (memtable, checkpoints), then applies a whole group commit here in order, each
operation seeing the writes of the ones before it (`Overlay`).

Contract: `apply(view, version)` either raises a StampError and writes nothing, or returns
(result, mutations) where every mutated row carries `version` — the operation's LSN, or
above every version a replicated row brought (committer._version) — so an ETag changes with
every write of its row, and replaying the commit log (which holds the rows as written)
rebuilds exactly the same rows.
A name is a log or an entity group, never both (§5), fixed by its first write: its
KIND_META row holds LogMeta or the ENTITY_GROUP mark, and an operation of the other kind is
refused with InvalidArgument, writing nothing. A log's rows: its KIND_META row (first_seq,
next_seq, sealed), one KIND_TOKEN row per append token, and one KIND_RECORD row per append,
keyed by the sequence number of its last record (record_batch.py). An entity group's rows:
its KIND_META mark, one KIND_ENTITY row per entity, and one KIND_TOKEN row per entity write
that carried a token (EntityToken: a retry is answered from it, §5; merges drop it after
ENTITY_TOKEN_TTL_MS).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from common import faults
from common.errors import (
    InvalidArgument,
    NotFound,
    OutOfRange,
    PreconditionFailed,
    Sealed,
)
from partition_layer import keys
from partition_layer.record_batch import encode_records
from partition_layer.rows import (
    ENTITY_GROUP,
    BlobRef,
    EntityToken,
    LogMeta,
    Row,
    TokenEntry,
    etag_of,
    is_entity_group,
    is_entity_token,
)

Mutation = tuple[bytes, Row]
T = TypeVar("T")
# How long an entity write's token answers retries: far past any client's retry window
# (PartitionLimits.client_timeout_ms, 30 s by default), so a retry never outlives its token.
ENTITY_TOKEN_TTL_MS = 600_000


class _computed_once(Generic[T]):
    """functools.cached_property without the lock Python 3.11 takes on every first access
    (about 2% of a small append's time in a profile of the committer): the value is
    computed on first use and stored in the instance dict, which then shadows this
    descriptor. Operations are used by one event loop, so no lock is needed."""

    def __init__(self, compute: Callable[[Any], T]) -> None:
        self._compute = compute
        self.__doc__ = compute.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, instance: Any, owner: type | None = None) -> T:
        if instance is None:
            return self  # type: ignore[return-value]
        value = self._compute(instance)
        instance.__dict__[self._name] = value
        return value

EMPTY_LOG = LogMeta(first_seq=0, next_seq=0, sealed=False)


class RowView(Protocol):
    def row(self, key: bytes) -> Row | None:
        """The live row at `key` (None: absent or deleted)."""


class Overlay:
    """Rows read before the group commit, with the writes of its earlier operations on top."""

    def __init__(self, base: dict[bytes, Row | None]) -> None:
        self._base = base
        self._written: dict[bytes, Row | None] = {}

    def row(self, key: bytes) -> Row | None:
        if key in self._written:
            return self._written[key]
        assert key in self._base, f"operation read a row it did not declare: {key!r}"
        return self._base[key]

    def write(self, mutations: Iterable[Mutation]) -> None:
        for key, row in mutations:
            self._written[key] = None if row.tombstone else row


def log_meta_of(row: Row | None, pname: str) -> LogMeta:
    """The state of log `pname` from its KIND_META row (None: a name never written, an empty
    log); InvalidArgument when the name is an entity group."""
    if row is None or row.value is None:
        return EMPTY_LOG
    if is_entity_group(row.value):
        raise InvalidArgument(f"{pname!r} is an entity group, not a log")
    return LogMeta.decode(row.value)


def check_entity_group(row: Row | None, pname: str) -> None:
    """Refuse an entity operation on a name whose KIND_META row makes it a log."""
    if row is not None and row.value is not None and not is_entity_group(row.value):
        raise InvalidArgument(f"{pname!r} is a log, not an entity group")


def log_meta(view: RowView, key: bytes, pname: str = "") -> LogMeta:
    """The state of the log whose KIND_META row is at `key`."""
    return log_meta_of(view.row(key), pname)


def meta_key(account: str, pname: str) -> bytes:
    return keys.encode_key(account, pname, keys.KIND_META, b"")


def record_key(account: str, log: str, seq: int) -> bytes:
    return keys.encode_key(account, log, keys.KIND_RECORD, keys.seq_row(seq))


def entity_key(account: str, group: str, row: bytes) -> bytes:
    return keys.encode_key(account, group, keys.KIND_ENTITY, row)


def token_key(account: str, pname: str, token: str) -> bytes:
    return keys.encode_key(account, pname, keys.KIND_TOKEN, token.encode())


@dataclass(frozen=True)
class Operation:
    account: str
    pname: str

    def reads(self) -> list[bytes]:
        """Every key `apply` looks at."""
        raise NotImplementedError

    @_computed_once
    def log_meta_key(self) -> bytes:
        """The key of its partition name's KIND_META row (computed once: an operation
        looks it up, reads it and writes it, on the hot path of every append)."""
        return meta_key(self.account, self.pname)

    def apply(self, view: RowView, lsn: int) -> tuple[Any, list[Mutation]]:
        raise NotImplementedError

    @property
    def log(self) -> bool:
        """Whether it changes a log's records (subscribers wake up)."""
        return False


# ---- logs ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LogAppend(Operation):
    """An append of `records` with `crcs`, the CRC32C of each as the client sent it
    (verified on arrival: they are stored beside the records, record_batch.py); or, when the
    records were large enough to go to blob data first (written once, §4), of `count`
    records held at `blob` (their encoded batch, CRCs included)."""

    records: tuple[bytes, ...] = ()
    token: str = ""
    blob: BlobRef | None = None
    count: int = 0
    crcs: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        assert (self.blob is None) == (self.count == 0), "a blob append says how many records"
        assert (self.blob is None) != (not self.records), "records, or a blob of them"
        assert len(self.crcs) == len(self.records), "one CRC32C per record"

    @property
    def record_count(self) -> int:
        return self.count if self.blob is not None else len(self.records)

    @property
    def log(self) -> bool:
        return True

    @_computed_once
    def token_key(self) -> bytes:
        return token_key(self.account, self.pname, self.token)

    def reads(self) -> list[bytes]:
        return [self.log_meta_key, self.token_key] if self.token else [self.log_meta_key]

    def apply(self, view: RowView, lsn: int) -> tuple[int, list[Mutation]]:
        meta = log_meta(view, self.log_meta_key, self.pname)
        if self.token:
            seen = view.row(self.token_key)
            if seen is not None and seen.value is not None:
                entry = TokenEntry.decode(seen.value)
                if entry.count != self.record_count:
                    raise InvalidArgument(f"token {self.token!r} was used for an append of "
                                          f"{entry.count} records, not {self.record_count}")
                return entry.first_seq, []  # a retry: the original answer, nothing appended
        if meta.sealed:
            raise Sealed(f"log {self.pname!r} is sealed")
        first = meta.next_seq
        if faults.hit("ps.append.bug_drop_acknowledged") is not None:
            # A broken build for the chaos run's checker to catch (issue 19): the append
            # is answered as if made, and nothing is written.
            return first, []
        count = self.record_count
        last = first + count - 1
        # One row for the whole append, keyed by its last record (record_batch.py).
        row = (Row(lsn, blob=self.blob) if self.blob is not None
               else Row(lsn, value=encode_records(self.records, self.crcs)))
        mutations = [(record_key(self.account, self.pname, last), row)]
        grown = LogMeta(meta.first_seq, first + count, False)
        mutations.append((self.log_meta_key, Row(lsn, value=grown.encode())))
        if self.token:
            entry = TokenEntry(first, count)
            mutations.append((self.token_key, Row(lsn, value=entry.encode())))
        return first, mutations


@dataclass(frozen=True)
class LogTrim(Operation):
    upto_seq: int = 0

    def reads(self) -> list[bytes]:
        return [self.log_meta_key]

    def apply(self, view: RowView, lsn: int) -> tuple[None, list[Mutation]]:
        meta = log_meta(view, self.log_meta_key, self.pname)
        if self.upto_seq > meta.next_seq:
            raise OutOfRange(f"log {self.pname!r} ends at {meta.next_seq}: cannot trim up to "
                             f"{self.upto_seq}")
        if self.upto_seq <= meta.first_seq:
            return None, []  # trimmed that far already
        # The records below stay until a checkpoint or merge drops them (partition_layer
        # merge); reads below first_seq fail from now on.
        trimmed = LogMeta(self.upto_seq, meta.next_seq, meta.sealed)
        return None, [(self.log_meta_key, Row(lsn, value=trimmed.encode()))]


@dataclass(frozen=True)
class LogSeal(Operation):
    def reads(self) -> list[bytes]:
        return [self.log_meta_key]

    @property
    def log(self) -> bool:
        return True  # subscribers learn that nothing more will come

    def apply(self, view: RowView, lsn: int) -> tuple[None, list[Mutation]]:
        meta = log_meta(view, self.log_meta_key, self.pname)
        if meta.sealed:
            return None, []
        sealed = LogMeta(meta.first_seq, meta.next_seq, True)
        return None, [(self.log_meta_key, Row(lsn, value=sealed.encode()))]


# ---- entities --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Write:
    """One entity write: a put (value or blob, with the CRC32C its writer sent, stored
    beside it) or a delete, with its conditions."""

    kind: str  # "put" or "delete"
    row: bytes
    value: bytes | None = None
    blob: BlobRef | None = None
    if_match: str = ""
    if_none_match: bool = False
    value_crc: int | None = None

    def check(self, current: Row | None) -> None:
        if self.kind == "delete" and current is None:
            raise NotFound(f"no row {self.row!r}")
        if self.if_none_match and current is not None:
            raise PreconditionFailed(f"row {self.row!r} exists (if_none_match)")
        if self.if_match and (current is None or etag_of(current.version) != self.if_match):
            raise PreconditionFailed(f"row {self.row!r}: ETag does not match "
                                     f"{self.if_match!r}")

    def new_row(self, lsn: int) -> Row:
        if self.kind == "delete":
            return Row(lsn, tombstone=True)
        if self.blob is not None:
            return Row(lsn, blob=self.blob, value_crc=self.value_crc)
        assert self.value is not None
        return Row(lsn, value=self.value, value_crc=self.value_crc)


@dataclass(frozen=True)
class EntityWrite(Operation):
    """put, delete, or batch: several writes to one entity group, all or none. With a
    `token`, a retry of a write that committed is answered from its EntityToken (the ETags
    it gave) and writes nothing: a retried put cannot undo a later write. `written_at_ms`
    (the server's wall clock when it was received) dates the token for its expiry."""

    writes: tuple[Write, ...] = field(default_factory=tuple)
    token: str = ""
    written_at_ms: int = 0

    def key(self, write: Write) -> bytes:
        return entity_key(self.account, self.pname, write.row)

    @_computed_once
    def token_key(self) -> bytes:
        return token_key(self.account, self.pname, self.token)

    def reads(self) -> list[bytes]:
        reads = [self.log_meta_key, *(self.key(w) for w in self.writes)]
        return [*reads, self.token_key] if self.token else reads

    def apply(self, view: RowView, lsn: int) -> tuple[list[str], list[Mutation]]:
        meta = view.row(self.log_meta_key)
        check_entity_group(meta, self.pname)
        if self.token:
            seen = view.row(self.token_key)
            if seen is not None and seen.value is not None:
                return self._retried(seen.value), []
        written: dict[bytes, Row | None] = {}
        mutations: list[Mutation] = []
        etags: list[str] = []
        for write in self.writes:
            key = self.key(write)
            current = written[key] if key in written else view.row(key)
            write.check(current)
            row = write.new_row(lsn)
            written[key] = None if row.tombstone else row
            mutations.append((key, row))
            etags.append("" if row.tombstone else etag_of(lsn))
        if meta is None:  # the name's first write makes it an entity group for good
            mutations.append((self.log_meta_key, Row(lsn, value=ENTITY_GROUP)))
        if self.token:
            puts = tuple(w.kind == "put" for w in self.writes)
            entry = EntityToken(lsn, self.written_at_ms, puts)
            mutations.append((self.token_key, Row(lsn, value=entry.encode())))
        return etags, mutations

    def _retried(self, value: bytes) -> list[str]:
        """The answer the first attempt with this token got."""
        puts = tuple(w.kind == "put" for w in self.writes)
        if not is_entity_token(value):
            raise InvalidArgument(f"token {self.token!r} was used for an append")
        entry = EntityToken.decode(value)
        if entry.puts != puts:
            raise InvalidArgument(f"token {self.token!r} was used for another write")
        return [etag_of(entry.version) if put else "" for put in entry.puts]


# ---- inter-stamp replication (issue 30) -------------------------------------------------------

@dataclass(frozen=True)
class Replicated(Operation):
    """Rows one operation of the primary stamp committed for this partition name, applied at
    the secondary as they are: their versions are the primary's (so ETags, and the append
    and entity tokens among the rows, mean at the secondary what they meant there), not
    this partition's LSN: the one exception to the module contract's `version=lsn`.

    It reads nothing and decides nothing: the primary decided. Applying it again writes the
    same rows (idempotent), and the shipper sends a name's operations in the primary's
    commit order and the next only after this one is durable here (location/shipping rules),
    so the secondary passes through the primary's states of the name, in order."""

    rows: tuple[Mutation, ...] = ()

    def reads(self) -> list[bytes]:
        return []

    @property
    def log(self) -> bool:
        return True  # a subscriber at the secondary (read access) sees the records come

    def apply(self, view: RowView, lsn: int) -> tuple[None, list[Mutation]]:
        return None, list(self.rows)


def validate_writes(writes: Iterable[Write]) -> None:
    """Refuse what no state could make right (before anything is queued)."""
    for write in writes:
        if write.kind not in ("put", "delete"):
            raise InvalidArgument(f"a batch item is put or delete, not {write.kind!r}")
        if not write.row:
            raise InvalidArgument("a row key is not empty")
        if write.if_match and write.if_none_match:
            raise InvalidArgument("if_match and if_none_match exclude each other")
